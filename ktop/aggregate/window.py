"""The live window every pane shares: the newest drained intervals that cover its span."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class _Counted(Generic[T]):
    """What an aggregator counted in one drained interval."""

    start: float
    end: float
    counts: T

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end - self.start)


class Window(Generic[T]):
    """The counts of the newest intervals that span `span_s`, and of all since the first.

    An aggregator folds each drain into counts (a T), and builds its profile from what the
    window gives back; `merge(into, other)` adds one T into another. Given `subtract` too,
    the sum of the recent intervals is kept as they come and go rather than merged again for
    every profile: the CPU pane's window holds thousands of stacks at high sampling rates.
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

    def add(self, start: float, end: float, counts: T) -> None:
        interval = _Counted(start, end, counts)
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

    def counts(self, cumulative: bool) -> tuple[T, float]:
        """The counts since the first interval or of the recent ones, and the seconds they
        cover: the sum of the intervals' own spans, the same way for every pane."""
        return (self.total, self.total_s) if cumulative else (self.recent(), self.recent_s)
