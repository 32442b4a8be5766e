"""Replaying a recording: a window over its records, the times a user types, and the source
the app reads them from. Each record holds one interval alone (ktop.record.fileformat); a window of
them is summed by the live aggregators' own merges (ktop.aggregate.merge)."""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ktop.aggregate.merge import merge_snapshots
from ktop.model import Snapshot
from ktop.record.fileformat import CACHE_BYTES, RecordIndex, RecordInfo, Recording

DEFAULT_WINDOW_S = 5.0  # as live ktop's -w
# Records' JSON decoded at once when a whole recording is merged (--baseline FILE): half
# of what the recording's cache of decoded records keeps, which holds this batch and the last.
MERGE_BATCH_BYTES = CACHE_BYTES // 2
# --baseline FILE decodes about this much of a recording's JSON (~15 s of CPU on a 2-CPU VM;
# a record of a busy machine is ~0.4 MB): a longer recording is sampled, one record in k
# spread over it, and said so. Past twice this (the records' sizes lied), the merge stops.
BASELINE_JSON_BYTES = 48 << 20
# A window typed longer than this many records is the whole recording (the timeline clamps it).
MAX_WINDOW_RECORDS = 1 << 40


# ---- times typed by the user ----------------------------------------------------------------

_CLOCK = re.compile(r"^(?:(\d{4})-(\d{2})-(\d{2})[ T])?(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h)?$")


def parse_clock(text: str) -> tuple[tuple[int, int, int] | None, int]:
    """'03:12', '03:12:00' or '2026-11-23 03:12:00' -> (date or None, seconds into the day).
    Raises ValueError with a message for the user."""
    match = _CLOCK.match(text.strip())
    if not match:
        raise ValueError(f"expected HH:MM:SS (or YYYY-MM-DD HH:MM:SS), not {text!r}")
    year, month, day, hours, minutes, seconds = match.groups()
    h, m, s = int(hours), int(minutes), int(seconds or 0)
    if h > 23 or m > 59 or s > 59:
        raise ValueError(f"no such time of day: {text!r}")
    date = (int(year), int(month), int(day)) if year else None
    return date, h * 3600 + m * 60 + s


def parse_window(text: str, interval_s: float) -> int:
    """'10' records, or a span '30s', '5m', '1h' -> a number of records (at least 1)."""
    match = _SPAN.match(text.strip().lower())
    if not match:
        raise ValueError(f"expected a number of records or a span like 30s, 5m, 1h, not {text!r}")
    value, unit = float(match.group(1)), match.group(2)
    if unit is None and not value.is_integer() and value != math.inf:
        raise ValueError(f"a number of records is whole: {text!r}")
    records = value if unit is None else (
        value * {"s": 1, "m": 60, "h": 3600}[unit] / interval_s if interval_s > 0 else 1)
    # 400 nines read as infinity, which no int holds: more than any recording is the whole.
    return max(1, round(min(records, MAX_WINDOW_RECORDS)))


def _time_of_day(taken_at: float) -> tuple[tuple[int, int, int], int]:
    t = time.localtime(taken_at)
    return (t.tm_year, t.tm_mon, t.tm_mday), t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec


def find_time(records: Sequence[RecordInfo], text: str, after: int = -1) -> int:
    """The index of the record whose interval holds the time typed (local time, as the
    header shows it): the first one from `after + 1` on, wrapping around, so a recording of
    several days finds each day's in turn. Raises ValueError naming what there is."""
    date, second = parse_clock(text)
    order = list(range(after + 1, len(records))) + list(range(0, after + 1))
    for index in order:
        info = records[index]
        day, end = _time_of_day(info.taken_at)
        start_day, start = _time_of_day(info.taken_at - info.duration_s)
        if date is not None and date not in (day, start_day):
            continue
        if start_day != day:  # across midnight
            if second >= start or second <= end:
                return index
        elif start <= second <= end:
            return index
    first, last = records[0], records[-1]
    raise ValueError(
        f"{text} is not in the recording, which runs from "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(first.taken_at - first.duration_s))} "
        f"to {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(last.taken_at))}"
    )


