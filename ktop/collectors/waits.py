"""Waits: bpf/waits.bpf.c on the raw tracepoints sched_switch / sched_waking /
sched_wakeup(_new) (and task_rename / cgroup_attach_task, which say when a thread's name
changes), drained every interval: where threads' time goes when they are not on a CPU, and
who woke them."""

from __future__ import annotations

import ctypes as ct
import os
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import (
    TRACEFS,
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
)
from ktop.collectors.bpfsys import (
    RowLayout,
    attach_raw_tracepoint,
    row_layout,
    run_raw_tracepoint_program,
    task_name,
)
from ktop.collectors.btf import BTF_PATH, BtfError, KernelBtf
from ktop.collectors.maps import (
    MAP_GENERATION,
    SharedAddresses,
    TwoGenerationProgram,
    forget_entries,
)
from ktop.losses import kernel_names, note_names
from ktop.model import WAKER_WAITING

PROGRAM = "waits.bpf.c"
# Raw tracepoints, attached in this order: first the rare ones that tell the program a
# thread's command or cgroup changed (it reads them only then, not at every switch), so that
# no name is read before a change of it is watched; then switch, so a wait never begins
# unseen after its wake-up is watched; wakeup_new last (a thread it misses is first seen at
# its switch-in).
FUNCTIONS = {
    "on_task_rename": "task:task_rename",
    "on_cgroup_attach_task": "cgroup:cgroup_attach_task",
    "on_sched_switch": "sched:sched_switch",
    "on_sched_waking": "sched:sched_waking",
    "on_sched_wakeup": "sched:sched_wakeup",
    "on_sched_wakeup_new": "sched:sched_wakeup_new",
}
TRACEPOINTS = list(FUNCTIONS.values())
FLIP = "waits_flip"  # run by drain(), attached nowhere
FLIP_THREADS = 11  # threads (their keys) a run of FLIP takes (bpf/waits.bpf.c)
FLIP_SETTLE, FLIP_END = 0, 1  # what a run of FLIP does (its args[0])
# Map names, as bpf/waits.bpf.c declares them.
MAP_THREADS = "threads"
MAP_PROCS = ("procs_0", "procs_1")
MAP_WAIT_STACKS = ("wait_stacks_0", "wait_stacks_1")
MAP_STACKS = "stacks"  # a hash of the frames -> the frames
MAP_USER_STACKS = "user_stacks"
MAP_HASH_SEED = "hash_seed"
MAP_WALK_EVERY = "walk_every"  # [short, long]: walk 1 in N waits' stacks (bpf/waits.bpf.c)
WALK_SHORT, WALK_LONG = 0, 1
# Short waits (predicted under the minimum) have their stacks walked for a random 1 in this
# many, scaled by it when shown: their reasons are named, where they were all lumped under
# "[not walked: a short wait]" (34% of a database backend's waits, its futex time read at a
# third of what it was). A walk costs ~2 us: at 200,000 switches a second, 1 in 64 is
# ~0.6% of a CPU.
SHORT_WALK_EVERY = 64
MAX_WALK_EVERY = 1 << 15  # the program keeps N in 16 bits
DEFAULT_WALK_EVERY = (SHORT_WALK_EVERY, 1)  # [short, long]: every long wait's walked
LOST_NAMES = kernel_names("waits")  # its `lost` array, as its C enum orders it
# Counted by the program but not losses: the first wait of each thread that was already
# waiting when ktop started, and long waits whose stacks were not predicted (their time is
# in every total; only the stack views lack them). Shown apart, as notes.
NOT_LOSSES = note_names("waits")
HIST_SLOTS = 32  # WAIT_HIST_SLOTS: slot k >= 1 holds [2^(k-1), 2^k) us, slot 0 under 1 us
STATES = ("S", "D", "other")  # enum wait_state
NOT_WALKED = -2  # -ENOENT: the stack was not walked (a short wait predicted)
NOT_WALKED_LONG = -62  # -ETIME: not walked, predicted short, ended long (past the minimum)
SCALE_LONG_END = 1 << 16  # in a key's scale: a sample of the waits that ended long
STILL_WAITING = -115  # -EINPROGRESS as a waker's stack: the wait went on past the interval
WAKER_NONE = "[no wake-up seen]"  # the waker of a wait whose wake-up was not seen
# A waker's stack not walked, the wake-up run on an interrupt's stack: no task woke it.
IN_INTERRUPT = -4  # -EINTR
WAKER_INTERRUPT = "[interrupt]"
MAX_MIN_WALK_US = 10_000_000


