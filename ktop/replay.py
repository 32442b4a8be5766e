"""Replaying a recording: a window over its records, summed as the live window sums intervals.

Each record holds one interval alone (ktop.recording). `merge` folds a run of them into the
Snapshot live ktop would have shown with a window of exactly those intervals: counts summed
per stack, lock caller, task and I/O process, extremes kept, histograms added slot by slot,
the CPU time split weighed by the /proc/stat ticks behind it, hot functions derived from
the summed stacks, the window the sum of the intervals' spans; the processes pane, the
losses (counted since start) and the rest from the newest record, as live.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ktop.aggregate.blockio import histogram, newest_requests
from ktop.aggregate.locks import hist_buckets
from ktop.collectors.locks import HIST_SLOTS
from ktop.model import (
    BlockProfile,
    Bucket,
    CpuProfile,
    CpuTimes,
    DiskStats,
    IoProcess,
    IoSubmitStack,
    LockAddress,
    LockCaller,
    LockProfile,
    LockStack,
    LockTask,
    LockTaskStack,
    LockUserStack,
    Snapshot,
    StackSample,
)
from ktop.recording import RecordInfo, Recording
from ktop.stacktree import hot_functions

MAX_REQUESTS = 200  # as the live block I/O profile lists them
DEFAULT_WINDOW_S = 5.0  # as live ktop's -w


# ---- merging records ----------------------------------------------------------------------


class _Waits:
    """As the lock aggregator sums waits: counts and totals add, extremes are kept."""

    __slots__ = ("contended", "total_ns", "max_ns", "min_ns")

    def __init__(self) -> None:
        self.contended = self.total_ns = self.max_ns = self.min_ns = 0

    def add(self, contended: int, total_ns: int, max_ns: int, min_ns: int = 0) -> None:
        if not contended:
            return
        self.min_ns = min(self.min_ns, min_ns) if self.contended else min_ns
        self.contended += contended
        self.total_ns += total_ns
        self.max_ns = max(self.max_ns, max_ns)


def _by_total_wait(waits: dict) -> list:
    return sorted(waits.items(), key=lambda kv: (-kv[1].total_ns, kv[0]))


def _tasks(waits: dict[tuple[int, str], _Waits]) -> tuple[LockTask, ...]:
    return tuple(LockTask(pid, comm, w.contended, w.total_ns, w.max_ns)
                 for (pid, comm), w in _by_total_wait(waits))


def _lock_slot(bucket: Bucket) -> int:
    return max(0, bucket.high.bit_length() - 1)  # slot k holds 2^k .. 2^(k+1) - 1 ns


def _io_slot(bucket: Bucket) -> int:
    return max(1, bucket.high.bit_length())  # slot k holds 2^(k-1) .. 2^k - 1 us


def merge_cpu(profiles: Sequence[CpuProfile]) -> CpuProfile:
    newest = profiles[-1]
    stacks: dict[tuple, int] = {}
    rows: dict[tuple, StackSample] = {}
    for profile in profiles:
        for s in profile.stacks:
            key = (s.pid, s.comm, s.frames, s.modules, s.user_frames, s.truncated, s.idle, s.sources,
                   s.callers_dropped)
            stacks[key] = stacks.get(key, 0) + s.samples
            rows.setdefault(key, s)
    stack_rows = tuple(
        dataclasses.replace(rows[key], samples=samples)
        for key, samples in sorted(stacks.items(), key=lambda kv: -kv[1])
    )
    window_s = sum(p.window_s for p in profiles)
    hz, cpus = newest.sample_hz, newest.cpus
    return CpuProfile(
        sample_hz=hz,
        cpus=cpus,
        window_s=window_s,
        cumulative=False,
        total_samples=sum(p.total_samples for p in profiles),
        idle_samples=sum(p.idle_samples for p in profiles),
        kernel_samples=sum(p.kernel_samples for p in profiles),
        user_samples=sum(p.user_samples for p in profiles),
        lost=dict(newest.lost),
        functions=hot_functions(stack_rows, hz * window_s * cpus),
        stacks=stack_rows,
        times=merge_times([p.times for p in profiles], [p.window_s for p in profiles]),
        line_info=newest.line_info,
    )


def merge_times(times: Sequence[CpuTimes], spans: Sequence[float]) -> CpuTimes:
    """The CPU split of intervals together: their /proc/stat ticks added, as the live window
    adds them (by span, for records that do not say how many ticks they were)."""
    categories = ("user", "kernel", "idle", "steal")
    totals = dict.fromkeys(categories, 0.0)
    ticks = 0
    for share, span in zip(times, spans):
        weight = share.ticks or span
        for name in categories:
            part = getattr(share, name) * weight / 100.0
            totals[name] += round(part) if share.ticks else part
        ticks += share.ticks
    total = sum(totals.values())
    if total <= 0:
        return CpuTimes()
    return CpuTimes(**{name: 100.0 * value / total for name, value in totals.items()},
                    ticks=ticks if all(t.ticks for t in times) else 0)


def merge_locks(profiles: Sequence[LockProfile]) -> LockProfile:
    callers: dict[tuple[str, str], _Waits] = {}
    hists: dict[tuple[str, str], list[int]] = {}
    stacks: dict[tuple[str, str], dict[tuple[str, ...], _Waits]] = {}
    tasks: dict[tuple[str, str], dict[tuple[int, str], _Waits]] = {}
    user_stacks: dict[tuple[str, str], dict[tuple, _Waits]] = {}
    task_stacks: dict[tuple[str, str], dict[tuple, _Waits]] = {}
    locks: dict[tuple[int, str], _Waits] = {}
    lock_symbols: dict[tuple[str, str], str] = {}
    all_tasks: dict[tuple[int, str], _Waits] = {}
    for profile in profiles:
        for c in profile.callers:
            key = (c.caller, c.type)
            callers.setdefault(key, _Waits()).add(c.contended, c.total_wait_ns, c.max_wait_ns,
                                                  c.min_wait_ns)
            slots = hists.setdefault(key, [0] * HIST_SLOTS)
            for bucket in c.hist_ns:
                slots[min(_lock_slot(bucket), HIST_SLOTS - 1)] += bucket.count
            for s in c.stacks:
                stacks.setdefault(key, {}).setdefault(s.frames, _Waits()).add(
                    s.contended, s.total_wait_ns, s.max_wait_ns)
            for t in c.tasks:
                tasks.setdefault(key, {}).setdefault((t.pid, t.comm), _Waits()).add(
                    t.contended, t.total_wait_ns, t.max_wait_ns)
            for u in c.user_stacks:
                user_stacks.setdefault(key, {}).setdefault(u.frames, _Waits()).add(
                    u.contended, u.total_wait_ns, 0)
            for t in c.task_stacks:
                task_stacks.setdefault(key, {}).setdefault(
                    (t.pid, t.comm, t.frames, t.user_frames), _Waits()).add(
                    t.contended, t.total_wait_ns, 0)
        for lock in profile.locks:
            # As written ("0xffff..."): a forged one is a name like any other, not a crash.
            key = (lock.address, lock.type)
            locks.setdefault(key, _Waits()).add(lock.contended, lock.total_wait_ns, lock.max_wait_ns)
            lock_symbols[key] = lock.symbol
        for t in profile.tasks:
            all_tasks.setdefault((t.pid, t.comm), _Waits()).add(t.contended, t.total_wait_ns,
                                                                 t.max_wait_ns)
    merged_callers = tuple(
        LockCaller(
            caller=caller,
            type=lock_type,
            contended=w.contended,
            total_wait_ns=w.total_ns,
            max_wait_ns=w.max_ns,
            min_wait_ns=w.min_ns,
            stacks=tuple(LockStack(frames, s.contended, s.total_ns, s.max_ns)
                         for frames, s in _by_total_wait(stacks.get((caller, lock_type), {}))),
            hist_ns=hist_buckets(hists[(caller, lock_type)]),
            tasks=_tasks(tasks.get((caller, lock_type), {})),
            user_stacks=tuple(
                LockUserStack(frames, s.contended, s.total_ns)
                for frames, s in sorted(user_stacks.get((caller, lock_type), {}).items(),
                                        key=lambda kv: -kv[1].total_ns)
            ),
            task_stacks=tuple(
                LockTaskStack(pid, comm, frames, user, s.contended, s.total_ns)
                for (pid, comm, frames, user), s in sorted(
                    # as live: user frames do not order, ties keep their order of arrival
                    task_stacks.get((caller, lock_type), {}).items(),
                    key=lambda kv: (-kv[1].total_ns, kv[0][:3]))
            ),
        )
        for (caller, lock_type), w in _by_total_wait(callers)
    )
    return LockProfile(
        events=sum(c.contended for c in merged_callers),
        lost=dict(profiles[-1].lost),
        callers=merged_callers,
        locks=tuple(
            LockAddress(address, lock_symbols[(address, lock_type)], lock_type,
                        w.contended, w.total_ns, w.max_ns)
            for (address, lock_type), w in _by_total_wait(locks)
        ),
        tasks=_tasks(all_tasks),
        window_s=sum(p.window_s for p in profiles),
    )


class _IoTotals:
    __slots__ = ("requests", "bytes", "latency_ms", "queue_ms")

    def __init__(self) -> None:
        self.requests = self.bytes = 0
        self.latency_ms = self.queue_ms = 0.0


def merge_blockio(profiles: Sequence[BlockProfile], max_requests: int = MAX_REQUESTS) -> BlockProfile:
    totals: dict[tuple, _IoTotals] = {}
    slots: dict[tuple, dict[int, int]] = {}
    stacks: dict[tuple, dict[tuple[str, ...], int]] = {}
    disk_reads: dict[tuple, list] = {}  # (disk, major, minor) -> [reads, writes, rb, wb, lat]
    disk_slots: dict[tuple, dict[int, int]] = {}
    for profile in profiles:
        for p in profile.processes:
            key = (p.pid, p.comm, p.disk, p.major, p.minor, p.rw)
            t = totals.setdefault(key, _IoTotals())
            t.requests += p.requests
            t.bytes += p.bytes
            t.latency_ms += p.avg_lat_ms * p.requests
            t.queue_ms += p.avg_queue_ms * p.requests
            counts = slots.setdefault(key, {})
            for bucket in p.hist_us:
                counts[_io_slot(bucket)] = counts.get(_io_slot(bucket), 0) + bucket.count
            frames = stacks.setdefault(key, {})
            for s in p.stacks:
                frames[s.frames] = frames.get(s.frames, 0) + s.requests
        for d in profile.disks:
            key = (d.disk, d.major, d.minor)
            sums = disk_reads.setdefault(key, [0, 0, 0, 0, 0.0])
            sums[0] += d.reads
            sums[1] += d.writes
            sums[2] += d.read_bytes
            sums[3] += d.write_bytes
            sums[4] += d.avg_lat_ms * (d.reads + d.writes)
            counts = disk_slots.setdefault(key, {})
            for bucket in d.hist_us:
                counts[_io_slot(bucket)] = counts.get(_io_slot(bucket), 0) + bucket.count
    processes = [
        IoProcess(
            pid=pid, comm=comm, disk=disk, major=major, minor=minor, rw=rw,
            requests=t.requests, bytes=t.bytes,
            avg_lat_ms=t.latency_ms / t.requests, avg_queue_ms=t.queue_ms / t.requests,
            stacks=tuple(sorted((IoSubmitStack(frames, n) for frames, n in stacks[key].items()),
                                key=lambda s: (-s.requests, s.frames))),
            hist_us=histogram(slots[key]),
        )
        for key, t in totals.items() if t.requests
        for pid, comm, disk, major, minor, rw in [key]
    ]
    processes.sort(key=lambda p: (-p.bytes, -p.requests, p.pid, p.disk, p.rw))
    disks = [
        DiskStats(disk, major, minor, reads, writes, rb, wb, latency / (reads + writes),
                  histogram(disk_slots[(disk, major, minor)]))
        for (disk, major, minor), (reads, writes, rb, wb, latency) in disk_reads.items()
        if reads + writes
    ]
    disks.sort(key=lambda d: (d.disk, d.major, d.minor))
    # As live: the newest, and each process's newest few (its drill-down lists them).
    requests = newest_requests((r for p in reversed(profiles) for r in p.requests),
                               {(p.pid, p.disk, p.rw) for p in processes}, max_requests)
    return BlockProfile(
        lost=dict(profiles[-1].lost),
        disks=tuple(disks),
        processes=tuple(processes),
        requests=requests,
        window_s=sum(p.window_s for p in profiles),
    )


def merge(snapshots: Sequence[Snapshot]) -> Snapshot:
    """Records of consecutive intervals, oldest first, as one window (see the module)."""
    if len(snapshots) == 1:
        return snapshots[0]
    newest = snapshots[-1]

    def merged(name: str, fold: Callable):
        profiles = [getattr(s, name) for s in snapshots if getattr(s, name) is not None]
        return fold(profiles) if profiles else None

    cpu = merged("cpu", merge_cpu)
    # Without CPU samples (recorded without root) the /proc/stat split is the window's too.
    split = [(s.cpu_times, s.duration_s) for s in snapshots if s.cpu_times is not None]
    return dataclasses.replace(
        newest,
        cpu=cpu,
        cpu_times=merge_times(*zip(*split)) if split else None,
        locks=merged("locks", merge_locks),
        blockio=merged("blockio", merge_blockio),
        duration_s=cpu.window_s if cpu else sum(s.duration_s for s in snapshots),
    )


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
    if unit is None:
        if value != int(value):
            raise ValueError(f"a number of records is whole: {text!r}")
        return max(1, int(value))
    seconds = value * {"s": 1, "m": 60, "h": 3600}[unit]
    return max(1, round(seconds / interval_s)) if interval_s > 0 else 1


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


# ---- the data source ------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineView:
    """What the timeline bar draws: every record's figures, the position and the window."""

    records: Sequence[RecordInfo] = dataclasses.field(compare=False)
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
        self.on_moved: Callable[[], None] | None = None

    def _typical_interval(self) -> float:
        spans = sorted(r.duration_s for r in self.records if r.duration_s > 0)
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
                self._merged = (key, merge(snapshots))
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
        times = [r.taken_at for r in self.records]
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
