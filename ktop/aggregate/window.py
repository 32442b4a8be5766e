"""The live window every pane shares: the newest drained intervals that cover its span."""

from __future__ import annotations

from collections import deque
from typing import Protocol

# Drains come from a timer and land a few milliseconds early or late. Five drains 0.999 s
# apart cover a 5 s window: without this allowance a sixth would be kept, and the window
# would flip between 5 and 6 s from one refresh to the next.
JITTER = 0.1  # of an interval


class Interval(Protocol):
    @property
    def duration_s(self) -> float: ...


def trim_to_window(recent: deque[Interval], window_s: float) -> None:
    """Drop the oldest intervals while the newer ones still span `window_s`."""
    span = sum(interval.duration_s for interval in recent)
    while len(recent) > 1:
        oldest = recent[0].duration_s
        if span - oldest < window_s - JITTER * oldest:
            return
        span -= oldest
        recent.popleft()