@dataclass(frozen=True)
class WalkMinimums:
    """How long a wait must be predicted to get its stacks walked, in µs, by the state it
    blocks in: D (uninterruptible: I/O), and S with the rest (pipes, futexes, polls,
    timers; stopped, idle kernel threads). Every wait's time is counted whatever these."""

    s_us: int
    d_us: int

    def __str__(self) -> str:
        return f"S={self.s_us},D={self.d_us}"


# D from 10 µs: direct reads here wait 16-128 µs, and at 100 µs only 13% of a dd
# iflag=direct reader's I/O time kept its stack. S from 1 ms: S waits are the
# switch-heavy kind (a pipe ping-pong's are ~30 µs), and walking them cost it ~10%
# (README, the waits pane's cost).
DEFAULT_MIN_WALK = WalkMinimums(s_us=1000, d_us=10)
# Stacks read, remembered by key (a hash of their frames) for the threads still blocked
# on them and the stacks that come back; past this many each, forgotten and read anew.
STACKS_REMEMBERED = 8192

class ProcessTimes(NamedTuple):
    """One (process, command, cgroup)'s time in an interval, every wait counted. (Named
    tuples: made thousands of times a drain, where a frozen dataclass costs ~2 us more.)"""

    pid: int
    comm: str
    cgroup: str
    on_cpu_ns: int
    runq_ns: int
    runq_count: int
    blocked_ns: tuple[int, int, int]  # by STATES
    blocked_count: tuple[int, int, int]
    runq_hist: tuple[int, ...]  # HIST_SLOTS, without the empty slots past the last used one
    # Switches of its threads the tracepoint never showed: it ran, its time unknown.
    switches_unseen: int = 0


class BlockedStack(NamedTuple):
    """Blocked waits of one process at one (state, kernel stack, user stack), by waker."""

    pid: int
    comm: str
    cgroup: str
    state: str  # one of STATES
    kernel: tuple[int, ...]  # innermost first; () when not walked or lost
    kernel_error: int  # 0, or -errno (NOT_WALKED: a wait predicted short)
    user: tuple[int, ...]
    user_error: int
    # The task running when the wake-up came: in an interrupt, the task it interrupted
    # (the aggregator tells by the waker's stack). 0 and WAKER_NONE: no wake-up seen.
    waker_pid: int
    waker_comm: str
    waker_kernel: tuple[int, ...]
    waker_error: int
    total_ns: int
    count: int
    max_ns: int
    hist: tuple[int, ...]  # HIST_SLOTS, without the empty slots past the last used one
    # 0: every such wait is counted here; N: a random 1 in N of them (their stacks walked by
    # sampling), the rest counted not walked: shown scaled by N.
    scale: int = 0
    # A sample (scale N) of the waits predicted short that ended long: their unwalked peers
    # are the rows of kernel_error NOT_WALKED_LONG, those of the others NOT_WALKED.
    long_end: bool = False


def check_walk_every(every: int) -> int:
    """A walk period as the program takes it: 0 (never), 1 (every wait) or a power of two
    up to MAX_WALK_EVERY (ValueError otherwise)."""
    if every < 0 or every > MAX_WALK_EVERY or every & (every - 1):
        raise ValueError(f"a walk period of {every}: give 0, 1 or a power of two up to "
                         f"{MAX_WALK_EVERY}")
    return every


