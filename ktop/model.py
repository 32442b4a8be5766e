"""The Snapshot: immutable data every pane renders from.

Collectors produce it, widgets, the snapshot writer and the tests consume it. Nothing here
imports bcc or Textual, so the UI can be driven from recorded data without root.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ktop.frozen import quick_init
from ktop.histogram import Bucket as Bucket  # (its own module: pane models import it)
from ktop.panes.blockio.model import BlockProfile as BlockProfile  # the block I/O pane's
from ktop.panes.blockio.model import DiskStats as DiskStats
from ktop.panes.blockio.model import IoProcess as IoProcess
from ktop.panes.blockio.model import IoRequest as IoRequest
from ktop.panes.blockio.model import IoSubmitStack as IoSubmitStack
from ktop.panes.endings.model import EndingsProfile
from ktop.panes.processes.model import ProcessRow as ProcessRow  # the processes pane's rows
from ktop.panes.processes.model import TaskCounts as TaskCounts
from ktop.panes.syscalls.model import SyscallProfile  # a pane's own profile
from ktop.userframe import UserFrame as UserFrame  # (its own module: pane models import it)

T = TypeVar("T")

# Pane names, used as keys of Snapshot.unavailable and in --drill (ktop.registry has each pane).
PANE_FUNCTIONS = "functions"
PANE_LOCKS = "locks"
PANE_BLOCKIO = "blockio"
PANE_PROCESSES = "processes"
PANE_WAITS = "waits"

# The pid of rows that fold together processes (or threads) that have exited, one row per
# command, in the totals kept since start: pids churn, and the totals must stay bounded.
EXITED_PID = -1


class BuiltOnRead(Sequence[T], Generic[T]):
    """A tuple made the first time it is read, by whichever thread reads it. A live CPU
    profile holds thousands of stacks at high sampling rates, and only a drill-down, a filter
    or an export reads them: built every refresh, they were a third of the aggregation.
    `make` must only use data nothing changes any more."""

    __slots__ = ("_items", "_lock", "_make")

    def __init__(self, make: Callable[[], tuple[T, ...]]) -> None:
        self._make: Callable[[], tuple[T, ...]] | None = make
        self._items: tuple[T, ...] | None = None
        self._lock = threading.Lock()

    def _built(self) -> tuple[T, ...]:
        if self._items is None:
            with self._lock:
                if self._make is not None:
                    self._items, self._make = self._make(), None
        assert self._items is not None
        return self._items

    def __getitem__(self, index: Any) -> Any:
        return self._built()[index]

    def __len__(self) -> int:
        return len(self._built())

    def __iter__(self) -> Iterator[T]:
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return self._built() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as unhashable as the stacks it may hold

    def __repr__(self) -> str:
        return repr(self._built())

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (self._built(),)


# The module of a user "frame" at an address no code can be at (the stack walk went astray).
NOT_CODE = "[not code]"




# ktop's own processes (itself, its BPF compiler while it runs): the CPU sampler does not walk
# their user stacks (bpf/cpu.bpf.c says why); their stacks carry this frame instead, so a
# drill-down into ktop says so.
OWN_USER_STACK = UserFrame("[not walked: ktop's own user stack]", "[ktop]")


@quick_init
@dataclass(frozen=True, slots=True)
class StackSample:
    """Samples of one (pid, kernel stack, user stack) taken by the CPU sampler."""

    pid: int
    comm: str
    samples: int
    frames: tuple[str, ...]  # kernel frames "symbol+0xoff", innermost first
    modules: tuple[str, ...] = ()  # module of each kernel frame ("[kernel.kallsyms]", "[ext4]")
    user_frames: tuple[UserFrame, ...] = ()  # innermost first, below the kernel frames
    truncated: bool = False  # deeper than the collected depth
    idle: bool = False  # the idle task inside an idle function
    sources: tuple[str, ...] = ()  # "fs/read_write.c:482" per kernel frame, with a debug vmlinux
    cgroup: str = ""  # cgroup v2 path relative to its mount ("/" the root); "" if unknown
    # A rare stack of the totals since start: only the function its samples landed in was
    # kept, its one frame without an offset (ktop keeps a bounded number of whole stacks, see
    # aggregate/cpu.py STACKS_KEPT).
    callers_dropped: bool = False


@quick_init
@dataclass(frozen=True, slots=True)
class HotFunction:
    symbol: str
    module: str
    samples: int
    percent: float  # samples / (hz x window x cpus) x 100: a share of the machine's CPU time
    idle: bool = False
    # Samples whose stack holds the function anywhere (perf's Children), and their share.
    children: int = 0
    children_percent: float = 0.0
    # Of `children`, the idle task's idling: left out of Children while idle is hidden.
    idle_children: int = 0

    def busy_children(self) -> tuple[int, float]:
        """Children and their share without the idle task's idling."""
        busy = self.children - self.idle_children
        return busy, (self.children_percent * busy / self.children if self.children else 0.0)


