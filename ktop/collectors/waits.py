"""Waits: bpf/waits.bpf.c on sched_switch / sched_waking / sched_wakeup(_new), drained every
interval: where threads' time goes when they are not on a CPU, and who woke them."""

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

PROGRAM = "waits.bpf.c"
# Attached in this order: switch first, so a wait never begins unseen after its wake-up is
# watched; wakeup_new last (a thread it misses is first seen at its switch-in).
FUNCTIONS = {
    "on_sched_switch": "sched:sched_switch",
    "on_sched_waking": "sched:sched_waking",
    "on_sched_wakeup": "sched:sched_wakeup",
    "on_sched_wakeup_new": "sched:sched_wakeup_new",
}
TRACEPOINTS = list(FUNCTIONS.values())
# Map names, as bpf/waits.bpf.c declares them.
MAP_THREADS = "threads"
MAP_PROCS = ("procs_0", "procs_1")
MAP_WAIT_STACKS = ("wait_stacks_0", "wait_stacks_1")
MAP_STACKS = ("stacks_0", "stacks_1")
MAP_USER_STACKS = ("user_stacks_0", "user_stacks_1")
LOST_NAMES = (  # enum wait_lost in bpf/waits.h, in order
    "threads_map_full",
    "procs_map_full",
    "wait_stacks_full",
    "kstack_collision",
    "kstack_map_full",
    "ustack_collision",
    "ustack_map_full",
    "no_wakeup_seen",
    "unseen_start",
    "long_wait_unwalked",
)
# Counted by the program but not losses: the first wait of each thread that was already
# waiting when ktop started, and long waits whose stacks were not predicted (their time is
# in every total; only the stack views lack them). Shown apart, as notes.
NOT_LOSSES = ("unseen_start", "long_wait_unwalked")
HIST_SLOTS = 32  # WAIT_HIST_SLOTS: slot k >= 1 holds [2^(k-1), 2^k) us, slot 0 under 1 us
STATES = ("S", "D", "other")  # enum wait_state
NOT_WALKED = -2  # -ENOENT: the stack was not walked (a short wait predicted)
DEFAULT_MIN_WALK_US = 10
WAKER_NONE = "[no wake-up seen]"  # the waker of a wait whose wake-up was not seen
MAX_MIN_WALK_US = 10_000_000

# The record layouts bpf/waits.bpf.c hard-codes: (field, offset, size) per tracepoint.
_WAKEUP_FIELDS = (("pid", 24, 4),)
_EXPECTED_FIELDS = {
    "sched_switch": (("prev_pid", 24, 4), ("prev_state", 32, 8), ("next_pid", 56, 4)),
    "sched_waking": _WAKEUP_FIELDS,
    "sched_wakeup": _WAKEUP_FIELDS,
    "sched_wakeup_new": _WAKEUP_FIELDS,
}
_FIELD_RE = re.compile(r"field:[^;]*?(\w+)(?:\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);")


@dataclass(frozen=True)
class ProcessTimes:
    """One (process, command, cgroup)'s time in an interval, every wait counted."""

    pid: int
    comm: str
    cgroup: str
    on_cpu_ns: int
    runq_ns: int
    runq_count: int
    blocked_ns: tuple[int, int, int]  # by STATES
    blocked_count: tuple[int, int, int]
    runq_hist: tuple[int, ...]  # HIST_SLOTS


@dataclass(frozen=True)
class BlockedStack:
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
    hist: tuple[int, ...]  # HIST_SLOTS


@dataclass(frozen=True)
class WaitDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    processes: tuple[ProcessTimes, ...]
    stacks: tuple[BlockedStack, ...]
    lost: dict[str, int]  # cumulative since start, by reason
    notes: dict[str, int]  # cumulative counts that are not losses (NOT_LOSSES)


