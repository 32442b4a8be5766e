"""Fold drained block I/O counters into the Block I/O pane's profile over recent seconds."""

from __future__ import annotations

import operator
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ktop.aggregate.exited import crowded, fold_exited
from ktop.aggregate.window import Window, sum_lost
from ktop.collectors.disks import DiskNames, kernel_dev, split_dev
from ktop.model import BlockProfile, Bucket, DiskStats, IoProcess, IoRequest, IoSubmitStack
from ktop.panes.blockio.collector import BlockDrain, CompletedRequest
from ktop.symbolize.frames import KernelFrames
from ktop.symbolize.kernel import Kallsyms

if TYPE_CHECKING:
    from ktop.panedef import PaneServices
    from ktop.panes.blockio.collector import BlockCollector

# (pid, comm, dev, rw, cgroup): one row of the per-process table.
IoKey = tuple[int, str, int, str, str]
AddressFormatter = Callable[[int], str]
MAX_REQUESTS = 200  # requests a profile lists (besides each process's newest few)
# Newest completed requests kept for the request list: what a profile lists, no more (4,096
# were kept, of which a profile never read past the newest 200).
KEEP_REQUESTS = MAX_REQUESTS
# Newest requests kept of each (pid, disk, direction) besides: a busy process's requests fill
# the list, and a drill-down into any other process found none of its own.
KEEP_REQUESTS_EACH = 20
KEEP_EACH_KEYS = 1024


def newest_requests(
    requests: Iterable[IoRequest], shown: Collection[tuple[int, str, str]], max_requests: int
) -> tuple[IoRequest, ...]:
    """From requests newest first: the newest `max_requests`, and besides them the newest
    KEEP_REQUESTS_EACH of every (pid, disk, rw) in `shown`. What the live profile lists
    (BlockAggregator keeps the same per process as requests come), for a replayed window."""
    picked: list[IoRequest] = []
    seen: Counter = Counter()
    for request in requests:
        key = (request.pid, request.disk, request.rw)
        if len(picked) < max_requests or (key in shown and seen[key] < KEEP_REQUESTS_EACH):
            picked.append(request)
        seen[key] += 1
    return tuple(picked)


def bucket_bounds(slot: int) -> tuple[int, int]:
    """(low_us, high_us), both inclusive as biolatency prints them, of log2 slot `slot`.

    The kernel files a latency of n us under bpf_log2l(n | 1), so slot 1 holds 0-1 us,
    slot 2 holds 2-3 us, slot 3 holds 4-7 us, and slot k holds 2^(k-1) .. 2^k - 1 us.
    """
    if slot <= 1:
        return 0, 1
    return 1 << (slot - 1), (1 << slot) - 1


def histogram(slots: Mapping[int, int]) -> tuple[Bucket, ...]:
    """Contiguous buckets from the lowest to the highest non-empty slot."""
    used = [slot for slot, count in slots.items() if count]
    if not used:
        return ()
    lo, hi = max(1, min(used)), max(used)
    counts: Counter = Counter()
    for slot, count in slots.items():
        counts[max(1, slot)] += count
    return tuple(Bucket(*bucket_bounds(slot), counts[slot]) for slot in range(lo, hi + 1))


@dataclass(slots=True)
class _Totals:
    requests: int = 0
    bytes: int = 0
    latency_ns: int = 0
    queue_ns: int = 0

    def add(self, other: _Totals) -> None:
        self.requests += other.requests
        self.bytes += other.bytes
        self.latency_ns += other.latency_ns
        self.queue_ns += other.queue_ns


def _added(into: _Totals, other: _Totals) -> _Totals:
    into.add(other)
    return into


@dataclass(slots=True)
class _IoCounts:
    """Block I/O of one interval or several, by IoKey."""

    totals: dict[IoKey, _Totals] = field(default_factory=dict)
    slots: Counter = field(default_factory=Counter)  # (IoKey, slot) -> completions
    stacks: Counter = field(default_factory=Counter)  # (IoKey, frames) -> submissions

    def merge(self, other: _IoCounts) -> None:
        for key, totals in other.totals.items():
            self.totals.setdefault(key, _Totals()).add(totals)
        self.slots.update(other.slots)
        self.stacks.update(other.stacks)


