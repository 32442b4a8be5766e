"""What ktop itself costs while it runs: its process's CPU time, and the run time of its BPF
programs, which the kernel charges to whatever task they interrupted, not to ktop.

BPF run time is counted by the kernel only while statistics are enabled: ktop holds a
BPF_ENABLE_STATS descriptor for its lifetime, as bpftop does (the sysctl
kernel.bpf_stats_enabled=1 does the same for everyone), and reads each program's
run_time_ns with BPF_OBJ_GET_INFO_BY_FD.
"""

from __future__ import annotations

import os
import time

from ktop.collectors.bpfsys import enable_stats, program_info
from ktop.model import SelfCostRow

_STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


def stats_enabled_by_sysctl(path: str = _STATS_SYSCTL) -> bool:
    try:
        with open(path) as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def bpf_programs() -> dict[int, int]:
    """The BPF programs this process holds: descriptor -> the kernel's program id."""
    programs = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:bpf-prog":
                continue
        except OSError:  # closed between listing and reading
            continue
        info = program_info(int(name))
        if info is not None:
            programs[int(name)] = int(info.id)
    return programs


def bpf_run_time_ns(programs: dict[int, int]) -> int | None:
    """Run time of these programs (descriptor -> id), summed in nanoseconds; None if one of
    them is gone (its descriptor closed, or now naming something else)."""
    by_pane = bpf_run_times(programs)
    return None if by_pane is None else sum(by_pane.values())


def pane_of_program(name: str) -> str:
    """The pane a BPF program serves, by its name (ktop.panes' bpf_programs); "" for none."""
    from ktop.panes import PANES  # noqa: PLC0415

    return next((spec.name for spec in PANES
                 if any(name.startswith(prefix) for prefix in spec.bpf_programs)), "")


def bpf_run_times(programs: dict[int, int]) -> dict[str, int] | None:
    """Run time of these programs by pane, in nanoseconds; None if one is gone."""
    totals: dict[str, int] = {}
    for fd, prog_id in programs.items():
        info = program_info(fd)
        if info is None or info.id != prog_id:
            return None
        pane = pane_of_program(info.name.decode(errors="replace"))
        totals[pane] = totals.get(pane, 0) + info.run_time_ns
    return totals


class SelfCost:
    """ktop's CPU% and its BPF programs' CPU%, over the span since the previous measure.

    The process's CPU time comes from CLOCK_PROCESS_CPUTIME_ID (every thread, exited ones
    included, in nanoseconds): /proc's clock ticks would read a 0.5% process as 0% or 1%."""

    def __init__(self) -> None:
        self._stats_fd: int | None = None
        self._counting = False
        self._previous: tuple[float, float, dict[str, int]] | None = None
        # fd -> program id: programs load at start-up, and may stop: listed again then
        self._programs: dict[int, int] = {}

    def start(self) -> None:
        self._stats_fd = enable_stats()
        self._counting = self._stats_fd is not None or stats_enabled_by_sysctl()
        self.start_span()

    def start_span(self) -> None:
        """The next measure covers from now on."""
        self._previous = (time.monotonic(), time.process_time(), self._bpf_ns())

    def programs_changed(self) -> None:
        """A collector attached or stopped: list the programs again at the next measure."""
        self._programs = {}

    def _bpf_ns(self) -> dict[str, int]:
        """Run time so far by pane."""
        totals = bpf_run_times(self._programs) if self._programs else None
        if totals is None:
            self._programs = bpf_programs()
            totals = bpf_run_times(self._programs) or {}
        return totals

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
        if not self._counting:
            return SelfCostRow(cpu_percent=100.0 * (cpu - before_cpu) / elapsed, bpf_percent=None)
        # A pane whose programs were reloaded starts again from 0: no negative share.
        panes = {pane: max(0.0, 100.0 * (ns - before_bpf.get(pane, 0)) / 1e9 / elapsed)
                 for pane, ns in bpf_ns.items()}
        return SelfCostRow(
            cpu_percent=100.0 * (cpu - before_cpu) / elapsed, bpf_percent=sum(panes.values()),
            bpf_panes=dict(sorted(((p or "other", round(v, 3)) for p, v in panes.items()),
                                  key=lambda kv: -kv[1])),
        )

    def close(self) -> None:
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None
