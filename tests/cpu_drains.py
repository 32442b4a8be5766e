"""CPU drains built by hand, and read back, one record per in-kernel counter: what a test
writes and asserts on. ktop's sampler hands the aggregator rows and samples in two columns."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ktop.collectors.cpu import CpuDrain, StackRow
from ktop.collectors.procstat import CpuTicks


class StackCount(NamedTuple):
    """One counter: who was sampled, where (addresses innermost first), how many times."""

    pid: int
    comm: str
    samples: int
    kernel: tuple[int, ...]
    user: tuple[int, ...]
    user_mode: bool
    cgroup: str = ""
    own: bool = False


def cpu_drain(start: float, end: float, counts: Iterable[StackCount], lost: dict[str, int],
              ticks: CpuTicks | None = None) -> CpuDrain:
    counts = tuple(counts)
    rows = tuple(StackRow(c.pid, c.comm, c.kernel, c.user, c.user_mode, c.cgroup, c.own)
                 for c in counts)
    return CpuDrain(start, end, rows, tuple(c.samples for c in counts), lost,
                    ticks or CpuTicks())


def counts_of(drain: CpuDrain) -> list[StackCount]:
    """Each row of a drain with its samples."""
    return [StackCount(r.pid, r.comm, n, r.kernel, r.user, r.user_mode, r.cgroup, r.own)
            for r, n in zip(drain.rows, drain.samples)]
