"""Block I/O per process like biotop, per request like biosnoop, and latency per disk."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from ktop.aggregate.diskstats import Iostat, iostat
from ktop.cgroups import short_name
from ktop.model import (
    PANE_BLOCKIO,
    BlockProfile,
    Bucket,
    DiskStats,
    IoProcess,
    IoRequest,
    Snapshot,
)
from ktop.text import format_pid, human_bytes
from ktop.ui.widgets.pane import WIDER, Display, Drill, Pane, PaneRow, View, in_window, window_label
from ktop.ui.widgets.table import Cell, Column, num
from ktop.units import format_bucket

# Queue time is the first column a half-screen pane drops for AVG SIZE (it fits from 180
# columns); a zoomed pane shows it.
QUEUE_FROM = 84


class BlockIoPane(Pane):
    PANE = PANE_BLOCKIO
    COLUMN_HELP = {
        # processes (biotop's columns), commands
        "PID": "the process that submitted the I/O (what writeback sends shows as a kworker)",
        "COMM": "its command",
        "D": "the direction: R read, W write, F a cache flush (fsync's)",
        "MAJ": "the disk's major device number",
        "MIN": "the disk's minor device number",
        "DISK": "the disk, as lsblk names it",
        "I/O": "requests completed",
        "Kbytes": "kB read or written",
        "AVG SIZE": "the average request's size",
        "AVGms": "ms a request took on average, from issue to completion (biotop's AVGms)",
        "QUEms": "ms a request waited in the queue before the driver took it, on average",
        "CGROUP": "the submitter's cgroup",
        "TASKS": "processes of the command",
        # requests (biosnoop's)
        "TIME(s)": "when the request completed, in seconds since ktop started",
        "T": "the type: R read, W write, F a cache flush (fsync's, biosnoop's F)",
        "SECTOR": "the first 512-byte sector it read or wrote",
        "BYTES": "the request's size, in bytes",
        "QUE(ms)": "time queued before the driver took it",
        "LAT(ms)": "time from issue to completion",
        # histogram
        "latency": "a log2 bucket of completion latency (biolatency's)",
        "count": "requests that completed in that time",
        "distribution": "the count as a bar, the fullest bucket the longest",
        # disks (iostat -x's columns, from /proc/diskstats)
        "Device": "the whole disk (iostat -x's columns, from /proc/diskstats: no BPF)",
        "r/s": "reads completed a second",
        "rMB/s": "MB read a second",
        "rrqm/s": "reads merged into another before they were issued, a second",
        "%rrqm": "the share of reads merged into another",
        "r_await": "ms a read took on average, its time queued included",
        "rareq-sz": "the average read's size, kB",
        "w/s": "writes completed a second",
        "wMB/s": "MB written a second",
        "wrqm/s": "writes merged into another before they were issued, a second",
        "%wrqm": "the share of writes merged into another",
        "w_await": "ms a write took on average, its time queued included",
        "wareq-sz": "the average write's size, kB",
        "d/s": "discards (TRIM) completed a second",
        "d_await": "ms a discard took on average",
        "f/s": "cache flushes completed a second (fsync's; F in the other views)",
        "f_await": "ms a cache flush took on average",
        "aqu-sz": "requests in flight on average (the disk's queue length)",
        "%util": "the share of time the disk had a request in flight (100%: saturated for a "
                 "disk that serves one at a time, not for an SSD or a RAID)",
        "latency 16us-33ms": "the disk's request latencies as BPF timed them, a log2 bucket a "
                             "bar (the histogram view has them whole)",
    }
    VIEWS = (
        View(
            "processes",
            (
                Column("pid", "PID", 7, right=True, descending=False, priority=8),
                Column("comm", "COMM", 12, descending=False, priority=9),
                Column("rw", "D", 1, descending=False, priority=7),
                Column("major", "MAJ", 3, right=True, descending=False, priority=1),
                Column("minor", "MIN", 3, right=True, descending=False, priority=1),
                Column("disk", "DISK", 7, descending=False, priority=6),
                Column("io", "I/O", 5, right=True, priority=5),
                Column("kbytes", "Kbytes", 7, right=True, priority=8),
                # A direct write of 1 MiB reads as 2 requests: their size says so.
                Column("avgsize", "AVG SIZE", 8, right=True, priority=6),
                Column("avg", "AVGms", 6, right=True, priority=6),
                Column("queue", "QUEms", 6, right=True, shown_from=QUEUE_FROM, priority=3),
                Column("cgroup", "CGROUP", 14, descending=False, shown_from=WIDER),
            ),
            "kbytes",
        ),
        View(
            "requests",
            (
                Column("time", "TIME(s)", 10, right=True, priority=4),
                Column("comm", "COMM", 10, descending=False, priority=9),
                Column("pid", "PID", 7, right=True, descending=False, priority=7),
                Column("disk", "DISK", 5, descending=False, priority=6),
                Column("rw", "T", 1, descending=False, priority=7),
                Column("sector", "SECTOR", 10, right=True, descending=False, priority=2),
                Column("bytes", "BYTES", 7, right=True, priority=8),
                Column("queue", "QUE(ms)", 7, right=True, priority=3),
                Column("lat", "LAT(ms)", 7, right=True, priority=8),
            ),
            "time",
        ),
        View(
            "histogram",
            (
                Column("disk", "DISK", 8, descending=False),
                Column("rw", "D", 1, descending=False),
                Column("bucket", "latency", 18, right=True, descending=False),
                Column("count", "count", 8, right=True),
                Column("bar", "distribution", None, descending=False, priority=4, min_width=10),
            ),
            "bucket",
        ),
        View(
            "commands",
            (
                Column("tasks", "TASKS", 5, right=True),
                Column("rw", "D", 1, descending=False),
                Column("io", "I/O", 5, right=True),
                Column("kbytes", "Kbytes", 7, right=True),
                Column("avg", "AVGms", 6, right=True),
                Column("queue", "QUEms", 6, right=True),
                Column("comm", "COMM", None, descending=False),
            ),
            "kbytes",
        ),
        View(
            "disks",
            (
                Column("disk", "Device", 8, descending=False, priority=9),
                Column("r_s", "r/s", 7, right=True, priority=8),
                Column("rmb_s", "rMB/s", 6, right=True, priority=7),
                Column("rrqm_s", "rrqm/s", 6, right=True, priority=2),
                Column("rrqm_pct", "%rrqm", 5, right=True, priority=1),
                Column("r_await", "r_await", 7, right=True, priority=6),
                Column("rareq_sz", "rareq-sz", 8, right=True, priority=3),
                Column("w_s", "w/s", 7, right=True, priority=8),
                Column("wmb_s", "wMB/s", 6, right=True, priority=7),
                Column("wrqm_s", "wrqm/s", 6, right=True, priority=2),
                Column("wrqm_pct", "%wrqm", 5, right=True, priority=1),
                Column("w_await", "w_await", 7, right=True, priority=6),
                Column("wareq_sz", "wareq-sz", 8, right=True, priority=3),
                Column("d_s", "d/s", 6, right=True, priority=1),
                Column("d_await", "d_await", 7, right=True, priority=1),
                Column("f_s", "f/s", 6, right=True, priority=4),
                Column("f_await", "f_await", 7, right=True, priority=4),
                Column("aqu_sz", "aqu-sz", 6, right=True, priority=5),
                Column("util", "%util", 6, right=True, priority=7),
                Column("latency", "latency 16us-33ms", None, priority=2,
                       min_width=12),
            ),
            "util",
            field="iostat",
        ),
    )

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        if self.view == "disks":
            return disk_rows(snapshot)
        block = snapshot.blockio
        if block is None:
            return [], "waiting for block I/O events...", ""
        rows: list[PaneRow]
        if self.view == "processes":
            rows = [
                (
                    f"{p.pid}|{p.disk}|{p.rw}",
                    (
                        num(format_pid(p.pid), p.pid),
                        Cell(p.comm),
                        Cell(p.rw),
                        num(str(p.major), p.major),
                        num(str(p.minor), p.minor),
                        Cell(p.disk),
                        num(str(p.requests), p.requests),
                        num(str(p.bytes // 1024), p.bytes),
                        num(human_bytes(p.bytes / p.requests if p.requests else 0),
                            p.bytes / p.requests if p.requests else 0),
                        num(f"{p.avg_lat_ms:.2f}", p.avg_lat_ms),
                        num(f"{p.avg_queue_ms:.2f}", p.avg_queue_ms),
                        Cell(short_name(p.cgroup), p.cgroup.lower()),
                    ),
                    p,
                )
                for p in block.processes
                if display.shows(p.pid, p.cgroup)
            ]
        elif self.view == "requests":
            rows = [
                (
                    f"{r.time_s:.6f}|{r.disk}|{r.sector}",
                    (
                        num(f"{r.time_s:.6f}", r.time_s),
                        Cell(r.comm),
                        num(format_pid(r.pid), r.pid),
                        Cell(r.disk),
                        Cell(r.rw),
                        num(str(r.sector), r.sector),
                        num(str(r.bytes), r.bytes),
                        num(f"{r.queue_ms:.3f}", r.queue_ms),
                        num(f"{r.lat_ms:.3f}", r.lat_ms),
                    ),
                    r,
                )
                for r in block.requests
                if display.shows(r.pid, r.cgroup)
            ]
        elif self.view == "commands":
            rows = [
                (
                    f"{c.comm}|{c.rw}",
                    (
                        num(str(c.tasks), c.tasks),
                        Cell(c.rw),
                        num(str(c.requests), c.requests),
                        num(str(c.bytes // 1024), c.bytes),
                        num(f"{c.avg_lat_ms:.2f}", c.avg_lat_ms),
                        num(f"{c.avg_queue_ms:.2f}", c.avg_queue_ms),
                        Cell(c.comm),
                    ),
                    c,
                )
                for c in io_by_command(
                    tuple(p for p in block.processes if display.shows(p.pid, p.cgroup)))
            ]
        else:
            rows = []
            for disk in block.disks:
                peak = max((b.count for b in disk.hist_us), default=0) or 1
                for b in disk.hist_us:
                    rows.append(
                        (
                            f"{disk.disk}|{b.low}",
                            (
                                Cell(disk.disk),
                                Cell("*"),
                                num(format_bucket(b.low * 1000, b.high * 1000), (disk.disk, b.low)),
                                num(str(b.count), b.count),
                                Cell("█" * max(1, round(30 * b.count / peak)) if b.count else ""),
                            ),
                            disk,
                        )
                    )
        lost = sum(block.lost.values())
        scope = "  all processes" if display.filtered and self.view == "histogram" else ""
        subtitle = f"{self.view} (v)  {window_label(snapshot)}{scope}"
        if lost:
            subtitle += f"  lost {lost}"
        return rows, f"no block I/O {in_window(snapshot)}", subtitle

    def note(self, snapshot: Snapshot, display: Display) -> str:
        share = writeback_share(snapshot.blockio) if snapshot.blockio else None
        if share is None:
            return ""
        return (f"{share:.0%} of the bytes written were sent by writeback threads (kworker): "
                "who wrote them shows as DISK W/s in 4 Processes (z)")

    def view_description(self) -> str:
        return {"processes": "per process, as biotop", "requests": "each request, as biosnoop",
                "histogram": "latency per disk", "commands": "grouped by command",
                "disks": "each disk, as iostat -x"}.get(
                    self.view, self.view)

    def drill_row(self, row: IoProcess | IoRequest | IoCommand | DiskStats | Iostat) -> Drill:
        snapshot = self._snapshot
        if snapshot is None:  # no rows shown yet: nothing to open
            return None
        process: IoProcess | None = row if isinstance(row, IoProcess) else None
        if isinstance(row, IoRequest) and snapshot.blockio is not None:  # opens its process
            process = next((p for p in snapshot.blockio.processes if p.pid == row.pid), None)
        if process is not None:
            from ktop.panes.blockio.screens import IoProcessScreen  # noqa: PLC0415  (loaded when first opened)

            return partial(IoProcessScreen, process, snapshot)
        if isinstance(row, IoCommand | Iostat):
            self.notify("stacks are kept per process: switch to the process view (v)")
        return None  # a latency bucket: no stacks behind it


# Kernel threads that write dirty pages back for whoever dirtied them: "kworker/u8:2" (the
# "+flush-254:0" ps shows is not part of the comm), "flush-8:0" before Linux 3.10.
WRITEBACK_COMMS = ("kworker", "flush-")
WRITEBACK_MIN_BYTES = 1 << 20  # below a MiB written, a share says nothing


def writeback_share(block: BlockProfile) -> float | None:
    """The share of the bytes written in the window that writeback threads submitted, when
    it is most of them; None otherwise."""
    written = by_writeback = 0
    for p in block.processes:
        if p.rw == "W":
            written += p.bytes
            if p.comm.startswith(WRITEBACK_COMMS):
                by_writeback += p.bytes
    if written < WRITEBACK_MIN_BYTES or by_writeback * 2 <= written:
        return None
    return by_writeback / written


@dataclass(frozen=True)
class IoCommand:
    """The I/O of every process of one command in one direction, on all disks (the
    `commands` view, as htop groups)."""

    comm: str
    rw: str
    tasks: int
    requests: int
    bytes: int
    avg_lat_ms: float  # weighed by requests
    avg_queue_ms: float


def io_by_command(processes: tuple[IoProcess, ...]) -> list[IoCommand]:
    """One row per command and direction, most bytes first."""
    groups: dict[tuple[str, str], list[IoProcess]] = {}
    for p in processes:
        groups.setdefault((p.comm, p.rw), []).append(p)
    rows = []
    for (comm, rw), members in groups.items():
        requests = sum(p.requests for p in members)
        rows.append(IoCommand(
            comm, rw, len({p.pid for p in members}), requests, sum(p.bytes for p in members),
            sum(p.avg_lat_ms * p.requests for p in members) / requests if requests else 0.0,
            sum(p.avg_queue_ms * p.requests for p in members) / requests if requests else 0.0,
        ))
    rows.sort(key=lambda c: (-c.bytes, -c.requests, c.comm, c.rw))
    return rows


def _figure(value: float) -> str:
    """As iostat prints its figures: two decimals, fewer when they would not fit."""
    return f"{value:.2f}" if value < 1000 else f"{value:.1f}" if value < 100000 else f"{value:.0f}"


LATENCY_FROM_US = 16  # the disks view's latency bars: 12 log2 buckets from 16 us to 33 ms
LATENCY_BARS = 12
_BARS = " ▁▂▃▄▅▆▇█"


def latency_bars(buckets: tuple[Bucket, ...]) -> str:
    """One bar per log2 bucket from 16 us: a request faster than that counts in the first,
    a slower one than 33 ms in the last."""
    counts = [0] * LATENCY_BARS
    for b in buckets:
        slot = max(0, b.low.bit_length() - LATENCY_FROM_US.bit_length())
        counts[min(LATENCY_BARS - 1, slot)] += b.count
    peak = max(counts) or 1
    return "".join(_BARS[-1 if c == peak else (8 * c + peak - 1) // peak] if c else "·"
                   for c in counts)


def disk_rows(snapshot: Snapshot) -> tuple[list[PaneRow], str, str]:
    """The disks view: each whole disk as iostat -x shows it, over the window, with the
    latencies BPF timed on it (when the block pane's program runs)."""
    profile = snapshot.iostat
    if profile is None:
        return [], "reading /proc/diskstats: the first figures come at the next refresh", ""
    timed = {(d.major, d.minor): d.hist_us for d in snapshot.blockio.disks} if (
        snapshot.blockio) else {}
    rows: list[PaneRow] = []
    for disk in profile.disks:
        s = iostat(disk, profile.span_s)
        figures = (s.r_s, s.rmb_s, s.rrqm_s, s.rrqm_pct, s.r_await, s.rareq_sz, s.w_s,
                   s.wmb_s, s.wrqm_s, s.wrqm_pct, s.w_await, s.wareq_sz, s.d_s, s.d_await,
                   s.f_s, s.f_await, s.aqu_sz, s.util)
        hist = timed.get((disk.major, disk.minor), ())
        rows.append((
            f"{disk.major}:{disk.minor}",
            (Cell(disk.disk), *(num(_figure(v), (v, disk.minor)) for v in figures),
             Cell(latency_bars(hist) if hist else "", sum(b.count for b in hist))),
            s,
        ))
    label = window_label(replace(snapshot, duration_s=profile.span_s))
    return rows, "no disk has done I/O since boot", f"disks (v)  /proc/diskstats, {label}"