class BlockAggregator:
    def __init__(
        self,
        window_s: float = 5.0,
        disk_names: Callable[[int], str] | Mapping[int, str] | None = None,
        symbols: Kallsyms | AddressFormatter | None = None,
    ) -> None:
        """disk_names: dev_t -> name (default: read from /sys); symbols: kernel address ->
        "symbol+0xoff" (a Kallsyms, or any callable; default: bare hex)."""
        self._window = Window(window_s, _IoCounts, _IoCounts.merge)
        if disk_names is None:
            disk_names = DiskNames()
        self._disk_names = disk_names
        self._frames = KernelFrames(symbols)
        self._requests: deque[tuple[float, CompletedRequest]] = deque(maxlen=KEEP_REQUESTS)
        self._newest: list[tuple[float, CompletedRequest]] = []  # the last drain's
        # (pid, dev, rw) -> its newest requests, each with the start of the drain it came in
        self._each: dict[tuple[int, int, str], deque[tuple[float, float, CompletedRequest]]] = {}

    def disk_name(self, dev: int) -> str:
        names = self._disk_names
        name = names.get(dev) if isinstance(names, Mapping) else names(dev)
        if name:
            return name
        major, minor = split_dev(dev)
        return f"{major}:{minor}"

    def add(self, drain: BlockDrain) -> None:
        self._window.add(drain.start, drain.end, self._fold(drain), drain.lost)
        self._newest = [(request.time - drain.origin, request) for request in drain.requests]
        self._requests.extend(self._newest)
        for time_s, request in self._newest:
            key = (request.pid, request.dev, request.rw)
            each = self._each.get(key)
            if each is None:
                each = self._each[key] = deque(maxlen=KEEP_REQUESTS_EACH)
            each.append((drain.start, time_s, request))
        if len(self._each) > KEEP_EACH_KEYS:  # processes come and go: keep the latest active
            latest = sorted(self._each, key=lambda key: self._each[key][-1][0])
            for key in latest[: len(latest) - KEEP_EACH_KEYS // 2]:
                del self._each[key]

    def _fold(self, drain: BlockDrain) -> _IoCounts:
        counts = _IoCounts()
        for row in drain.totals:
            key = (row.pid, row.comm, row.dev, row.rw, row.cgroup)
            counts.totals.setdefault(key, _Totals()).add(
                _Totals(row.requests, row.bytes, row.latency_ns, row.queue_ns)
            )
        for bucket in drain.histogram:
            key = (bucket.pid, bucket.comm, bucket.dev, bucket.rw, bucket.cgroup)
            counts.slots[key, bucket.slot] += (
                bucket.count
            )
        for stack in drain.stacks:
            _, frames = self._frames.without_tracing(stack.kernel)
            if frames:  # an empty stack is already counted as lost
                key = (stack.pid, stack.comm, stack.dev, stack.rw, stack.cgroup)
                counts.stacks[key, frames] += (
                    stack.requests
                )
        return counts

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: one entry per command for processes that have exited; and the
        newest requests of each exited process forgotten once nothing can show them."""
        totals = self._window.total
        if crowded(totals.totals, totals.slots, totals.stacks):
            self._fold_totals(is_alive)
        self._forget_requests_of_exited(is_alive)

    def _forget_requests_of_exited(self, is_alive: Callable[[int], bool]) -> None:
        """A process's own newest requests are listed for its rows in the window (from the
        drains in it) and in the totals (under its pid, until they fold). Once it has exited,
        left the window and its totals are folded, no row names its pid: its list goes."""
        in_totals = {(key[0], key[2], key[3]) for key in self._window.total.totals}
        window_start = self._window.recent_start
        for key in [key for key, each in self._each.items()
                    if each[-1][0] < window_start and key not in in_totals
                    and not is_alive(key[0])]:
            del self._each[key]

    def _fold_totals(self, is_alive: Callable[[int], bool]) -> None:
        totals = self._window.total

        def with_pid(key: IoKey, pid: int) -> IoKey:
            return (pid, *key[1:])

        fold_exited(totals.totals, is_alive, lambda key: key[0], with_pid, _added)
        for counter in (totals.slots, totals.stacks):  # keyed (IoKey, slot or frames)
            fold_exited(counter, is_alive, lambda key: key[0][0],
                        lambda key, pid: (with_pid(key[0], pid), key[1]), operator.add)

    def profile(
        self, cumulative: bool = False, latest: bool = False, *, max_requests: int = MAX_REQUESTS
    ) -> BlockProfile:
        """The window's profile, the totals since start, or the newest interval's alone."""
        requests: Sequence[tuple[float, CompletedRequest]]
        if latest:  # every request the newest drain brought, late ones too: none falls between
            merged, window_s = self._window.latest()
            requests, oldest = self._newest, float("-inf")
        else:
            merged, window_s = self._window.counts(cumulative)
            requests = self._requests
            oldest = float("-inf") if cumulative else self._window.recent_start
        each = [key for key, t in merged.totals.items() if t.requests]
        # Each process's own requests, from the drains in the window (or the newest alone, for
        # a record): a replay of records finds the same ones.
        if latest:
            first_drain = self._window.latest_start
        else:
            first_drain = float("-inf") if cumulative else self._window.recent_start
        picked = self._picked(requests, oldest, max_requests, each, first_drain)
        return BlockProfile(
            lost=self._window.lost(cumulative, latest),
            disks=_disks(merged, self.disk_name),
            processes=_processes(merged, self.disk_name),
            requests=self._request_rows(picked),
            window_s=window_s,
        )

    def _picked(
        self,
        requests: Sequence[tuple[float, CompletedRequest]],
        oldest: float,
        max_requests: int,
        each: Iterable[IoKey],
        first_drain: float,
    ) -> list[tuple[float, CompletedRequest]]:
        """The newest requests, and beside them the newest few of every process in the
        window (`each`), so any process's drill-down has requests to show; newest first."""
        picked: list[tuple[float, CompletedRequest]] = []
        for timed in reversed(requests):
            if len(picked) >= max_requests or timed[1].time <= oldest:
                break
            picked.append(timed)
        seen = {id(request) for _, request in picked}
        more = [
            (time_s, request)
            for pid, _comm, dev, rw, _cgroup in each
            for drain_start, time_s, request in self._each.get((pid, dev, rw), ())
            if drain_start >= first_drain and id(request) not in seen
        ]
        if more:  # two rows of one pid (two comms, two cgroups) share its list: once each
            picked = sorted({id(t[1]): t for t in (*picked, *more)}.values(),
                            key=lambda timed: -timed[1].time)
        return picked

    def _request_rows(self, requests: Sequence[tuple[float, CompletedRequest]]) -> tuple[IoRequest, ...]:
        return tuple(
            IoRequest(
                time_s=time_s,
                comm=request.comm,
                pid=request.pid,
                disk=self.disk_name(request.dev),
                rw=request.rw,
                sector=request.sector,
                bytes=request.bytes,
                queue_ms=request.queue_ns / 1e6,
                lat_ms=request.latency_ns / 1e6,
                cgroup=request.cgroup,
            )
            for time_s, request in requests
        )


