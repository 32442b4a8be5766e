"""The interrupts pane's fold: drains into a window, per CPU, and a replay's merge of the
records equal to the live window (no BPF: constructed drains)."""

from __future__ import annotations

import pytest

from ktop.histogram import Bucket
from ktop.panes.irqs.aggregate import IrqAggregator, merge_profiles, slot_bounds, slot_of
from ktop.panes.irqs.collector import IrqCounts, IrqDrain, per_cpu_rows
from ktop.panes.irqs.model import HIST_SLOTS, vector_name

NO_HIST = (0,) * HIST_SLOTS


def hist(**slots: int) -> tuple[int, ...]:
    values = [0] * HIST_SLOTS
    for slot, n in slots.items():
        values[int(slot[1:])] = n
    return tuple(values)


def drain(i: int) -> IrqDrain:
    counts = (
        IrqCounts("softirq", 3, 0, 1000 + i, 2_000_000, 40_000, 990, 5_000_000, 90_000,
                  hist(s10=900, s16=90)),
        IrqCounts("softirq", 3, 1, 10, 20_000, 3_000, 10, 10_000, 2_000, hist(s10=10)),
        IrqCounts("softirq", 1, 1, 250, 500_000 * (i + 1), 9_000, 0, 0, 0, NO_HIST),
        IrqCounts("hardirq", 36, 0, 20 + i, 80_000, 9_000, 0, 0, 0, NO_HIST),
    )
    return IrqDrain(100.0 + i, 101.0 + i, counts, {36: "virtio1-req.0"}, 2,
                    {"counts_map_full": i, "recursion_misses": 0}, {"unpaired_exit": 1})


def test_rows_sum_cpus_name_vectors_and_handlers_and_sort_by_time():
    agg = IrqAggregator(window_s=10.0)
    agg.add(drain(0))
    profile = agg.profile()
    assert [r.label for r in profile.rows] == ["NET_RX", "TIMER", "36:virtio1-req.0"]
    net = profile.rows[0]
    assert (net.count, net.total_ns, net.max_ns) == (1010, 2_020_000, 40_000)
    assert net.per_cpu_count == (1000, 10) and net.per_cpu_ns == (2_000_000, 20_000)
    assert net.raised == 1000 and net.delay_max_ns == 90_000
    assert net.delay_hist == (Bucket(1024, 2047, 910), Bucket(65536, 131071, 90))
    assert net.avg_ns == pytest.approx(2_020_000 / 1010)
    assert profile.cpu_percent(net) == pytest.approx(100 * 2_020_000 / (1e9 * 2))


def test_a_replay_of_records_equals_the_live_window():
    live = IrqAggregator(window_s=10.0)
    records = []
    for i in range(4):
        live.add(drain(i))
        records.append(live.profile(latest=True))
    assert merge_profiles(records) == live.profile()
    assert live.profile().lost["counts_map_full"] == 3  # each interval's own, summed


def test_per_cpu_values_are_unpacked_key_by_key():
    import struct

    words = 6 + HIST_SLOTS
    cpu0 = [5, 500, 200, 0, 0, 0] + [0] * HIST_SLOTS
    cpu1 = [0] * words  # did not run there: no row
    values = struct.pack(f"<{2 * words}Q", *cpu0, *cpu1)
    (row,) = per_cpu_rows([struct.pack("<II", 1, 3)], values, 2)
    assert (row.kind, row.number, row.cpu, row.count, row.total_ns) == ("softirq", 3, 0, 5, 500)


def test_slots_and_names():
    for slot in (0, 1, 10, 31):
        assert slot_of(Bucket(*slot_bounds(slot), 1)) == slot
    assert vector_name(3) == "NET_RX" and vector_name(8) == "HRTIMER" and vector_name(12) == "vector 12"