def merge_recording(recording: Recording,
                    check: Callable[[Snapshot], None] = lambda merged: None,
                    indices: Sequence[int] | None = None,
                    progress: Callable[[int, int], None] = lambda done, total: None,
                    max_json_bytes: float = math.inf) -> Snapshot:
    """Every record of `recording` (or those of `indices`, oldest first) as one window,
    merged a batch of records at a time into the sum so far: memory holds that sum and one
    batch (MERGE_BATCH_BYTES of JSON), not the whole file decoded (a forged 8 MB file of 100
    records took 1.4 GB in one pass). The merges are sums, so the result is the one pass's
    (rows of equal weight may come in another order). `check(merged)` sees the sum after
    each batch and may raise; `progress(records read, records to merge)` after each record.
    Past `max_json_bytes` decoded it stops, its batch merged."""
    chosen = range(len(recording)) if indices is None else indices
    merged: Snapshot | None = None
    batch: list[Snapshot] = []
    size = decoded = 0
    progress(0, len(chosen))
    for done, index in enumerate(chosen, 1):
        snapshot, json_bytes = recording.decoded(index, keep=False)
        batch.append(snapshot)
        size += json_bytes
        decoded += json_bytes
        if size >= MERGE_BATCH_BYTES or done == len(chosen) or decoded >= max_json_bytes:
            merged = merge_snapshots([merged, *batch] if merged is not None else batch)
            check(merged)
            batch, size = [], 0
        progress(done, len(chosen))
        if decoded >= max_json_bytes and not batch:
            break
    if merged is None:
        raise ValueError("a recording without records")  # Recording refuses one
    return merged


@dataclass(frozen=True)
class Sample:
    """Which records of a recording a baseline merges: every `stride`-th, ending at its
    newest, so that about BASELINE_JSON_BYTES of JSON are decoded however long it is."""

    indices: range
    stride: int

    @property
    def whole(self) -> bool:
        return self.stride == 1


def baseline_sample(recording: Recording, budget: int | None = None) -> Sample:
    """The records to merge for a --baseline of the whole recording: all of them when their
    JSON fits `budget` (estimated from the compressed sizes and the newest record's ratio,
    decoded here and kept), else one in `stride`, spread over the whole."""
    budget = BASELINE_JSON_BYTES if budget is None else budget
    records = recording.records
    newest = len(records) - 1
    _, json_bytes = recording.decoded(newest)
    compressed = sum(records.lengths())
    estimate = compressed * json_bytes / max(1, records[newest].length)
    stride = max(1, math.ceil(estimate / budget))
    return Sample(range(newest % stride, newest + 1, stride), stride)


# ---- the data source ------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineView:
    """What the timeline bar draws: every record's figures, the position and the window."""

    records: RecordIndex = dataclasses.field(compare=False)
    position: int  # the newest record in the window
    window: int  # records in the window
    note: str = ""  # e.g. the end of the file was cut off

    @property
    def first(self) -> int:
        return max(0, self.position - self.window + 1)


class ReplaySource:
    """A recording as the app's data source: the window of records ending at `position`,
    merged; the timeline keys move it. Thread-safe: the app steps from its main thread and
    collects in a worker."""

    live = False

    def __init__(self, recording: Recording, window_s: float = DEFAULT_WINDOW_S,
                 position: int | None = None) -> None:
        self.recording = recording
        self.records = recording.records
        self.cumulative = False
        self.on_attached = None
        self.started_at = 0.0
        self.interval_s = self._typical_interval()
        self.window = max(1, round(window_s / self.interval_s)) if self.interval_s else 1
        last = len(self.records) - 1
        self.position = last if position is None else min(max(position, 0), last)
        self._lock = threading.Lock()
        self._merged: tuple[tuple[int, int], Snapshot] | None = None
        self.timeline = self  # it is its own

    def _typical_interval(self) -> float:
        spans = sorted(d for d in self.records.durations() if d > 0)
        return spans[len(spans) // 2] if spans else 1.0

    # DataSource
    def start(self, wait: bool = True, patient: bool = False) -> None:
        pass

    def hurry_loading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def collect(self) -> Snapshot:
        with self._lock:
            key = (self.position, self.window)
            if self._merged is None or self._merged[0] != key:
                first = max(0, self.position - self.window + 1)
                snapshots = [self.recording.snapshot(i) for i in range(first, self.position + 1)]
                self._merged = (key, merge_snapshots(snapshots))
            return self._merged[1]

    # moving through time
    def view(self) -> TimelineView:
        return TimelineView(self.records, self.position, self.window, self.recording.dropped)

    def go_to(self, index: int) -> None:
        with self._lock:
            self.position = min(max(index, 0), len(self.records) - 1)

    def step(self, records: int) -> None:
        self.go_to(self.position + records)

    def step_seconds(self, seconds: float) -> None:
        """To the record `seconds` later (or earlier) than the current one's time."""
        times = self.records.taken_at()
        target = times[self.position] + seconds
        if seconds > 0:
            index = bisect.bisect_left(times, target - 1e-6)
        else:
            index = bisect.bisect_right(times, target + 1e-6) - 1
        self.go_to(index)

    def go_to_time(self, text: str) -> None:
        """Raises ValueError for a time the recording does not hold."""
        self.go_to(find_time(self.records, text, after=self.position))

    def set_window(self, records: int) -> None:
        with self._lock:
            self.window = max(1, min(records, len(self.records)))
