"""CPU time split from /proc/stat: exact kernel accounting, unlike samples on tickless idle CPUs."""

from __future__ import annotations

from dataclasses import dataclass

from ktop.model import CpuTimes


@dataclass(frozen=True)
class CpuTicks:
    """Cumulative ticks of all CPUs, by the categories the header shows."""

    user: int = 0
    kernel: int = 0
    idle: int = 0
    steal: int = 0

    def __sub__(self, other: CpuTicks) -> CpuTicks:
        return CpuTicks(
            self.user - other.user,
            self.kernel - other.kernel,
            self.idle - other.idle,
            self.steal - other.steal,
        )

    def __add__(self, other: CpuTicks) -> CpuTicks:
        return CpuTicks(
            self.user + other.user,
            self.kernel + other.kernel,
            self.idle + other.idle,
            self.steal + other.steal,
        )

    def shares(self) -> CpuTimes:
        total = self.user + self.kernel + self.idle + self.steal
        if total <= 0:
            return CpuTimes()
        return CpuTimes(
            user=100.0 * self.user / total,
            kernel=100.0 * self.kernel / total,
            idle=100.0 * self.idle / total,
            steal=100.0 * self.steal / total,
            ticks=total,
        )


def parse_cpu_line(text: str) -> CpuTicks:
    """The aggregate `cpu ` line: user nice system idle iowait irq softirq steal guest guest_nice."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:]] + [0] * 10
            user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
            # guest time is already included in user time, as top and htop assume.
            return CpuTicks(user + nice, system + irq + softirq, idle + iowait, steal)
    raise ValueError("no aggregate cpu line in /proc/stat")


def read_cpu_ticks(path: str = "/proc/stat") -> CpuTicks:
    with open(path) as f:
        return parse_cpu_line(f.read())