@dataclass(frozen=True)
class WaitDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    processes: tuple[ProcessTimes, ...]
    stacks: tuple[BlockedStack, ...]
    lost: dict[str, int]  # cumulative since start, by reason
    notes: dict[str, int]  # cumulative counts that are not losses (NOT_LOSSES)
    # The processes that were on a CPU or on a run queue in the interval: every thread's
    # time is counted whatever its length, so one not here did neither. None when a thread
    # or a process went uncounted in it (RAN_UNKNOWN_AFTER).
    ran: frozenset[int] | None = None
    walk_every: tuple[int, int] = (0, 1)  # the collector's [short, long] at the drain


# Losses after which `ran` is not known: a thread without a record, a process without
# totals, a program run the kernel skipped.
RAN_UNKNOWN_AFTER = ("threads_map_full", "procs_map_full", "recursion_misses")


def parse_min_walk(text: str) -> WalkMinimums:
    """The --offcpu-min value: "US" for every state (as perf's --off-cpu-thresh), or
    "S=US,D=US" (either alone keeps the other's default); ValueError with the one-line
    reason."""
    def micros(value: str, what: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"--offcpu-min {what}{value!r} is not a whole number of "
                             "microseconds (e.g. 10, or S=1000,D=10)") from None
        if not 0 <= number <= MAX_MIN_WALK_US:
            raise ValueError(f"--offcpu-min {what}{number} is out of range: use 0 to "
                             f"{MAX_MIN_WALK_US} µs")
        return number

    if "=" not in text:
        value = micros(text.strip(), "")
        return WalkMinimums(s_us=value, d_us=value)
    given: dict[str, int] = {}
    for part in text.split(","):
        state, equals, value = part.partition("=")
        state = state.strip().upper()
        if state not in ("S", "D") or not equals:
            raise ValueError(f"--offcpu-min {text!r}: give US, or S=US,D=US (S and D are the "
                             "states whose waits' stacks are walked from US µs)")
        if state in given:
            raise ValueError(f"--offcpu-min {text!r} gives {state} twice")
        given[state] = micros(value.strip(), f"{state}=")
    return WalkMinimums(s_us=given.get("S", DEFAULT_MIN_WALK.s_us),
                        d_us=given.get("D", DEFAULT_MIN_WALK.d_us))


def raw_name(tracepoint: str) -> str:
    """A raw tracepoint's name: "sched:sched_switch" -> "sched_switch"."""
    return tracepoint.split(":", 1)[1]


def require_sched_tracepoints(root: str = TRACEFS) -> None:
    require_tracepoints(TRACEPOINTS, "sched, task and cgroup tracepoints, Linux >= 4.x", root)


def task_flags(btf: KernelBtf) -> list[str]:
    """-D flags with what bpf/waits.bpf.c reads of tasks and of sched_switch on this kernel;
    Unavailable when it cannot."""
    try:
        offset, size = btf.member("task_struct", "pid")
        if size != 4:
            raise BtfError(f"task_struct.pid is {size} bytes, not 4")
        flags = [f"-DTASK_PID={offset}"]
        offset, size = btf.member("task_struct", "stack")
        if size != 8:
            raise BtfError(f"task_struct.stack is {size} bytes, not 8")
        flags.append(f"-DTASK_STACK={offset}")
        if btf.tracepoint_arity("sched_switch") >= 4:  # prev_state passed since Linux 5.18
            flags.append("-DSWITCH_STATE_ARG=3")
        else:
            try:
                offset, _ = btf.member("task_struct", "__state")  # Linux 5.14+
            except BtfError:
                offset, _ = btf.member("task_struct", "state")
            flags.append(f"-DTASK_STATE={offset}")
    except BtfError as e:
        raise Unavailable(f"cannot read the scheduler's tasks on this kernel: {e}") from None
    return flags


