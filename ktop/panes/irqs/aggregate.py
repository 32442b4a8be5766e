"""Fold drained interrupt counters into the interrupts pane's profile over recent seconds;
`merge_profiles` sums recorded intervals with the same fold (a replay's window)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ktop.aggregate.window import Window, sum_lost
from ktop.histogram import Bucket
from ktop.panes.irqs.collector import IrqCounts, IrqDrain
from ktop.panes.irqs.model import HIST_SLOTS, IrqProfile, IrqRow, vector_name

if TYPE_CHECKING:
    from ktop.panedef import PaneServices
    from ktop.panes.irqs.collector import IrqCollector

Key = tuple[str, int]  # (kind, number)


def slot_bounds(slot: int) -> tuple[int, int]:
    """(low, high) ns, both inclusive, of log2 slot `slot` (bpf/irqs.bpf.c's log2_floor)."""
    return (0, 1) if slot == 0 else (1 << slot, (1 << (slot + 1)) - 1)


def slot_of(bucket: Bucket) -> int:
    return 0 if bucket.low <= 1 else bucket.low.bit_length() - 1


@dataclass(slots=True)
class _Acc:
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    per_cpu_ns: dict[int, int] = field(default_factory=dict)
    per_cpu_count: dict[int, int] = field(default_factory=dict)
    raised: int = 0
    delay_ns: int = 0
    delay_max_ns: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * HIST_SLOTS)

    def add(self, other: _Acc) -> None:
        self.count += other.count
        self.total_ns += other.total_ns
        self.max_ns = max(self.max_ns, other.max_ns)
        for cpu, ns in other.per_cpu_ns.items():
            self.per_cpu_ns[cpu] = self.per_cpu_ns.get(cpu, 0) + ns
        for cpu, n in other.per_cpu_count.items():
            self.per_cpu_count[cpu] = self.per_cpu_count.get(cpu, 0) + n
        self.raised += other.raised
        self.delay_ns += other.delay_ns
        self.delay_max_ns = max(self.delay_max_ns, other.delay_max_ns)
        self.hist = [a + b for a, b in zip(self.hist, other.hist)]


Counts = dict[Key, _Acc]


def _merge(into: Counts, other: Counts) -> None:
    for key, acc in other.items():
        into.setdefault(key, _Acc()).add(acc)


def fold(counts: Sequence[IrqCounts]) -> Counts:
    folded: Counts = {}
    for c in counts:
        one = _Acc(c.count, c.total_ns, c.max_ns, {c.cpu: c.total_ns}, {c.cpu: c.count},
                   c.raised, c.delay_ns, c.delay_max_ns, list(c.delay_hist))
        folded.setdefault((c.kind, c.number), _Acc()).add(one)
    return folded


def _rows(counts: Counts, names: Mapping[int, str], cpus: int) -> tuple[IrqRow, ...]:
    rows = []
    for (kind, number), acc in counts.items():
        name = vector_name(number) if kind == "softirq" else (names.get(number) or "?")
        rows.append(IrqRow(
            kind, number, name, acc.count, acc.total_ns, acc.max_ns,
            tuple(acc.per_cpu_ns.get(cpu, 0) for cpu in range(cpus)),
            tuple(acc.per_cpu_count.get(cpu, 0) for cpu in range(cpus)),
            acc.raised, acc.delay_ns, acc.delay_max_ns,
            tuple(Bucket(*slot_bounds(slot), n) for slot, n in enumerate(acc.hist) if n)))
    rows.sort(key=lambda r: (-r.total_ns, r.kind, r.number))
    return tuple(rows)


class IrqAggregator:
    def __init__(self, window_s: float = 5.0) -> None:
        self._window: Window[Counts] = Window(window_s, dict, _merge)
        self._names: dict[int, str] = {}
        self._cpus = 1
        self._notes: dict[str, int] = {}

    def add(self, drain: IrqDrain) -> None:
        self._names.update(drain.names)
        self._cpus = max(self._cpus, drain.cpus)
        self._notes = dict(drain.notes)
        self._window.add(drain.start, drain.end, fold(drain.counts), drain.lost)

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Nothing to fold: no row is a process's."""

    def profile(self, cumulative: bool = False, latest: bool = False) -> IrqProfile:
        if latest:
            counts, window_s = self._window.latest()
        else:
            counts, window_s = self._window.counts(cumulative)
        return IrqProfile(window_s, self._cpus, _rows(counts, self._names, self._cpus),
                          self._window.lost(cumulative, latest), dict(self._notes))


def _counted(profile: IrqProfile) -> Counts:
    counts: Counts = {}
    for r in profile.rows:
        hist = [0] * HIST_SLOTS
        for bucket in r.delay_hist:
            hist[min(slot_of(bucket), HIST_SLOTS - 1)] += bucket.count
        counts[(r.kind, r.number)] = _Acc(
            r.count, r.total_ns, r.max_ns, dict(enumerate(r.per_cpu_ns)),
            dict(enumerate(r.per_cpu_count)), r.raised, r.delay_ns, r.delay_max_ns, hist)
    return counts


def merge_profiles(profiles: Sequence[IrqProfile]) -> IrqProfile:
    """Recorded intervals, oldest first, summed by the live window's own fold."""
    merged: Counts = {}
    names: dict[int, str] = {}
    for profile in profiles:
        _merge(merged, _counted(profile))
        names.update((r.number, r.name) for r in profile.rows if r.kind == "hardirq")
    cpus = max((p.cpus for p in profiles), default=1)
    return IrqProfile(sum(p.window_s for p in profiles), cpus, _rows(merged, names, cpus),
                      sum_lost(p.lost for p in profiles),
                      dict(profiles[-1].notes) if profiles else {})


def build(source: PaneServices) -> tuple[IrqCollector, IrqAggregator]:
    """The interrupts pane's collector and aggregator (its PaneDef's build)."""
    from ktop.panes.irqs.collector import IrqCollector  # noqa: PLC0415

    return IrqCollector(), IrqAggregator(source.options.window_s)
