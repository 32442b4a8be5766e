"""CPU time split from /proc/stat: exact kernel accounting, unlike samples on tickless idle CPUs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

from ktop.model import CpuTimes


@dataclass(frozen=True, slots=True)
class CpuTicks:
    """Cumulative ticks of all CPUs, by the categories the header shows."""

    user: int = 0
    kernel: int = 0
    idle: int = 0
    steal: int = 0
    iowait: int = 0  # idle with I/O outstanding (vmstat's wa)
    # Of `kernel`: hard and soft interrupt time (top's hi and si), not added to the total again.
    irq: int = 0
    softirq: int = 0

    def __sub__(self, other: CpuTicks) -> CpuTicks:
        return CpuTicks(*(a - b for a, b in zip(astuple(self), astuple(other))))

    def __add__(self, other: CpuTicks) -> CpuTicks:
        return CpuTicks(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def shares(self) -> CpuTimes:
        total = self.user + self.kernel + self.idle + self.steal + self.iowait
        if total <= 0:
            return CpuTimes()
        return CpuTimes(
            user=100.0 * self.user / total,
            kernel=100.0 * self.kernel / total,
            idle=100.0 * self.idle / total,
            steal=100.0 * self.steal / total,
            ticks=total,
            iowait=100.0 * self.iowait / total,
            irq=100.0 * self.irq / total,
            softirq=100.0 * self.softirq / total,
        )


CATEGORIES = ("user", "kernel", "idle", "steal", "iowait")  # these sum to the total
PARTS = ("irq", "softirq")  # parts of kernel


def ticks_of(times: CpuTimes) -> CpuTicks:
    """The ticks a split was made of, from its shares and their total (as a record keeps it)."""
    return CpuTicks(**{name: round(getattr(times, name) * times.ticks / 100.0)
                       for name in CATEGORIES + PARTS})


def merge_times(times: Sequence[CpuTimes], spans: Sequence[float]) -> CpuTimes:
    """The split of intervals together: their ticks added, as the live window adds them (each
    weighed by its span instead, for records made before the ticks were kept)."""
    if all(t.ticks for t in times):
        return sum((ticks_of(t) for t in times), CpuTicks()).shares()
    totals = dict.fromkeys(CATEGORIES + PARTS, 0.0)
    for share, span in zip(times, spans):
        for name in CATEGORIES + PARTS:
            totals[name] += getattr(share, name) * span / 100.0
    total = sum(totals[name] for name in CATEGORIES)
    if total <= 0:
        return CpuTimes()
    return CpuTimes(**{name: 100.0 * value / total for name, value in totals.items()})


def parse_cpu_line(text: str) -> CpuTicks:
    """The aggregate `cpu ` line: user nice system idle iowait irq softirq steal guest guest_nice."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:]] + [0] * 10
            user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
            # guest time is already included in user time, as top and htop assume.
            return CpuTicks(user + nice, system + irq + softirq, idle, steal, iowait, irq, softirq)
    raise ValueError("no aggregate cpu line in /proc/stat")


def read_cpu_ticks(path: str = "/proc/stat") -> CpuTicks:
    with open(path) as f:
        return parse_cpu_line(f.read())