def _disks(merged: _IoCounts, disk_name: Callable[[int], str]) -> tuple[DiskStats, ...]:
    per_disk: dict[int, dict[str, _Totals]] = {}
    for (_pid, _comm, dev, rw, _cgroup), totals in merged.totals.items():
        per_disk.setdefault(dev, {}).setdefault(rw, _Totals()).add(totals)
    slots: dict[int, Counter] = {}
    for ((_pid, _comm, dev, _rw, _cgroup), slot), count in merged.slots.items():
        slots.setdefault(dev, Counter())[slot] += count
    disks = []
    for dev, by_rw in per_disk.items():
        reads, writes = by_rw.get("R", _Totals()), by_rw.get("W", _Totals())
        flushes = by_rw.get("F", _Totals()).requests
        requests = reads.requests + writes.requests
        if not requests and not flushes:
            continue
        major, minor = split_dev(dev)
        disks.append(
            DiskStats(
                disk=disk_name(dev),
                major=major,
                minor=minor,
                reads=reads.requests,
                writes=writes.requests,
                read_bytes=reads.bytes,
                write_bytes=writes.bytes,
                avg_lat_ms=(reads.latency_ns + writes.latency_ns) / requests / 1e6 if requests
                else 0.0,
                hist_us=histogram(slots.get(dev, {})),
                flushes=flushes,
            )
        )
    return tuple(sorted(disks, key=lambda d: (d.disk, d.major, d.minor)))

