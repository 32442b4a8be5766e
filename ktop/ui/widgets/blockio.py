"""Block I/O per process like biotop, per request like biosnoop, and latency per disk."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ktop.cgroups import short_name
from ktop.model import PANE_BLOCKIO, BlockProfile, DiskStats, IoProcess, IoRequest, Snapshot
from ktop.text import format_pid, human_bytes
from ktop.ui.widgets.pane import WIDER, Display, Drill, Pane, PaneRow, View
from ktop.ui.widgets.table import Cell, Column, num
from ktop.units import format_bucket, format_span

# Queue time is the first column a half-screen pane drops for AVG SIZE (it fits from 180
# columns); a zoomed pane shows it.
QUEUE_FROM = 84


class BlockIoPane(Pane):
    PANE = PANE_BLOCKIO
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
    )

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
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
        window = format_span(snapshot.duration_s)
        scope = "  all processes" if display.filtered and self.view == "histogram" else ""
        subtitle = f"{self.view} (v)  last {window}{scope}"
        if lost:
            subtitle += f"  lost {lost}"
        return rows, f"no block I/O in the last {window}", subtitle

    def note(self, snapshot: Snapshot, display: Display) -> str:
        share = writeback_share(snapshot.blockio) if snapshot.blockio else None
        if share is None:
            return ""
        return (f"{share:.0%} of the bytes written were sent by writeback threads (kworker): "
                "who wrote them shows as DISK W/s in 4 Processes (z)")

    def view_description(self) -> str:
        return {"processes": "per process, as biotop", "requests": "each request, as biosnoop",
                "histogram": "latency per disk", "commands": "grouped by command"}.get(
                    self.view, self.view)

    def drill_row(self, row: IoProcess | IoRequest | IoCommand | DiskStats) -> Drill:
        snapshot = self._snapshot
        if snapshot is None:  # no rows shown yet: nothing to open
            return None
        process: IoProcess | None = row if isinstance(row, IoProcess) else None
        if isinstance(row, IoRequest) and snapshot.blockio is not None:  # opens its process
            process = next((p for p in snapshot.blockio.processes if p.pid == row.pid), None)
        if process is not None:
            from ktop.ui.screens.details import IoProcessScreen  # noqa: PLC0415  (loaded when first opened)

            return partial(IoProcessScreen, process, snapshot)
        if isinstance(row, IoCommand):
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
