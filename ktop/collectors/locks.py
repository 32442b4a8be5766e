"""Lock contention: bpf/locks.bpf.c on lock:contention_begin/end, drained every interval."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import (
    TRACEFS,
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
)
from ktop.collectors.bpfsys import attach_tracepoint
from ktop.collectors.maps import TwoGenerationProgram, forget_entries

PROGRAM = "locks.bpf.c"
TRACEPOINTS = ["lock:contention_begin", "lock:contention_end"]
# Map names, as bpf/locks.bpf.c declares them.
MAP_WAIT_TEMPLATE = "wait_template"
MAP_TASK_STARTS = "task_starts"
MAP_STACK_WAITS = ("stack_waits_0", "stack_waits_1")
MAP_LOCK_WAITS = ("lock_waits_0", "lock_waits_1")
MAP_TASK_WAITS = ("task_waits_0", "task_waits_1")
MAP_STACKS = ("stacks_0", "stacks_1")
MAP_USER_STACKS = ("user_stacks_0", "user_stacks_1")
LOST_NAMES = (  # enum lock_lost in bpf/ktop.h, in order
    "unpaired_end",
    "nested_begin",
    "start_map_full",
    "stale_spin",
    "kstack_collision",
    "kstack_map_full",
    "ustack_collision",
    "ustack_map_full",
    "stacks_map_full",
    "locks_map_full",
    "tasks_map_full",
)
HIST_SLOTS = 40  # LOCK_HIST_SLOTS: slot k counts waits in [2^k, 2^(k+1)) ns, slot 0 [0, 2)
U64_MAX = 2**64 - 1

# The record layouts bpf/ktop.h hard-codes: (field, offset, size) per tracepoint.
_EXPECTED_FIELDS = {
    "contention_begin": (("lock_addr", 8, 8), ("flags", 16, 4)),
    "contention_end": (("lock_addr", 8, 8), ("ret", 16, 4)),
}
_FIELD_RE = re.compile(r"field:[^;]*?(\w+)(?:\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);")


@dataclass(frozen=True)
class StackWaits:
    """Waits counted in the kernel for one (kernel stack, lock type)."""

    flags: int  # LCB_F_* of the first begin
    kernel: tuple[int, ...]  # innermost first; () when the stack could not be kept
    kernel_error: int  # 0, or the -errno of bpf_get_stackid (-EEXIST: collision)
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int
    hist: tuple[int, ...]  # HIST_SLOTS log2 slots of wait time


@dataclass(frozen=True)
class LockWaits:
    """Waits for one (lock address, lock type)."""

    address: int
    flags: int
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int


@dataclass(frozen=True)
class TaskWaits:
    """Waits of one thread at one (kernel stack, user stack, lock type)."""

    tid: int
    tgid: int  # the process: user addresses are in its address space
    comm: str
    flags: int
    kernel: tuple[int, ...]
    kernel_error: int
    user: tuple[int, ...]  # raw user addresses, innermost first, for symbolizing later
    user_error: int  # -EFAULT for kernel threads
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int
    cgroup: str = ""  # the thread's cgroup v2 path ("/system.slice/x.service")


@dataclass(frozen=True)
class LockDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    stacks: tuple[StackWaits, ...]
    locks: tuple[LockWaits, ...]
    tasks: tuple[TaskWaits, ...]
    lost: dict[str, int]  # cumulative since start, by reason


def require_lock_tracepoints(root: str = TRACEFS) -> None:
    require_tracepoints(
        TRACEPOINTS, "needs Linux >= 5.19; lock contention cannot be traced on this kernel", root
    )


def check_record_layout(root: str = TRACEFS) -> None:
    """bpf/ktop.h reads the records at fixed offsets: refuse to load if tracefs says otherwise."""
    for event, expected in _EXPECTED_FIELDS.items():
        path = os.path.join(root, "events", "lock", event, "format")
        try:
            with open(path) as f:
                fields = {m[1]: (int(m[2]), int(m[3])) for m in _FIELD_RE.finditer(f.read())}
        except OSError as e:
            raise Unavailable(f"cannot read {path}: {e.strerror}") from None
        for name, offset, size in expected:
            if fields.get(name) != (offset, size):
                raise Unavailable(
                    f"lock:{event} has an unexpected layout ({name} at {fields.get(name)}, "
                    f"expected {(offset, size)}): this kernel needs a newer ktop"
                )


def thread_started_after(tid: int, time_ns: int) -> bool:
    """True if thread `tid` is gone, or is a newer thread that took the id after `time_ns`
    (CLOCK_BOOTTIME, as the BPF program stamps begins): a wait recorded for it never ends."""
    try:
        with open(f"/proc/{tid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    # Field 22 (starttime, clock ticks since boot), counted after the parenthesised comm.
    start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
    start_ns = start_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return start_ns > time_ns + 20_000_000  # two ticks of slack: starttime is in ticks


class LockCollector:
    pane = "locks"

    def __init__(
        self, interval_s: float = 1.0, user_stacks: bool = True, pass_on: bool = True,
        cgroups: CgroupNames | None = None,
    ) -> None:
        """interval_s: how often drain() will be called (waits are summed per interval in the
        kernel, so the maps' sizes do not depend on it). user_stacks: also record each
        waiter's user stack (about 2 us per contention here). pass_on: let `perf record` and
        other perf users of the lock tracepoints see the events too; off hides them."""
        self._interval_s = interval_s
        self._user_stacks = user_stacks
        self._pass_on = pass_on
        self._program: TwoGenerationProgram | None = None
        self._last = 0.0
        self._stale_begins = 0
        self._cgroups = cgroups or shared_names()

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_lock_tracepoints()
        check_record_layout()
        program = load_program(
            PROGRAM,
            [f"-DUSER_STACKS={int(self._user_stacks)}", f"-DPASS_ON={int(self._pass_on)}"],
            {"on_contention_begin": "TRACEPOINT", "on_contention_end": "TRACEPOINT"},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        template = self._program.table(MAP_WAIT_TEMPLATE)
        leaf = template.Leaf()
        leaf.wait.min_ns = U64_MAX  # so the first wait of a new aggregate sets min
        template[0] = leaf
        try:
            # End first: every begin seen then has its end seen, so no start is left behind.
            for tracepoint in ("lock:contention_end", "lock:contention_begin"):
                function = "on_" + tracepoint.split(":")[1]
                program.keep(attach_tracepoint(program.programs[function], tracepoint, TRACEFS))
        except OSError as e:
            self.close()
            raise Unavailable(
                f"cannot attach the lock contention tracepoints: {e.strerror}"
            ) from None
        self._last = time.monotonic()

    def drain(self) -> LockDrain:
        """Swap map generations, then read and empty the one the program just left."""
        assert self._program is not None, "start() first"
        old, end = self._program.swap()
        kernel_stacks = self._program.table(MAP_STACKS[old])
        user_stacks = self._program.table(MAP_USER_STACKS[old])
        walk = self._program.stacks.read
        cgroup_name = self._cgroups.name

        def error(stack_id: int) -> int:
            return min(0, stack_id)

        stack_rows = [
            StackWaits(
                flags=key.flags,
                kernel=walk(kernel_stacks, key.kstack, kernel=True),
                kernel_error=error(key.kstack),
                contended=value.wait.count,
                total_ns=value.wait.total_ns,
                max_ns=value.wait.max_ns,
                min_ns=value.wait.min_ns,
                hist=tuple(value.hist),
            )
            for key, value in self._program.table(MAP_STACK_WAITS[old]).drain()
        ]
        lock_rows = [
            LockWaits(
                address=key.lock,
                flags=key.flags,
                contended=value.count,
                total_ns=value.total_ns,
                max_ns=value.max_ns,
                min_ns=value.min_ns,
            )
            for key, value in self._program.table(MAP_LOCK_WAITS[old]).drain()
        ]
        task_rows = [
            TaskWaits(
                tid=key.tid,
                tgid=key.tgid,
                comm=key.comm.decode(errors="replace"),
                flags=key.flags,
                kernel=walk(kernel_stacks, key.kstack, kernel=True),
                kernel_error=error(key.kstack),
                user=walk(user_stacks, key.ustack),
                user_error=error(key.ustack),
                contended=value.count,
                total_ns=value.total_ns,
                max_ns=value.max_ns,
                min_ns=value.min_ns,
                cgroup=cgroup_name(key.cgroup),
            )
            for key, value in self._program.table(MAP_TASK_WAITS[old]).drain()
        ]
        self._program.stacks.tidy(kernel_stacks)
        self._program.stacks.tidy(user_stacks)
        self._age_starts()
        drain = LockDrain(
            self._last, end, tuple(stack_rows), tuple(lock_rows), tuple(task_rows), self.lost()
        )
        self._last = end
        return drain


    def _age_starts(self) -> None:
        """Drop begins whose thread is gone: their end will never come (the map is bounded,
        and this keeps it from filling with leftovers)."""
        self._stale_begins += forget_entries(
            self._program.table(MAP_TASK_STARTS),
            lambda key, value: value.lock and thread_started_after(key.value, value.time_ns))

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["stale_begin"] = self._stale_begins
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
