"""The interrupts pane's profile (the JSON contract, decoded by ktop.codec from these hints)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ktop.frozen import quick_init
from ktop.histogram import Bucket

HIST_SLOTS = 32  # IRQ_HIST_SLOTS (bpf/irqs.h)
# The kernel's softirq vectors by number (include/linux/interrupt.h), as /proc/softirqs names them.
SOFTIRQ_NAMES = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED",
                 "HRTIMER", "RCU")


def vector_name(number: int) -> str:
    return SOFTIRQ_NAMES[number] if 0 <= number < len(SOFTIRQ_NAMES) else f"vector {number}"


@quick_init
@dataclass(frozen=True, slots=True)
class IrqRow:
    """One hard-IRQ handler or softirq vector over the window, all CPUs."""

    kind: str  # "softirq" or "hardirq"
    number: int  # the IRQ, or the softirq vector
    name: str  # the vector (NET_RX) or the handler's action name (virtio0-input.0)
    count: int
    total_ns: int
    max_ns: int
    per_cpu_ns: tuple[int, ...]  # time on each CPU, by CPU number
    per_cpu_count: tuple[int, ...]
    raised: int = 0  # softirq: runs whose raise was seen
    delay_ns: int = 0  # softirq: raise-to-run delay, summed over `raised`
    delay_max_ns: int = 0
    delay_hist: tuple[Bucket, ...] = ()  # softirq: raise-to-run delay, log2 ns

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    @property
    def label(self) -> str:
        return self.name if self.kind == "softirq" else f"{self.number}:{self.name}"


@quick_init
@dataclass(frozen=True, slots=True)
class IrqProfile:
    window_s: float
    cpus: int
    rows: tuple[IrqRow, ...]  # most time first
    lost: Mapping[str, int]
    notes: Mapping[str, int]

    def cpu_percent(self, row: IrqRow) -> float:
        """The row's share of all CPUs' time over the window."""
        machine_ns = self.window_s * 1e9 * self.cpus
        return 100.0 * row.total_ns / machine_ns if machine_ns > 0 else 0.0