@quick_init
@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Share of CPU time from /proc/stat over the window (exact accounting, not samples)."""

    user: float = 0.0  # user + nice
    kernel: float = 0.0  # system + irq + softirq
    idle: float = 0.0  # without iowait (recordings made before ktop kept iowait: with it)
    steal: float = 0.0
    ticks: int = 0  # the /proc/stat ticks these are shares of: what weighs them in a sum
    iowait: float = 0.0  # idle while I/O was outstanding: vmstat's wa
    # Of `kernel`, hard and soft interrupt time (top's hi and si; 0 in records made before).
    irq: float = 0.0
    softirq: float = 0.0

    @property
    def system(self) -> float:
        """Kernel time outside interrupts: top's sy."""
        return max(0.0, self.kernel - self.irq - self.softirq)


@quick_init
@dataclass(frozen=True, slots=True)
class CpuProfile:
    sample_hz: int
    cpus: int
    window_s: float  # the span the samples were taken in
    cumulative: bool
    total_samples: int
    idle_samples: int
    kernel_samples: int
    user_samples: int
    lost: Mapping[str, int]
    functions: tuple[HotFunction, ...]  # every function, idle ones flagged; sorted by samples
    stacks: Sequence[StackSample]  # most samples first; live profiles build it when read
    times: CpuTimes = field(default_factory=CpuTimes)
    line_info: str = ""  # where kernel file:line comes from, or why there is none

    @property
    def expected_samples(self) -> int:
        return round(self.sample_hz * self.window_s * self.cpus)


@quick_init
@dataclass(frozen=True, slots=True)
class LockStack:
    frames: tuple[str, ...]
    contended: int
    total_wait_ns: int
    max_wait_ns: int = 0


@quick_init
@dataclass(frozen=True, slots=True)
class LockUserStack:
    """A user-space stack of the tasks that waited, with their waits."""

    frames: tuple[UserFrame, ...]  # innermost first
    contended: int
    total_wait_ns: int


@quick_init
@dataclass(frozen=True, slots=True)
class LockTask:
    pid: int
    comm: str
    contended: int
    total_wait_ns: int
    max_wait_ns: int = 0
    cgroup: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class LockTaskStack:
    """The waits of one task under one kernel stack and user stack: what ties a lock wait's
    stack to who waited (the exports' flame graphs and labels need it; the pane does not)."""

    pid: int
    comm: str
    frames: tuple[str, ...]  # kernel, innermost first
    user_frames: tuple[UserFrame, ...]  # innermost first; () for kernel threads
    contended: int
    total_wait_ns: int


@quick_init
@dataclass(frozen=True, slots=True)
class LockCaller:
    caller: str
    type: str
    contended: int
    total_wait_ns: int
    max_wait_ns: int
    min_wait_ns: int
    stacks: tuple[LockStack, ...] = ()
    hist_ns: tuple[Bucket, ...] = ()  # wait times
    tasks: tuple[LockTask, ...] = ()  # the tasks that waited here
    user_stacks: tuple[LockUserStack, ...] = ()
    task_stacks: tuple[LockTaskStack, ...] = ()

    @property
    def avg_wait_ns(self) -> int:
        return self.total_wait_ns // self.contended if self.contended else 0


@quick_init
@dataclass(frozen=True, slots=True)
class LockAddress:
    address: str  # "0xffff..."
    symbol: str  # kallsyms name for global locks, "" otherwise
    type: str
    contended: int
    total_wait_ns: int
    max_wait_ns: int = 0
    # What the lock is, by kind: "&mm->mmap_lock", "&inode->i_rwsem", "runqueues.__lock",
    # the kallsyms symbol...; "" when unknown. Rows of one name group in the names view.
    name: str = ""
    instance: str = ""  # which one: "pid 1234 (python3)", "CPU 1", "/tmp/dir"


