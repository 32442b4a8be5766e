"""Kernel stack sampling: bpf/cpu.bpf.c on a cpu-clock perf event, drained every interval."""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from typing import NamedTuple

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import Unavailable, load_program
from ktop.collectors.bpfsys import attach_sampling
from ktop.collectors.maps import TwoGenerationProgram
from ktop.collectors.procstat import CpuTicks, read_cpu_ticks

PROGRAM = "cpu.bpf.c"
# Map names, as bpf/cpu.bpf.c declares them.
MAP_COUNTS = ("counts_0", "counts_1")
MAP_STACKS = ("stacks_0", "stacks_1")
MAP_USER_STACKS = ("user_stacks_0", "user_stacks_1")
MAP_IDLE_STACKS = ("idle_stacks_0", "idle_stacks_1")  # (cpu, ip, sp) -> id in MAP_STACKS
MAP_IDLE_CODE = "idle_code"
LOST_NAMES = (  # enum cpu_lost in bpf/ktop.h, in order
    "kstack_collision",
    "kstack_map_full",
    "ustack_collision",
    "ustack_map_full",
    "counts_map_full",
)
MAX_STACK_DEPTH = 127  # PERF_MAX_STACK_DEPTH: a stack this deep may have been cut


class StackCount(NamedTuple):
    """One in-kernel counter as drained: addresses are innermost first. (A named tuple: at
    4000 Hz hundreds are made a second, three times faster than a frozen dataclass.)"""

    pid: int
    comm: str
    samples: int
    kernel: tuple[int, ...]
    user: tuple[int, ...]
    user_mode: bool  # sampled while running user code: no kernel stack
    cgroup: str = ""  # the task's cgroup v2 path


@dataclass(frozen=True)
class CpuDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    counts: tuple[StackCount, ...]
    lost: dict[str, int]  # cumulative since start, by reason
    ticks: CpuTicks = CpuTicks()  # /proc/stat over the same span: the exact CPU time split


def _map_sizes(hz: int, cpus: int, interval_s: float) -> tuple[int, int, int]:
    """Counts: room for every sample of two intervals. Stacks: a stack map loses a new stack
    whose hash bucket is taken (-EEXIST), so buckets must far outnumber the stacks of one
    interval: at 180 unique stacks/s, 4096 buckets lost 2.5% of them, 16384 about 0.5%."""
    per_interval = hz * cpus * interval_s
    counts = min(max(4096, int(per_interval * 2)), 262144)
    stacks = min(max(16384, int(per_interval * 8)), 65536)
    user_stacks = min(max(16384, int(per_interval * 4)), 32768)
    return counts, stacks, user_stacks


class CpuSampler:
    pane = "functions"

    def __init__(self, hz: int = 99, interval_s: float = 1.0,
                 cgroups: CgroupNames | None = None,
                 idle_code: tuple[tuple[int, int], ...] = ()) -> None:
        """idle_code: [start, end) addresses of the kernel's idle functions, where the idle
        task's stack is walked once and remembered (bpf/cpu.bpf.c)."""
        self.hz = hz
        self._idle_code = idle_code
        self.cpus = os.cpu_count() or 1
        self._interval_s = interval_s
        self._program: TwoGenerationProgram | None = None
        self._last = 0.0
        self._ticks = CpuTicks()
        self._comms: dict[bytes, str] = {}
        self._cgroups = cgroups or shared_names()

    def start(self) -> None:
        counts, stacks, user_stacks = _map_sizes(self.hz, self.cpus, self._interval_s)
        program = load_program(
            PROGRAM,
            [
                f"-DCOUNTS_ENTRIES={counts}",
                f"-DSTACK_ENTRIES={stacks}",
                f"-DUSER_STACK_ENTRIES={user_stacks}",
            ],
            {"on_cpu_sample": "PERF_EVENT"},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        self._write_idle_code()
        try:
            program.keep(*attach_sampling(program.programs["on_cpu_sample"], self.hz))
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the cpu-clock perf event: {e.strerror}") from None
        self._last = time.monotonic()
        self._ticks = read_cpu_ticks()

    def _write_idle_code(self) -> None:
        """The ranges the program remembers idle stacks in; as many as it has room for (the
        rest are walked each sample, as any other)."""
        table = self._program.table(MAP_IDLE_CODE)
        code = table.Leaf()
        for i, (start, end) in enumerate(self._idle_code[:len(code.start)]):
            code.start[i], code.end[i] = start, end
        table[0] = code

    def drain(self) -> CpuDrain:
        """Swap map generations, then read and empty the one the program just left."""
        assert self._program is not None, "start() first"
        old, end = self._program.swap()
        ticks = read_cpu_ticks()
        counts_map = self._program.table(MAP_COUNTS[old])
        kernel_stacks = self._program.table(MAP_STACKS[old])
        user_stacks = self._program.table(MAP_USER_STACKS[old])
        walk = self._program.stacks.read
        names = self._comms
        cgroup_name = self._cgroups.name

        rows = []
        for key, samples in counts_map.drain():
            comm = names.get(key.comm)
            if comm is None:
                comm = names[key.comm] = key.comm.decode(errors="replace")
            kstack = key.kstack
            rows.append(StackCount(key.pid, comm, samples, walk(kernel_stacks, kstack),
                                   walk(user_stacks, key.ustack), kstack == -errno.EFAULT,
                                   cgroup_name(key.cgroup)))
        if len(names) > 4096:  # command names seen lately, decoded once
            names.clear()
        if self._program.stacks.tidy(kernel_stacks):
            # The ids it remembered for the idle task named stacks just deleted.
            self._program.table(MAP_IDLE_STACKS[old]).clear()
        self._program.stacks.tidy(user_stacks)
        drain = CpuDrain(self._last, end, tuple(rows), self.lost(), ticks - self._ticks)
        self._last, self._ticks = end, ticks
        return drain

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