def _trimmed_hists(layout: RowLayout, field: str, values: bytes) -> Iterator[slice]:
    """Row by row, the slice of a histogram field holding its slots up to the last non-empty
    one (most waits fill a few low slots; trimmed here from the bytes, ~10x faster than
    slot by slot in Python)."""
    where = layout.index[field]
    assert isinstance(where, slice)
    first, slots = where.start, where.stop - where.start
    offset, size = layout.offset_of(field), layout.size
    width = slots and layout.field_size(field) // slots
    for at in range(offset, len(values), size):
        used = len(values[at:at + slots * width].rstrip(b"\0"))
        yield slice(first, first + (used + width - 1) // width)


def _layouts(table) -> tuple[RowLayout, RowLayout]:  # noqa: ANN001 - a BpfMap
    return row_layout(table.Key), row_layout(table.Leaf)


def _waker_comm(pid: int, raw: bytes, waker_stack: int) -> str:
    if waker_stack == STILL_WAITING:
        return WAKER_WAITING
    if waker_stack == IN_INTERRUPT:
        return WAKER_INTERRUPT
    if pid == 0 and not raw.strip(b"\0"):
        return WAKER_NONE
    return task_name(raw)


class HashedStacks:
    """Stacks by key (a hash of their frames), read from a map the program adds to and user
    space empties after each drain: each is read once, and remembered while it is named (a
    thread blocked for minutes names its stack in every interval, under "still waiting").
    Past STACKS_REMEMBERED, those not named since the last time are forgotten. A key neither
    the map nor memory holds reads as no frames and is counted, never invented.

    Kernel stacks are remembered as tuples of addresses shared with every other stack read
    (kernel text is a bounded set); user stacks as their words (8 bytes a frame): a user
    address is an int of its own in each process (ASLR), 32 bytes more a frame, kept
    twice over as a tuple of them."""

    def __init__(self, kernel: bool) -> None:
        self.missing = 0  # cumulative
        self._now: dict[int, tuple[int, ...] | bytes] = {}
        self._before: dict[int, tuple[int, ...] | bytes] = {}
        self._shared = SharedAddresses() if kernel else None

    def take(self, table) -> None:  # noqa: ANN001 - a BpfMap
        """Read and empty the map: the stacks walked since the last time."""
        keys, values = table.drain_columns()
        if len(self._now) + len(keys) > STACKS_REMEMBERED:
            self._before, self._now = self._now, {}
        if not keys:
            return
        depth = table.value_size // 8
        words = memoryview(values).cast("Q")
        shared = self._shared
        for i, key in enumerate(array("q", b"".join(keys))):
            stack = words[i * depth:(i + 1) * depth]
            frames = stack.tolist()
            try:
                end = frames.index(0)
            except ValueError:  # as deep as the map keeps: cut there
                end = depth
            self._now[key] = (shared(tuple(frames[:end])) if shared is not None
                              else stack[:end].tobytes())

    def read(self, key: int) -> tuple[int, ...]:
        if key < 0:
            return ()
        frames = self._now.get(key)
        if frames is None:
            frames = self._before.get(key)
            if frames is None:
                self.missing += 1
                return ()
            self._now[key] = frames
        if isinstance(frames, bytes):
            return tuple(memoryview(frames).cast("Q"))
        return frames


class WaitCollector:
    pane = "waits"

    def __init__(
        self, interval_s: float = 1.0, user_stacks: bool = True,
        min_walk: WalkMinimums = DEFAULT_MIN_WALK, cgroups: CgroupNames | None = None,
        map_entries: dict[str, int] | None = None,
    ) -> None:
        """min_walk: walk a blocking thread's stacks only when its previous blocked wait in
        the same state (D, or S and the rest) lasted that state's minimum, and the waker's
        only for a wait that did (every wait's time is
        counted regardless). user_stacks: walk user stacks too. map_entries: sizes other
        than bpf/waits.bpf.c's defaults ({"PROC_ENTRIES": 2}: the tests fill maps)."""
        self._map_entries = dict(map_entries or {})
        self._interval_s = interval_s
        self._user_stacks = user_stacks
        self.min_walk = min_walk
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float] | None = None  # by end_interval(): (generation, end)
        self._last = 0.0
        self._stale_threads = 0
        self._uncounted: tuple[int, ...] | None = None  # RAN_UNKNOWN_AFTER's at the last drain
        self._drains = 0
        self._cgroups = cgroups or shared_names()
        self._kernel_stacks = HashedStacks(kernel=True)
        self._user_stacks_read = HashedStacks(kernel=False)
        # [short, long]: walk the stacks of 1 in N waits of each kind (see set_walk_every).
        self.walk_every = DEFAULT_WALK_EVERY

    @property
    def programs(self) -> dict[str, int]:
        """The loaded programs' descriptors (for their run time)."""
        return dict(self._program.program.programs) if self._program else {}

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_sched_tracepoints()
        try:
            btf = KernelBtf.load(BTF_PATH)
        except OSError:
            raise Unavailable(
                f"kernel has no BTF ({BTF_PATH}): the waits pane needs CONFIG_DEBUG_INFO_BTF=y"
            ) from None
        except BtfError as e:
            raise Unavailable(f"cannot read the kernel's BTF: {e}") from None
        program = load_program(
            PROGRAM,
            [f"-DUSER_STACKS={int(self._user_stacks)}",
             f"-DMIN_WALK_S_NS={self.min_walk.s_us * 1000}ULL",
             f"-DMIN_WALK_D_NS={self.min_walk.d_us * 1000}ULL", *task_flags(btf),
             *(f"-D{name}={int(size)}" for name, size in self._map_entries.items())],
            {name: "RAW_TRACEPOINT" for name in (*FUNCTIONS, FLIP)},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        seed = self._program.table(MAP_HASH_SEED)
        seed[0] = seed.Leaf(int.from_bytes(os.urandom(8), "little"))
        self.set_walk_every(*self.walk_every)
        try:
            for function, tracepoint in FUNCTIONS.items():
                program.keep(attach_raw_tracepoint(program.programs[function],
                                                   raw_name(tracepoint)))
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the sched raw tracepoints: {e.strerror}") from None
        self._last = time.monotonic()

    def set_walk_every(self, short: int, long: int = 1) -> None:
        """Walk the stacks of a random 1 in `short` waits predicted short, and of 1 in `long`
        of those predicted long (0: none; 1: every one); those walked are scaled by it. Takes
        effect at the next switch-out, without reloading: the cost budget turns it."""
        self.walk_every = (check_walk_every(short), check_walk_every(long))
        if self._program is not None:
            table = self._program.table(MAP_WALK_EVERY)
            table[WALK_SHORT] = table.Leaf(short)
            table[WALK_LONG] = table.Leaf(long)

    def _end_interval(self) -> tuple[int, float]:
        """End the interval in the kernel (the programs pointed at the other generation, the
        end in the same word), then settle every thread with no event since (a thread's own
        first event after the end settles it): nothing after the end is added to the
        interval, however long this takes. (The generation to drain, the end.)"""
        program = self._program
        assert program is not None
        flip = program.program.programs[FLIP]
        args = (ct.c_uint64 * (FLIP_THREADS + 1))()
        args[0] = FLIP_END
        run_raw_tracepoint_program(flip, args)
        word = int(program.table(MAP_GENERATION)[0])
        program.generation = word & 1
        # An event that read the old word may still be adding to a thread's short waits
        # without atomics (waits.bpf.c, catch_up): settled only once those are done.
        time.sleep(0.001)
        args[0] = FLIP_SETTLE
        tasks = array("Q", b"".join(program.table(MAP_THREADS).snapshot_keys()))
        for start in range(0, len(tasks), FLIP_THREADS):
            batch = tasks[start:start + FLIP_THREADS]
            for i in range(FLIP_THREADS):
                args[i + 1] = batch[i] if i < len(batch) else 0
            run_raw_tracepoint_program(flip, args)
        time.sleep(0.001)  # a program that read the old word may still be writing: us
        return program.generation ^ 1, (word & ~1) / 1e9

    def end_interval(self) -> None:
        """End the interval now; the next drain() reads it (the engine ends every pane's
        before it reads any, so they cover the same span)."""
        assert self._program is not None, "start() first"
        self._ended = self._end_interval()

    def drain(self) -> WaitDrain:
        """End the interval, then read and empty the generation of maps it filled."""
        assert self._program is not None, "start() first"
        program = self._program
        old, end = self._ended or self._end_interval()
        self._ended = None
        kernel, user = self._kernel_stacks, self._user_stacks_read
        kernel.take(program.table(MAP_STACKS))
        user.take(program.table(MAP_USER_STACKS))
        processes = self._processes(program.table(MAP_PROCS[old]))
        stacks = self._stacks(program.table(MAP_WAIT_STACKS[old]))
        self._drains += 1
        if self._drains % 10 == 0:
            self._forget_exited()
        lost = self.lost()
        notes = {name: lost.pop(name) for name in NOT_LOSSES}
        counted = tuple(lost.get(name, 0) for name in RAN_UNKNOWN_AFTER)
        ran = (frozenset(p.pid for p in processes
                         if p.on_cpu_ns or p.runq_ns or p.switches_unseen)
               if counted == self._uncounted else None)
        self._uncounted = counted
        drain = WaitDrain(self._last, end, tuple(processes), tuple(stacks), lost, notes, ran,
                          self.walk_every)
        self._last = end
        return drain

    def _processes(self, table) -> list[ProcessTimes]:  # noqa: ANN001 - a BpfMap
        """The per-process map emptied, as rows (decoded by struct: RowLayout)."""
        keys, values = table.drain_columns()
        if not keys:
            return []
        k, v = _layouts(table)
        pid, comm, cgroup = k.index["pid"], k.index["comm"], k.index["cgroup"]
        on_cpu, runq, runq_count = v.index["on_cpu_ns"], v.index["runq_ns"], v.index["runq_count"]
        blocked, blocked_count = v.index["blocked_ns"], v.index["blocked_count"]
        unseen = v.index["switches_unseen"]
        runq_hist = _trimmed_hists(v, "runq_hist", values)
        cgroup_name = self._cgroups.name
        return [
            ProcessTimes(key[pid], task_name(key[comm]), cgroup_name(key[cgroup]), value[on_cpu],
                         value[runq], value[runq_count], value[blocked],
                         value[blocked_count], value[next(runq_hist)], value[unseen])
            for key, value in zip(k.rows(b"".join(keys)), v.rows(values))
        ]

    def _stacks(self, table) -> list[BlockedStack]:  # noqa: ANN001 - a BpfMap
        """The per-stack map emptied, as rows, their stacks read from what take() read."""
        keys, values = table.drain_columns()
        if not keys:
            return []
        k, v = _layouts(table)
        pid, comm, cgroup, state = k.index["pid"], k.index["comm"], k.index["cgroup"], k.index["state"]
        kstack, ustack = k.index["kstack"], k.index["ustack"]
        waker_pid, waker_comm, waker_kstack = (
            k.index["waker_pid"], k.index["waker_comm"], k.index["waker_kstack"])
        scale = k.index["scale"]
        total, count, max_ns = v.index["total_ns"], v.index["count"], v.index["max_ns"]
        hist = _trimmed_hists(v, "hist", values)
        kernel, user = self._kernel_stacks.read, self._user_stacks_read.read
        cgroup_name = self._cgroups.name
        return [
            BlockedStack(
                key[pid], task_name(key[comm]), cgroup_name(key[cgroup]),
                STATES[key[state]] if key[state] < len(STATES) else "other",
                kernel(key[kstack]), min(0, key[kstack]), user(key[ustack]), min(0, key[ustack]),
                key[waker_pid], _waker_comm(key[waker_pid], key[waker_comm], key[waker_kstack]),
                kernel(key[waker_kstack]), min(0, key[waker_kstack]),
                value[total], value[count], value[max_ns], value[next(hist)],
                key[scale] & (SCALE_LONG_END - 1), bool(key[scale] & SCALE_LONG_END),
            )
            for key, value in zip(k.rows(b"".join(keys)), v.rows(values))
        ]

    def _forget_exited(self) -> None:
        """Threads are forgotten at their last switch-out; one the program missed (its
        switch-out ran while another BPF program held the CPU) is dropped here."""
        assert self._program is not None
        self._stale_threads += forget_entries(
            self._program.table(MAP_THREADS),
            lambda _, thread: not os.path.exists(f"/proc/{thread.tid}"))

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["stack_missing"] = self._kernel_stacks.missing + self._user_stacks_read.missing
        totals["exited_unseen"] = self._stale_threads
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