# LockOwnerWait.owner: who held the lock when the wait began.
OWNER_TASK = "task"  # the task in the lock's owner field (mutex; rwsem held for write)
OWNER_READERS = "readers"  # an rwsem held for read: no single owner
OWNER_UNKNOWN = "unknown"  # the owner field empty (just released, changing hands)
OWNER_UNTRACED = "untraced"  # owners not traced on this kernel (LockProfile.notes says why)


@quick_init
@dataclass(frozen=True, slots=True)
class LockOwnerWait:
    """Waits for one sleeping lock at one caller, charged to who held the lock when each
    wait began (perf lock contention -o). Spinning locks record no owner: they have none."""

    owner: str  # OWNER_*
    pid: int  # the owner thread; 0 unless owner is OWNER_TASK
    tgid: int
    comm: str
    frames: tuple[str, ...]  # the owner's kernel stack when it woke the waiter, innermost first
    stack_note: str  # why frames is empty ("" when it is not)
    caller: str  # the waiter's caller, as LockCaller.caller
    type: str
    address: str  # the lock, as LockAddress.address
    contended: int
    total_wait_ns: int
    max_wait_ns: int = 0


@quick_init
@dataclass(frozen=True, slots=True)
class LockProfile:
    events: int
    lost: Mapping[str, int]
    callers: tuple[LockCaller, ...]
    locks: tuple[LockAddress, ...]
    tasks: tuple[LockTask, ...]
    window_s: float = 0.0
    owners: tuple[LockOwnerWait, ...] = ()  # by total wait, most first
    notes: tuple[str, ...] = ()  # why owners or names are left out on this kernel


@quick_init
@dataclass(frozen=True, slots=True)
class DiskIo:
    """One whole disk's /proc/diskstats counters, grown over a span: what iostat -x computes
    its columns from (ktop.aggregate.diskstats does the same). Times are in ms as the kernel
    counts them; sectors are 512 bytes."""

    disk: str
    major: int
    minor: int
    reads: int = 0  # completed
    read_merges: int = 0
    read_sectors: int = 0
    read_ms: int = 0  # summed over the reads, queue included (r_await's)
    writes: int = 0
    write_merges: int = 0
    write_sectors: int = 0
    write_ms: int = 0
    in_flight: int = 0  # at the span's end, not grown
    busy_ms: int = 0  # with at least one request in flight (%util's)
    queue_ms: int = 0  # requests x time in flight (aqu-sz's)
    discards: int = 0
    discard_merges: int = 0
    discard_sectors: int = 0
    discard_ms: int = 0
    flushes: int = 0
    flush_ms: int = 0


@quick_init
@dataclass(frozen=True, slots=True)
class IostatProfile:
    """Every whole disk's counters over span_s seconds (the disks view of the block pane)."""

    span_s: float
    disks: tuple[DiskIo, ...]

    @property
    def duration_s(self) -> float:  # as a window's interval is asked its length
        return self.span_s


