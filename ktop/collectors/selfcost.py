"""What ktop itself costs while it runs: its process's CPU time, and the run time of its BPF
programs, which the kernel charges to whatever task they interrupted, not to ktop.

BPF run time is counted by the kernel only while statistics are enabled: ktop holds a
BPF_ENABLE_STATS descriptor for its lifetime, as bpftop does (the sysctl
kernel.bpf_stats_enabled=1 does the same for everyone), and reads each program's
run_time_ns from /proc/self/fdinfo.
"""

from __future__ import annotations

import os
import time

from ktop.collectors.bpfsys import enable_stats
from ktop.model import SelfCostRow

_STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


def stats_enabled_by_sysctl(path: str = _STATS_SYSCTL) -> bool:
    try:
        with open(path) as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def parse_run_time_ns(fdinfo: str) -> int | None:
    """run_time_ns from a BPF program's fdinfo text; None when the kernel shows none."""
    for line in fdinfo.splitlines():
        if line.startswith("run_time_ns:"):
            return int(line.split()[1])
    return None


def bpf_program_fds(proc: str = "/proc/self") -> list[str]:
    """The descriptors of every BPF program this process holds."""
    fds = []
    for fd in os.listdir(f"{proc}/fd"):
        try:
            if os.readlink(f"{proc}/fd/{fd}") == "anon_inode:bpf-prog":
                fds.append(fd)
        except OSError:  # closed between listing and reading
            continue
    return fds


def bpf_run_time_ns(fds: list[str], proc: str = "/proc/self") -> int | None:
    """Run time of these BPF programs, summed (nanoseconds); None if one of them is gone."""
    total = 0
    for fd in fds:
        try:
            with open(f"{proc}/fdinfo/{fd}") as f:
                run_time = parse_run_time_ns(f.read())
        except OSError:
            return None
        if run_time is None:  # the descriptor now names something else
            return None
        total += run_time
    return total


class SelfCost:
    """ktop's CPU% and its BPF programs' CPU%, over the span since the previous measure.

    The process's CPU time comes from CLOCK_PROCESS_CPUTIME_ID (every thread, exited ones
    included, in nanoseconds): /proc's clock ticks would read a 0.5% process as 0% or 1%."""

    def __init__(self) -> None:
        self._stats_fd: int | None = None
        self._counting = False
        self._previous: tuple[float, float, int] | None = None
        self._fds: list[str] = []  # programs load at start-up, and may stop: listed again then

    def start(self) -> None:
        self._stats_fd = enable_stats()
        self._counting = self._stats_fd is not None or stats_enabled_by_sysctl()
        self.start_span()

    def start_span(self) -> None:
        """The next measure covers from now on."""
        self._previous = (time.monotonic(), time.process_time(), self._bpf_ns())

    def programs_changed(self) -> None:
        """A collector attached or stopped: list the programs again at the next measure."""
        self._fds = []

    def _bpf_ns(self) -> int:
        total = bpf_run_time_ns(self._fds) if self._fds else None
        if total is None:
            self._fds = bpf_program_fds()
            total = bpf_run_time_ns(self._fds) or 0
        return total

    def measure(self) -> SelfCostRow | None:
        """None before start() or on the first call's zero-length span."""
        if self._previous is None:
            return None
        now, cpu, bpf_ns = time.monotonic(), time.process_time(), self._bpf_ns()
        before_time, before_cpu, before_bpf = self._previous
        self._previous = (now, cpu, bpf_ns)
        elapsed = now - before_time
        if elapsed <= 0:
            return None
        bpf = 100.0 * (bpf_ns - before_bpf) / 1e9 / elapsed if self._counting else None
        return SelfCostRow(cpu_percent=100.0 * (cpu - before_cpu) / elapsed,
                           bpf_percent=None if bpf is None else max(0.0, bpf))

    def close(self) -> None:
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None