def parse_min_walk_us(text: str) -> int:
    """The --offcpu-min value in microseconds; ValueError with the one-line reason."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"--offcpu-min {text!r} is not a whole number of microseconds (e.g. 10)"
        ) from None
    if not 0 <= value <= MAX_MIN_WALK_US:
        raise ValueError(f"--offcpu-min {value} is out of range: use 0 to {MAX_MIN_WALK_US} µs")
    return value


def require_sched_tracepoints(root: str = TRACEFS) -> None:
    require_tracepoints(TRACEPOINTS, "sched tracepoints, Linux >= 4.x", root)


def check_record_layout(root: str = TRACEFS) -> None:
    """bpf/waits.bpf.c reads the records at fixed offsets: refuse to load otherwise."""
    for event, expected in _EXPECTED_FIELDS.items():
        path = os.path.join(root, "events", "sched", event, "format")
        try:
            with open(path) as f:
                fields = {m[1]: (int(m[2]), int(m[3])) for m in _FIELD_RE.finditer(f.read())}
        except OSError as e:
            raise Unavailable(f"cannot read {path}: {e.strerror}") from None
        for name, offset, size in expected:
            if fields.get(name) != (offset, size):
                raise Unavailable(
                    f"sched:{event} has an unexpected layout ({name} at {fields.get(name)}, "
                    f"expected {(offset, size)}): this kernel needs a newer ktop"
                )


def _comm(raw: bytes) -> str:
    return raw.decode(errors="replace")


def _waker_comm(pid: int, raw: bytes) -> str:
    if pid == 0 and not raw:
        return WAKER_NONE
    return _comm(raw)


def _error(stack_id: int) -> int:
    return min(0, stack_id)


class WaitCollector:
    pane = "waits"

    def __init__(
        self, interval_s: float = 1.0, user_stacks: bool = True, pass_on: bool = True,
        min_walk_us: int = DEFAULT_MIN_WALK_US, cgroups: CgroupNames | None = None,
        map_entries: dict[str, int] | None = None,
    ) -> None:
        """min_walk_us: walk a blocking thread's stacks only when its previous blocked wait
        lasted this long, and the waker's only for a wait that did (every wait's time is
        counted regardless). user_stacks: walk user stacks too. pass_on: let other perf
        users of the sched tracepoints see the events. map_entries: sizes other than
        bpf/waits.bpf.c's defaults ({"PROC_ENTRIES": 2}: the tests fill maps)."""
        self._map_entries = dict(map_entries or {})
        self._interval_s = interval_s
        self._user_stacks = user_stacks
        self._pass_on = pass_on
        self.min_walk_us = min_walk_us
        self._program: TwoGenerationProgram | None = None
        self._last = 0.0
        self._stale_threads = 0
        self._drains = 0
        self._cgroups = cgroups or shared_names()

    @property
    def programs(self) -> dict[str, int]:
        """The loaded programs' descriptors (for their run time)."""
        return dict(self._program.program.programs) if self._program else {}

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_sched_tracepoints()
        check_record_layout()
        program = load_program(
            PROGRAM,
            [f"-DUSER_STACKS={int(self._user_stacks)}", f"-DPASS_ON={int(self._pass_on)}",
             f"-DMIN_WALK_NS={self.min_walk_us * 1000}ULL",
             *(f"-D{name}={int(size)}" for name, size in self._map_entries.items())],
            {name: "TRACEPOINT" for name in FUNCTIONS},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        try:
            for function, tracepoint in FUNCTIONS.items():
                program.keep(attach_tracepoint(program.programs[function], tracepoint, TRACEFS))
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the sched tracepoints: {e.strerror}") from None
        self._last = time.monotonic()

    def drain(self) -> WaitDrain:
        """Swap map generations, then read and empty the one the program just left."""
        assert self._program is not None, "start() first"
        program = self._program
        old, end = program.swap()
        walk = program.stacks.read
        cgroup_name = self._cgroups.name
        stack_maps = [program.table(name) for name in MAP_STACKS]
        user_maps = [program.table(name) for name in MAP_USER_STACKS]

        processes = [
            ProcessTimes(
                pid=key.pid,
                comm=_comm(key.comm),
                cgroup=cgroup_name(key.cgroup),
                on_cpu_ns=value.on_cpu_ns,
                runq_ns=value.runq_ns,
                runq_count=value.runq_count,
                blocked_ns=tuple(value.blocked_ns),  # type: ignore[arg-type]
                blocked_count=tuple(value.blocked_count),  # type: ignore[arg-type]
                runq_hist=tuple(value.runq_hist),
            )
            for key, value in program.table(MAP_PROCS[old]).drain()
        ]
        stacks = []
        for key, value in program.table(MAP_WAIT_STACKS[old]).drain():
            gen = key.stack_generation & 1
            stacks.append(BlockedStack(
                pid=key.pid,
                comm=_comm(key.comm),
                cgroup=cgroup_name(key.cgroup),
                state=STATES[key.state] if key.state < len(STATES) else "other",
                kernel=walk(stack_maps[gen], key.kstack, kernel=True),
                kernel_error=_error(key.kstack),
                user=walk(user_maps[gen], key.ustack),
                user_error=_error(key.ustack),
                waker_pid=key.waker_pid,
                waker_comm=_waker_comm(key.waker_pid, key.waker_comm),
                waker_kernel=walk(stack_maps[key.waker_generation & 1], key.waker_kstack,
                                  kernel=True),
                waker_error=_error(key.waker_kstack),
                total_ns=value.total_ns,
                count=value.count,
                max_ns=value.max_ns,
                hist=tuple(value.hist),
            ))
        # A blocked thread's stack ids may point into either generation's maps until it
        # is woken: a map is emptied only when crowded or old (maps.py), and an id whose
        # stack went with it reads as no frames, counted in stack_missing.
        program.stacks.tidy(stack_maps[old])
        program.stacks.tidy(user_maps[old])
        self._drains += 1
        if self._drains % 10 == 0:
            self._forget_exited()
        lost = self.lost()
        notes = {name: lost.pop(name) for name in NOT_LOSSES}
        drain = WaitDrain(self._last, end, tuple(processes), tuple(stacks), lost, notes)
        self._last = end
        return drain

    def _forget_exited(self) -> None:
        """Threads are forgotten at their last switch-out; one the program missed (its
        switch-out ran while another BPF program held the CPU) is dropped here."""
        self._stale_threads += forget_entries(
            self._program.table(MAP_THREADS),
            lambda key, _: not os.path.exists(f"/proc/{key.value}"))

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["exited_unseen"] = self._stale_threads
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