@quick_init
@dataclass(frozen=True, slots=True)
class SelfCostRow:
    """What ktop itself cost over the last interval, in % of one CPU: its own process, and
    its BPF programs (charged by the kernel to the tasks they interrupted; None when the
    kernel cannot count their run time)."""

    cpu_percent: float
    bpf_percent: float | None
    # The BPF run time by pane, in % of one CPU, most first (empty when not counted).
    bpf_panes: Mapping[str, float] = field(default_factory=dict)
    # The BPF figures are those of the latest refresh of every this many (the kernel's
    # run-time statistics, which cost every program run, are on only then).
    bpf_every: int = 1
    # --max-cost (% of one CPU, 0: none) and the steps in force past it (BUDGET_STEPS' names).
    max_cost: float = 0.0
    budget_steps: tuple[str, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class Snapshot:
    ktop_version: str
    kernel: str
    hostname: str
    taken_at: float  # unix time
    duration_s: float  # the window the data covers
    headers: str  # which kernel headers BPF was compiled against
    cpu: CpuProfile | None
    processes: tuple[ProcessRow, ...]
    locks: LockProfile | None = None
    blockio: BlockProfile | None = None
    waits: WaitProfile | None = None
    endings: EndingsProfile | None = None
    syscalls: SyscallProfile | None = None
    pressure: Pressure | None = None  # PSI avg10, from /proc/pressure
    cgroup_pressure: Pressure | None = None  # the --cgroup's own, from its *.pressure files
    cgroup_pressure_of: str = ""  # that cgroup v2's path
    iostat: IostatProfile | None = None  # /proc/diskstats over the window (needs no root)
    unavailable: Mapping[str, str] = field(default_factory=dict)  # pane -> one-line reason
    loading: Mapping[str, str] = field(default_factory=dict)  # pane -> what it is doing now
    cost: SelfCostRow | None = None  # ktop's own, while live
    tasks: TaskCounts | None = None  # beside processes, from the same refresh
    # The /proc/stat split (needs no root) when there is no CpuProfile to carry it.
    cpu_times: CpuTimes | None = None
    paused: bool = False
    cumulative: bool = False  # the figures are since start (key c), not the last window


# ---- waits (off-CPU): ktop/aggregate/waits.py builds these, ktop/waitviews.py queries them ----


# The waker of the time blocked waits had run so far at an interval's end: they were still
# going on then (a wait spanning intervals is split at each end).
WAKER_WAITING = "[still waiting]"


@quick_init
@dataclass(frozen=True, slots=True)
class WaitWaker:
    """Who ended some of a stack's blocked waits: offwaketime's one hop."""

    pid: int  # 0 for an interrupt or no wake-up seen (comm says which)
    comm: str  # the waker's command, "[hardirq]", "[softirq]", "[nmi]", "[interrupt]"
    # (not walked), "[no wake-up seen]", or WAKER_WAITING
    frames: tuple[str, ...]  # the waker's kernel frames, innermost first ("" if not walked)
    count: int
    total_ns: int


@quick_init
@dataclass(frozen=True, slots=True)
class WaitStack:
    """Blocked waits of one process at one (state, kernel stack, user stack)."""

    pid: int
    comm: str
    cgroup: str
    state: str  # "S", "D" or "other", as the thread left the CPU
    reason: str  # the first meaningful blocking frame ("do_nanosleep", "io_schedule ← ...")
    frames: tuple[str, ...]  # kernel frames "symbol+0xoff", innermost first, tracing cut
    user: tuple[UserFrame, ...]
    count: int
    total_ns: int
    max_ns: int
    hist: tuple[int, ...]  # log2 slots of wait in us (WAIT_HIST_SLOTS)
    wakers: tuple[WaitWaker, ...]
    # 0: every wait counted as it was; N: some (or all) of its waits' stacks were walked for
    # a random 1 in N, and those are counted N times (the rest leave the not-walked entry).
    sampled_every: int = 0


@quick_init
@dataclass(frozen=True, slots=True)
class WaitProcess:
    """One process's time in the window, every wait counted (threads summed)."""

    pid: int
    comm: str
    cgroup: str
    on_cpu_ns: int
    runq_ns: int
    runq_count: int
    blocked_s_ns: int
    blocked_d_ns: int
    blocked_other_ns: int
    blocked_count: int
    runq_hist: tuple[int, ...]  # log2 slots of run-queue wait in us
    reason: str = ""  # the reason with most blocked time in this process's stacks


@quick_init
@dataclass(frozen=True, slots=True)
class WaitProfile:
    processes: tuple[WaitProcess, ...]  # by blocked + run-queue time, most first
    stacks: tuple[WaitStack, ...]  # by total wait, most first
    lost: Mapping[str, int]  # by reason, over the profile's span (as every pane's lost)
    notes: Mapping[str, int] = field(default_factory=dict)  # counted, not losses
    min_walk_us: int = 0  # stacks walked for S (and other) waits predicted at least this long
    min_walk_d_us: int = 0  # and for D waits
    window_s: float = 0.0
    # Stacks walked for a random 1 in this many waits predicted short (0: none), and of
    # those predicted long (1: every one); the walked ones are scaled (WaitStack.sampled_every).
    short_walk_every: int = 0
    long_walk_every: int = 1


@quick_init
@dataclass(frozen=True, slots=True)
class Pressure:
    """PSI avg10 (% of the last 10 s): some task stalled, or all did (full)."""

    cpu_some: float
    cpu_full: float | None
    io_some: float
    io_full: float | None
    memory_some: float
    memory_full: float | None