def _processes(merged: _IoCounts, disk_name: Callable[[int], str]) -> tuple[IoProcess, ...]:
    slots: dict[IoKey, Counter] = {}
    for (key, slot), count in merged.slots.items():
        slots.setdefault(key, Counter())[slot] += count
    stacks: dict[IoKey, list[IoSubmitStack]] = {}
    for (key, frames), requests in merged.stacks.items():
        stacks.setdefault(key, []).append(IoSubmitStack(frames, requests))
    rows = []
    for key, totals in merged.totals.items():
        if not totals.requests:
            continue
        pid, comm, dev, rw, cgroup = key
        major, minor = split_dev(dev)
        rows.append(
            IoProcess(
                pid=pid,
                comm=comm,
                disk=disk_name(dev),
                major=major,
                minor=minor,
                rw=rw,
                requests=totals.requests,
                bytes=totals.bytes,
                avg_lat_ms=totals.latency_ns / totals.requests / 1e6,
                avg_queue_ms=totals.queue_ns / totals.requests / 1e6,
                stacks=tuple(sorted(stacks.get(key, ()), key=lambda s: (-s.requests, s.frames))),
                hist_us=histogram(slots.get(key, {})),
                cgroup=cgroup,
            )
        )
    rows.sort(key=lambda p: (-p.bytes, -p.requests, p.pid, p.disk, p.rw))
    return tuple(rows)


def _counted(profile: BlockProfile) -> _IoCounts:
    """A recorded interval's profile back to the counts it was built from (latencies to
    whole ns again: the averages were divided from them)."""
    counts = _IoCounts()
    for p in profile.processes:
        key = (p.pid, p.comm, kernel_dev(p.major, p.minor), p.rw, p.cgroup)
        counts.totals.setdefault(key, _Totals()).add(_Totals(
            p.requests, p.bytes, round(p.avg_lat_ms * p.requests * 1e6),
            round(p.avg_queue_ms * p.requests * 1e6)))
        for bucket in p.hist_us:  # slot k holds 2^(k-1) .. 2^k - 1 us
            counts.slots[key, max(1, bucket.high.bit_length())] += bucket.count
        for stack in p.stacks:
            counts.stacks[key, stack.frames] += stack.requests
    return counts


def merge_profiles(profiles: Sequence[BlockProfile], max_requests: int = MAX_REQUESTS) -> BlockProfile:
    """Recorded intervals, oldest first, as the live window sums them: each counted back,
    summed by the window's own merge, the disks and processes built as live; the newest
    requests as live lists them; losses (since start) the newest's."""
    merged = _IoCounts()
    for profile in profiles:
        merged.merge(_counted(profile))
    names = {kernel_dev(d.major, d.minor): d.disk for profile in profiles for d in profile.disks}
    names.update((kernel_dev(p.major, p.minor), p.disk)
                 for profile in profiles for p in profile.processes)

    def disk_name(dev: int) -> str:
        return names.get(dev) or "{}:{}".format(*split_dev(dev))

    processes = _processes(merged, disk_name)
    requests = newest_requests((r for p in reversed(profiles) for r in p.requests),
                               {(p.pid, p.disk, p.rw) for p in processes}, max_requests)
    return BlockProfile(
        lost=sum_lost(p.lost for p in profiles),
        disks=_disks(merged, disk_name),
        processes=processes,
        requests=requests,
        window_s=sum(p.window_s for p in profiles),
    )


def build(source: PaneServices) -> tuple[BlockCollector, BlockAggregator]:
    """The block I/O pane's collector and aggregator (ktop.registry)."""
    from ktop.panes.blockio.collector import BlockCollector  # noqa: PLC0415

    return BlockCollector(source.options.interval_s), BlockAggregator(
        source.options.window_s, symbols=source.kallsyms()
    )
