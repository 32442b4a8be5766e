"""Snapshots as Prometheus / OpenMetrics metrics, rendered with prometheus_client.

The source runs cumulative, so counters count since ktop started and Prometheus' rate()
gives the recent figures. Cardinality stays bounded: functions, lock callers, disks and
processes (by command and cgroup, never by pid) get a series each for the top N only (N
configurable) and the rest are summed into one series labelled `other`; stacks and pids never
go into labels. Label values are made
visible-safe (control characters escaped, as on ktop's screen) and then escaped by
prometheus_client as the exposition format requires (backslash, quote, newline).

`other` must stay a counter, never go down: it adds the increase of whatever is outside the
top N at each refresh, so a function that enters the top N keeps its past in `other` and its
own series starts with its total since start (rate() takes a new series' first value as its
base). Everything else is the snapshot's own counts.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry

from ktop.lockviews import UNNAMED
from ktop.model import Bucket, Snapshot
from ktop.registry import PANES, bpf_panes
from ktop.text import printable
from ktop.waitviews import hist_buckets_us, machine_runq_hist

DEFAULT_TOP = 20
OTHER = "other"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TEXT = "application/openmetrics-text; version=1.0.0; charset=utf-8"

# Histogram bounds, powers of two (in seconds as Prometheus wants them): the kernel counts
# waits and latencies in log2 slots, so each slot falls whole under one bound, never split.
LOCK_WAIT_BOUNDS_NS = tuple(1 << k for k in range(8, 34))  # 256 ns .. 8.6 s
IO_LATENCY_BOUNDS_US = tuple(1 << k for k in range(4, 25))  # 16 us .. 16.8 s


# Run-queue latency buckets, in us: 4 us to ~1 s by powers of four.
RUNQ_BOUNDS_US = tuple(4 ** k for k in range(1, 11))

def label_value(text: str) -> str:
    """Control characters escaped visibly (a scrape read with curl must not drive the
    terminal), and text that is not valid UTF-8 made so: one bad name must not break a scrape."""
    text = printable(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class TopCounters:
    """Counters for the N keys with the highest totals; the rest summed into `other`,
    which only ever grows (module docstring). One instance per metric, across refreshes."""

    def __init__(self, top: int, values: int) -> None:
        self.top = top
        self._previous: dict[Hashable, tuple[float, ...]] = {}
        self._other = [0.0] * values

    def update(
        self, totals: dict[Hashable, tuple[float, ...]]
    ) -> tuple[list[tuple[Hashable, tuple[float, ...]]], tuple[float, ...]]:
        """(the top N as (key, values), most first; other's values). Ranked by the first value."""
        top = top_keys({key: values[0] for key, values in totals.items()}, self.top)
        chosen = set(top)
        for key, values in totals.items():
            if key in chosen:
                continue
            before = self._previous.get(key)
            for i, value in enumerate(values):
                self._other[i] += max(0.0, value - before[i]) if before else value
        self._previous = totals
        return [(key, totals[key]) for key in top], tuple(self._other)


def top_keys(values: dict[Hashable, float], top: int) -> list[Hashable]:
    """The keys of the N highest values, highest first (ties by key, so a scrape is stable)."""
    return heapq.nlargest(top, values, key=lambda key: (values[key], str(key)))


def _cumulative_buckets(
    buckets: Iterable[Bucket], bounds: Sequence[int], scale: float
) -> tuple[list[tuple[str, float]], int]:
    """Log2 buckets (high inclusive, whole units) as Prometheus `le` buckets: a bucket counts
    under every bound it ends below (a value v <= high is < high + 1 <= le)."""
    under = [0] * len(bounds)
    total = 0
    for bucket in buckets:
        total += bucket.count
        for i, bound in enumerate(bounds):
            if bucket.high + 1 <= bound:
                under[i] += bucket.count
    rows = [(repr(bound * scale), float(count)) for bound, count in zip(bounds, under)]
    return rows + [("+Inf", float(total))], total


@dataclass(frozen=True)
class _Histogram:
    buckets: tuple[Bucket, ...]
    sum_s: float


class SnapshotMetrics:
    """Turns each snapshot of a cumulative source into metric families (keeping what the
    top-N counters carry from one refresh to the next)."""

    def __init__(self, top: int = DEFAULT_TOP, include_idle: bool = False) -> None:
        self.top = top
        self.include_idle = include_idle
        self._counters: dict[str, TopCounters] = {}
        self._floors: dict[str, float] = {}

    def _top(self, name: str, totals: dict, values: int) -> tuple[list, tuple[float, ...]]:
        counters = self._counters.get(name)
        if counters is None:
            counters = self._counters[name] = TopCounters(self.top, values)
        return counters.update(totals)

    def families(self, snapshot: Snapshot | None, starting: bool = False) -> list[Metric]:
        """Every family for `snapshot`; None while the first snapshot is being made."""
        up = GaugeMetricFamily(
            "ktop_up", "1 once every BPF pane has attached or said why it cannot; 0 while "
            "starting up (what is ready is reported meanwhile)")
        ready = snapshot is not None and not snapshot.loading and not starting
        up.add_metric([], 1.0 if ready else 0.0)
        families: list[Metric] = [up]
        if snapshot is None:
            return families
        families += self._health(snapshot)
        for spec in PANES:  # each pane's families, as ktop.registry declares them
            if spec.metrics is not None:
                families += spec.metrics(self, snapshot)
        families += self._pressure(snapshot)
        return families

    def _health(self, snapshot: Snapshot) -> list[Metric]:
        info = GaugeMetricFamily("ktop_build_info", "ktop's version and the kernel it watches",
                                 labels=["version", "kernel"])
        info.add_metric([label_value(snapshot.ktop_version), label_value(snapshot.kernel)], 1.0)
        pane = GaugeMetricFamily(
            "ktop_pane_up", "1 while a pane's collector runs; 0 while it loads or if it cannot "
            "(ktop's screen and --snapshot FILE.json say why)", labels=["pane"])
        for name in (spec.name for spec in bpf_panes()):
            running = name not in snapshot.unavailable and name not in snapshot.loading
            pane.add_metric([name], 1.0 if running else 0.0)
        families = [info, pane]
        if snapshot.cost is not None:
            cost = GaugeMetricFamily(
                "ktop_self_cpu_ratio", "ktop's own CPU over the last refresh (1 = one CPU); "
                "bpf: its BPF programs' run time over the latest refresh the kernel's run-time "
                "statistics were on (one in 5: they cost every program run)", labels=["part"])
            cost.add_metric(["process"], _ratio(snapshot.cost.cpu_percent))
            if snapshot.cost.bpf_percent is not None:
                cost.add_metric(["bpf"], _ratio(snapshot.cost.bpf_percent))
            families.append(cost)
        return families

    def functions_families(self, snapshot: Snapshot) -> list[Metric]:
        cpu = snapshot.cpu
        if cpu is None:
            return []
        seconds = CounterMetricFamily(
            "ktop_cpu_seconds", "CPU time of all CPUs from /proc/stat since ktop started, by mode",
            labels=["mode"])
        machine_s = cpu.window_s * cpu.cpus
        times = cpu.times
        for mode, share in (("kernel", times.kernel), ("user", times.user), ("idle", times.idle),
                            ("steal", times.steal), ("iowait", times.iowait)):
            value = round(share / 100 * machine_s, 3)
            seconds.add_metric([mode], self._monotonic(f"cpu_seconds/{mode}", value))
        samples = CounterMetricFamily(
            "ktop_cpu_samples", "cpu-clock samples taken (each 1/Hz s of one CPU), by where they "
            "landed", labels=["mode"])
        for mode, count in (("kernel", cpu.kernel_samples), ("user", cpu.user_samples),
                            ("idle", cpu.idle_samples)):
            samples.add_metric([mode], float(count))
        expected = CounterMetricFamily(
            "ktop_cpu_samples_expected", "Hz x seconds x CPUs: what an always-busy machine would "
            "have given (tickless idle CPUs give fewer)")
        expected.add_metric([], self._monotonic("cpu_expected", float(cpu.expected_samples)))
        hz = GaugeMetricFamily("ktop_sample_frequency_hertz", "cpu-clock sampling frequency")
        hz.add_metric([], float(cpu.sample_hz))
        lost = CounterMetricFamily("ktop_cpu_lost_samples", "samples not counted whole, by reason",
                                   labels=["reason"])
        for reason, count in sorted(cpu.lost.items()):
            lost.add_metric([label_value(reason)], float(count))
        functions = CounterMetricFamily(
            "ktop_function_samples", "samples that landed in each kernel function (top N by "
            "samples; the rest as function=\"other\")", labels=["function", "module"])
        totals = {
            (f.symbol, f.module): (float(f.samples),)
            # (not the callers listed for their Children: no sample landed in them)
            for f in cpu.functions if f.samples and (self.include_idle or not f.idle)
        }
        top, (other,) = self._top("functions", totals, 1)
        rows = [((label_value(symbol), label_value(module)), values[0])
                for (symbol, module), values in top]
        _add_rows(functions, rows + [((OTHER, ""), other)])
        return [seconds, samples, expected, hz, lost, functions]

    def _monotonic(self, name: str, value: float) -> float:
        """A counter derived from shares (rounded on the way) must never step back, or
        Prometheus would take it for a restart."""
        value = max(value, self._floors.get(name, 0.0))
        self._floors[name] = value
        return value

    def locks_families(self, snapshot: Snapshot) -> list[Metric]:
        locks = snapshot.locks
        if locks is None:
            return []
        totals = {
            (c.type, c.caller): (c.total_wait_ns / 1e9, float(c.contended)) for c in locks.callers
        }
        top, other = self._top("lock_callers", totals, 2)
        wait = CounterMetricFamily(
            "ktop_lock_wait_seconds", "time tasks waited for contended kernel locks, by lock "
            "type and caller (top N by wait; the rest as caller=\"other\")",
            labels=["lock_type", "caller"])
        contentions = CounterMetricFamily(
            "ktop_lock_contentions", "contended kernel lock acquisitions, by lock type and "
            "caller (the callers of ktop_lock_wait_seconds)", labels=["lock_type", "caller"])
        rows = [((label_value(kind), label_value(caller)), values) for (kind, caller), values in top]
        rows.append(((OTHER, OTHER), other))
        _add_rows(wait, [(labels, values[0]) for labels, values in rows])
        _add_rows(contentions, [(labels, values[1]) for labels, values in rows])
        # By what the locks are (their names, never an instance: no pid or path in a label).
        by_name: dict[tuple[str, str], tuple[float, float]] = {}
        for lock in locks.locks:
            key = (lock.type, lock.name or UNNAMED)
            seconds, count = by_name.get(key, (0.0, 0.0))
            by_name[key] = (seconds + lock.total_wait_ns / 1e9, count + lock.contended)
        named, other_named = self._top("lock_names", by_name, 2)
        name_wait = CounterMetricFamily(
            "ktop_lock_name_wait_seconds", "time tasks waited for contended kernel locks, by "
            "lock type and what the lock is (&mm->mmap_lock, &inode->i_rwsem, a global...; "
            "top N by wait, the rest as lock=\"other\")", labels=["lock_type", "lock"])
        name_contentions = CounterMetricFamily(
            "ktop_lock_name_contentions", "contended kernel lock acquisitions, by lock type "
            "and what the lock is", labels=["lock_type", "lock"])
        name_rows = [((label_value(kind), label_value(name)), values)
                     for (kind, name), values in named]
        name_rows.append(((OTHER, OTHER), other_named))
        _add_rows(name_wait, [(labels, values[0]) for labels, values in name_rows])
        _add_rows(name_contentions, [(labels, values[1]) for labels, values in name_rows])
        by_type: dict[str, list[Bucket]] = {}
        sums: dict[str, float] = {}
        for caller in locks.callers:
            by_type.setdefault(caller.type, []).extend(caller.hist_ns)
            sums[caller.type] = sums.get(caller.type, 0.0) + caller.total_wait_ns / 1e9
        histogram = HistogramMetricFamily(
            "ktop_lock_wait_duration_seconds", "distribution of lock waits, by lock type",
            labels=["lock_type"])
        for kind in sorted(by_type):
            buckets, _count = _cumulative_buckets(by_type[kind], LOCK_WAIT_BOUNDS_NS, 1e-9)
            histogram.add_metric([label_value(kind)], buckets, sums[kind])
        lost = CounterMetricFamily("ktop_lock_lost_events", "lock events not counted whole, "
                                   "by reason", labels=["reason"])
        for reason, count in sorted(locks.lost.items()):
            lost.add_metric([label_value(reason)], float(count))
        return [wait, contentions, name_wait, name_contentions, histogram, lost]

    def waits_families(self, snapshot: Snapshot) -> list[Metric]:
        waits = snapshot.waits
        if waits is None:
            return []
        offcpu = CounterMetricFamily(
            "ktop_offcpu_seconds", "time threads spent off the CPU, by state: blocked S, D or "
            "other (switch-out to wake-up) and runqueue (wake-up or preemption to switch-in)",
            labels=["state"])
        for state, ns in (
            ("S", sum(p.blocked_s_ns for p in waits.processes)),
            ("D", sum(p.blocked_d_ns for p in waits.processes)),
            ("other", sum(p.blocked_other_ns for p in waits.processes)),
            ("runqueue", sum(p.runq_ns for p in waits.processes)),
        ):
            offcpu.add_metric([state], self._monotonic(f"offcpu/{state}", ns / 1e9))
        runq = HistogramMetricFamily(
            "ktop_runqueue_latency_seconds", "distribution of waits for a CPU (wake-up or "
            "preemption to switch-in), all threads")
        buckets, _count = _cumulative_buckets(hist_buckets_us(machine_runq_hist(waits)),
                                              RUNQ_BOUNDS_US, 1e-6)
        runq.add_metric([], buckets, sum(p.runq_ns for p in waits.processes) / 1e9)
        lost = CounterMetricFamily("ktop_wait_lost_events", "scheduler events not counted "
                                   "whole, by reason", labels=["reason"])
        for reason, count in sorted(waits.lost.items()):
            lost.add_metric([label_value(reason)], float(count))
        return [offcpu, runq, lost]

    def _pressure(self, snapshot: Snapshot) -> list[Metric]:
        pressure = snapshot.pressure
        if pressure is None:
            return []
        family = GaugeMetricFamily(
            "ktop_pressure_ratio", "PSI avg10: the share of the last 10 s some task (or all "
            "tasks: full) stalled on a resource", labels=["resource", "kind"])
        for resource, some, full in (("cpu", pressure.cpu_some, pressure.cpu_full),
                                     ("io", pressure.io_some, pressure.io_full),
                                     ("memory", pressure.memory_some, pressure.memory_full)):
            family.add_metric([resource, "some"], some / 100)
            if full is not None:
                family.add_metric([resource, "full"], full / 100)
        return [family]

    def blockio_families(self, snapshot: Snapshot) -> list[Metric]:
        blockio = snapshot.blockio
        if blockio is None:
            return []
        totals: dict[tuple[str, str], list[float]] = {}
        histograms: dict[tuple[str, str], _Histogram] = {}
        for process in blockio.processes:
            key = (process.disk, {"R": "read", "W": "write", "F": "flush"}.get(process.rw, "write"))
            row = totals.setdefault(key, [0.0, 0.0])
            row[0] += process.bytes
            row[1] += process.requests
            before = histograms.get(key, _Histogram((), 0.0))
            histograms[key] = _Histogram(
                before.buckets + process.hist_us,
                before.sum_s + process.avg_lat_ms / 1000 * process.requests,
            )
        top, other = self._top("disks", {k: tuple(v) for k, v in totals.items()}, 2)
        io_bytes = CounterMetricFamily(
            "ktop_disk_io_bytes", "bytes of block I/O requests completed, by disk and operation "
            "(top N disks by bytes; the rest as disk=\"other\")", labels=["disk", "op"])
        requests = CounterMetricFamily(
            "ktop_disk_io_requests", "block I/O requests completed, by disk and operation",
            labels=["disk", "op"])
        latency = HistogramMetricFamily(
            "ktop_disk_io_latency_seconds", "block I/O completion latency (issue to completion), "
            "by disk and operation", labels=["disk", "op"])
        rows = [((label_value(disk), op), values) for (disk, op), values in top]
        _add_rows(io_bytes, [(labels, values[0]) for labels, values in rows])
        _add_rows(requests, [(labels, values[1]) for labels, values in rows])
        io_bytes.add_metric([OTHER, OTHER], other[0])
        requests.add_metric([OTHER, OTHER], other[1])
        for (disk, op), _values in top:
            histogram = histograms[(disk, op)]
            buckets, _count = _cumulative_buckets(histogram.buckets, IO_LATENCY_BOUNDS_US, 1e-6)
            latency.add_metric([label_value(disk), op], buckets, histogram.sum_s)
        lost = CounterMetricFamily("ktop_blockio_lost_events", "block I/O events not counted "
                                   "whole, by reason", labels=["reason"])
        for reason, count in sorted(blockio.lost.items()):
            lost.add_metric([label_value(reason)], float(count))
        return [io_bytes, requests, latency, lost]


def _ratio(percent: float) -> float:
    """A percentage as a ratio, without float noise in the last digits (0.7809999999999999)."""
    return round(percent / 100, 6)


def _add_rows(family: Metric, rows: Iterable[tuple[Sequence[str], float]]) -> None:
    """Rows whose labels came out equal (two names escaped alike) are summed: a scrape with a
    duplicate series is rejected whole."""
    merged: dict[tuple[str, ...], float] = {}
    for labels, value in rows:
        key = tuple(labels)
        merged[key] = merged.get(key, 0.0) + value
    for labels, value in merged.items():
        family.add_metric(list(labels), value)


class _Families(Collector):
    def __init__(self, families: Callable[[], list[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families())


def render(families: list[Metric], openmetrics: bool = False) -> bytes:
    """The families as Prometheus text format 0.0.4, or OpenMetrics 1.0."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(lambda: families))
    return generate_openmetrics(registry) if openmetrics else generate_latest(registry)


def to_prom(snapshot: Snapshot, top: int = DEFAULT_TOP, include_idle: bool = False) -> str:
    """One snapshot as the text node_exporter's textfile collector reads (format 0.0.4)."""
    families = SnapshotMetrics(top, include_idle).families(snapshot)
    return render(families).decode("utf-8")


def timestamped(family: Metric, counted_at: float) -> Metric:
    """A counter or histogram with the time its values count up to on every sample. A
    collect can come late on saturated CPUs, and Prometheus stamps a sample with the scrape's
    time: rate() then reads counts of the seconds before a late collect as if they were of
    the seconds to the scrape (188.8/s for 198 over 30 s). Gauges say how things are now,
    and keep the scrape's time (and Prometheus' staleness marking)."""
    if family.type in ("counter", "histogram"):
        family.samples = [sample._replace(timestamp=counted_at) for sample in family.samples]
    return family


class MetricsPage:
    """The latest exposition, rendered once per refresh and per format, whatever the number
    of scrapes: a scrape costs a lookup, and what it holds is one snapshot's text."""

    def __init__(self, top: int = DEFAULT_TOP, include_idle: bool = False) -> None:
        self._metrics = SnapshotMetrics(top, include_idle)
        self._lock = threading.Lock()
        self._families = self._metrics.families(None)
        self._rendered: dict[bool, bytes] = {}

    def update(self, snapshot: Snapshot, starting: bool = False,
               counted_at: float | None = None) -> None:
        """Called by the one collecting thread. counted_at: the unix time the counters
        count up to (when the collect drained them), written with each counter's samples."""
        families = self._metrics.families(snapshot, starting)
        if counted_at is not None:
            families = [timestamped(family, counted_at) for family in families]
        with self._lock:
            self._families = families
            self._rendered = {}

    def body(self, openmetrics: bool = False) -> bytes:
        with self._lock:
            body = self._rendered.get(openmetrics)
            if body is None:
                body = self._rendered[openmetrics] = render(self._families, openmetrics)
            return body
