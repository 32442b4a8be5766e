"""The live window: the same span in every pane, steady from one refresh to the next."""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass

import pytest

from ktop.aggregate.window import Window, trim_to_window


@dataclass
class Interval:
    duration_s: float


def kept(durations: list[float], window_s: float) -> list[float]:
    recent: deque = deque()
    for duration in durations:  # one drain at a time, as the engine adds them
        recent.append(Interval(duration))
        trim_to_window(recent, window_s)
    return [i.duration_s for i in recent]


@pytest.mark.parametrize("tick", [0.99, 0.999, 1.0, 1.001, 1.02, 1.1])
def test_one_second_drains_fill_a_five_second_window_with_five(tick):
    # Timer jitter either way must not flip the window between 5 and 6 intervals.
    assert len(kept([tick] * 20, 5.0)) == 5


def test_a_window_is_never_shorter_than_asked_by_more_than_the_jitter():
    # 2 s drains over a 5 s window: 4 s would be too short, so 6 s is kept.
    assert kept([2.0] * 10, 5.0) == [2.0, 2.0, 2.0]


def test_before_the_window_fills_everything_is_kept():
    assert kept([1.0, 1.0], 5.0) == [1.0, 1.0]


def test_one_drain_longer_than_the_window_is_kept_alone():
    assert kept([1.0, 1.0, 7.0], 5.0) == [7.0]


def test_a_late_drain_shortens_the_count_not_the_span():
    # A 2.5 s stall (paused UI, busy machine) then 1 s drains: the span stays >= 5 s - jitter.
    durations = kept([1.0, 1.0, 1.0, 2.5, 1.0, 1.0], 5.0)
    assert durations == [1.0, 2.5, 1.0, 1.0]
    assert sum(durations) >= 5.0 - 0.1


# ---- the generic window the aggregators keep their counts in -----------------------------


def test_recent_counts_slide_and_the_total_keeps_everything():
    window = Window(2.0, Counter, Counter.update)
    for second, word in enumerate(["a", "b", "c"]):
        window.add(float(second), second + 1.0, Counter({word: 1}))
    assert window.counts(cumulative=False) == (Counter(b=1, c=1), 2.0)
    assert window.counts(cumulative=True) == (Counter(a=1, b=1, c=1), 3.0)
    assert window.recent_start == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_a_sum_kept_as_intervals_come_and_go_equals_one_merged_afresh(seed):
    rng = random.Random(seed)
    kept = Window(5.0, Counter, Counter.update, Counter.subtract)
    merged = Window(5.0, Counter, Counter.update)
    start = 0.0
    for _ in range(50):
        duration = rng.uniform(0.5, 2.5)  # stalls and short drains alike
        counts = Counter({rng.choice("abcdef"): rng.randint(1, 9) for _ in range(3)})
        kept.add(start, start + duration, Counter(counts))
        merged.add(start, start + duration, Counter(counts))
        start += duration
        assert +kept.recent() == merged.recent()  # + drops what went down to zero
        assert kept.recent_s == merged.recent_s
    assert kept.total == merged.total


def test_a_kept_sum_is_read_without_merging_again():
    merges = []

    def merge(into: Counter, other: Counter) -> None:
        merges.append(other)
        into.update(other)

    window = Window(5.0, Counter, merge, Counter.subtract)
    for second in range(10):
        window.add(float(second), second + 1.0, Counter(a=1))
    merged = len(merges)
    assert window.recent() == Counter(a=5)
    assert len(merges) == merged  # every refresh reads it: no re-summing the window
