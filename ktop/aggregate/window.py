"""The live window every pane shares: the newest drained intervals that cover its span."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

# Drains come from a timer and land a few milliseconds early or late. Five drains 0.999 s
# apart cover a 5 s window: without this allowance a sixth would be kept, and the window
# would flip between 5 and 6 s from one refresh to the next.
JITTER = 0.1  # of an interval


class Interval(Protocol):
    @property
    def duration_s(self) -> float: ...


IntervalT = TypeVar("IntervalT", bound=Interval)


def trim_to_window(recent: deque[IntervalT], window_s: float) -> list[IntervalT]:
    """Drop the oldest intervals while the newer ones still span `window_s`; returns them."""
    span = sum(interval.duration_s for interval in recent)
    dropped = []
    while len(recent) > 1:
        oldest = recent[0].duration_s
        if span - oldest < window_s - JITTER * oldest:
            break
        span -= oldest
        dropped.append(recent.popleft())
    return dropped


T = TypeVar("T")


@dataclass(slots=True)
class _Counted(Generic[T]):
    """What an aggregator counted in one drained interval."""

    start: float
    end: float
    counts: T
    lost: dict[str, int] = field(default_factory=dict)  # by reason, in this interval alone

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end - self.start)


class Window(Generic[T]):
    """The counts of the newest intervals that span `span_s`, and of all since the first.

    An aggregator folds each drain into counts (a T), and builds its profile from what the
    window gives back; `merge(into, other)` adds one T into another. Given `subtract` too,
    the sum of the recent intervals is kept as they come and go rather than merged again for
    every profile: the CPU pane's window holds thousands of stacks at high sampling rates.

    Losses go the same way: a collector counts them since it started, the window keeps what
    each interval added, so a window's losses are its intervals' (as the header and `L`
    say: "in the last 5s"), a record's its interval's, cumulative ones those since start.
    """

    def __init__(
        self,
        span_s: float,
        empty: Callable[[], T],
        merge: Callable[[T, T], object],
        subtract: Callable[[T, T], object] | None = None,
    ) -> None:
        self.span_s = span_s
        self._empty, self._merge, self._subtract = empty, merge, subtract
        self._recent: deque[_Counted[T]] = deque()
        self._recent_sum = empty() if subtract else None
        self.total = empty()  # since the first interval; the aggregator may fold it in place
        self.total_s = 0.0
        self._lost_since_start: dict[str, int] = {}  # as the collector last counted them
        self._total_lost: dict[str, int] = {}

    def add(self, start: float, end: float, counts: T,
            lost_since_start: Mapping[str, int] | None = None) -> None:
        """lost_since_start: the collector's loss counters, which only grow (one that went
        down was started again: counted from zero)."""
        lost: dict[str, int] = {}
        if lost_since_start is not None:
            for reason, added in lost_added(self._lost_since_start, lost_since_start).items():
                if added:
                    lost[reason] = added
                    self._total_lost[reason] = self._total_lost.get(reason, 0) + added
            self._lost_since_start = dict(lost_since_start)
        interval = _Counted(start, end, counts, lost)
        self._recent.append(interval)
        dropped = trim_to_window(self._recent, self.span_s)
        if self._recent_sum is not None and self._subtract is not None:
            self._merge(self._recent_sum, counts)
            for gone in dropped:
                self._subtract(self._recent_sum, gone.counts)
        self._merge(self.total, counts)
        self.total_s += interval.duration_s

    def recent(self) -> T:
        """The recent intervals' counts together (the caller must not change them)."""
        if self._recent_sum is not None:
            return self._recent_sum
        merged = self._empty()
        for interval in self._recent:
            self._merge(merged, interval.counts)
        return merged

    @property
    def recent_s(self) -> float:
        """The seconds the recent intervals cover."""
        return sum(interval.duration_s for interval in self._recent)

    @property
    def recent_start(self) -> float:
        """When the oldest recent interval began (0 before the first)."""
        return self._recent[0].start if self._recent else 0.0

    @property
    def latest_start(self) -> float:
        """When the newest interval began (0 before the first)."""
        return self._recent[-1].start if self._recent else 0.0

    def latest(self) -> tuple[T, float]:
        """The newest interval's counts alone and its span: what a recording keeps of each
        interval, so a replay can sum any run of them as this window does."""
        if not self._recent:
            return self._empty(), 0.0
        newest = self._recent[-1]
        return newest.counts, newest.duration_s

    def lost(self, cumulative: bool = False, latest: bool = False) -> dict[str, int]:
        """Losses by reason: of the newest interval alone, of the window, or since start;
        every reason the collector names is there, 0 when none were lost."""
        if latest:
            counted = self._recent[-1].lost if self._recent else {}
        elif cumulative:
            counted = self._total_lost
        else:
            counted = sum_lost(interval.lost for interval in self._recent)
        return {reason: counted.get(reason, 0) for reason in self._lost_since_start} | counted

    def counts(self, cumulative: bool) -> tuple[T, float]:
        """The counts since the first interval or of the recent ones, and the seconds they
        cover: the sum of the intervals' own spans, the same way for every pane."""
        return (self.total, self.total_s) if cumulative else (self.recent(), self.recent_s)


def lost_added(before: Mapping[str, int], now: Mapping[str, int]) -> dict[str, int]:
    """What loss counters kept since start added from `before` to `now`, every reason of
    `now` (0 when none): one that went down was started again, counted from zero."""
    added = {}
    for reason, count in now.items():
        was = before.get(reason, 0)
        added[reason] = count - was if count >= was else count
    return added


def sum_lost(losses: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Losses of several intervals together (recorded ones too: each holds its own)."""
    total: dict[str, int] = {}
    for lost in losses:
        for reason, count in lost.items():
            total[reason] = total.get(reason, 0) + count
    return total
