"""Processes as top shows them: PID USER S CPU% SYS% THR RES COMMAND (100% = one CPU), with
iotop's DISK R/s and DISK W/s and the cgroup where the pane is wide enough; or grouped by
cgroup (v)."""

from __future__ import annotations

from dataclasses import dataclass

from ktop.cgroups import short_name
from ktop.model import PANE_PROCESSES, ProcessRow, Snapshot
from ktop.text import human_bytes
from ktop.widgets.pane import WIDE, WIDER, CgroupFilter, Display, Drill, Pane, PaneRow, View
from ktop.widgets.table import Cell, Column, num


@dataclass(frozen=True)
class CgroupRow:
    """The processes of one cgroup (not its children), summed."""

    cgroup: str
    tasks: int
    cpu_percent: float
    sys_percent: float
    rss_bytes: int
    disk_read_bps: float | None
    disk_write_bps: float | None


class ProcessesPane(Pane):
    PANE = PANE_PROCESSES
    TITLE = "4 Processes"
    KEY_LABEL = "Processes"  # in the help screen, beside its number key
    VIEWS = (
        View(
            "processes",
            (
                Column("pid", "PID", 7, right=True, descending=False),
                Column("user", "USER", 8, descending=False),
                Column("state", "S", 1, descending=False),
                Column("cpu", "CPU%", 6, right=True),
                Column("sys", "SYS%", 6, right=True),
                Column("threads", "THR", 4, right=True),
                Column("rss", "RES", 7, right=True),
                Column("disk_read", "DISK R/s", 8, right=True, shown_from=WIDE),
                Column("disk_write", "DISK W/s", 8, right=True, shown_from=WIDE),
                Column("cgroup", "CGROUP", 14, descending=False, shown_from=WIDER),
                Column("command", "COMMAND", None, descending=False),
            ),
            "cpu",
        ),
        View(
            "cgroups",
            (
                Column("name", "NAME", 18, descending=False),
                Column("tasks", "TASKS", 5, right=True),
                Column("cpu", "CPU%", 6, right=True),
                Column("sys", "SYS%", 6, right=True, shown_from=WIDE),
                Column("rss", "RES", 7, right=True, shown_from=WIDE),
                Column("disk_read", "DISK R/s", 8, right=True),
                Column("disk_write", "DISK W/s", 8, right=True),
                Column("cgroup", "CGROUP", None, descending=False),
            ),
            "cpu",
        ),
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._made: dict[int, PaneRow] = {}  # pid -> the row shown for it last time

    def rows(self, snapshot: Snapshot, display: Display):
        processes = snapshot.processes
        if display.filtered:
            processes = tuple(p for p in processes if display.shows(p.pid, p.cgroup))
        running = sum(1 for p in snapshot.processes if p.state == "R")
        subtitle = f"{len(snapshot.processes)} tasks, {running} running"
        if self.view == "cgroups":
            groups = by_cgroup(processes)
            rows = [
                (
                    g.cgroup,
                    (
                        Cell(short_name(g.cgroup) or "?", g.cgroup.lower()),
                        num(str(g.tasks), g.tasks),
                        num(f"{g.cpu_percent:.1f}", g.cpu_percent, _busy(g.cpu_percent)),
                        num(f"{g.sys_percent:.1f}", g.sys_percent),
                        num(human_bytes(g.rss_bytes), g.rss_bytes),
                        _rate(g.disk_read_bps),
                        _rate(g.disk_write_bps),
                        Cell(g.cgroup or "(no cgroup v2)"),
                    ),
                    g,
                )
                for g in groups
            ]
            empty = "no cgroup v2 here: /proc/PID/cgroup has no 0:: line" if not groups else ""
            return rows, empty or "no such cgroup", f"{len(groups)} cgroups (v)  {subtitle}"
        # The collector hands back the same row object for a process whose figures did not
        # change (most, on an idle machine): its cells are the ones made last time.
        made, self._made = self._made, {}
        rows = []
        for p in processes:
            kept = made.get(p.pid)
            row = kept if kept is not None and kept[2] is p else _row(p)
            self._made[p.pid] = row
            rows.append(row)
        return rows, "no such process (it may have exited)", subtitle

    def drill_row(self, row: ProcessRow | CgroupRow) -> Drill:
        if isinstance(row, CgroupRow):
            return CgroupFilter(row.cgroup) if row.cgroup else None
        return row.pid  # every pane shows this process alone


def _row(p: ProcessRow) -> PaneRow:
    return (
        str(p.pid),
        (
            num(str(p.pid), p.pid),
            Cell(p.user[:8], p.user),
            Cell(p.state, style="bold green" if p.state == "R" else ""),
            num(f"{p.cpu_percent:.1f}", (p.cpu_percent, -p.pid), _busy(p.cpu_percent)),
            num(f"{p.sys_percent:.1f}", (p.sys_percent, -p.pid)),
            num(str(p.threads), p.threads),
            num(human_bytes(p.rss_bytes), p.rss_bytes),
            _rate(p.disk_read_bps, -p.pid),
            _rate(p.disk_write_bps, -p.pid),
            Cell(short_name(p.cgroup), p.cgroup.lower()),
            # The command line as htop shows it; kernel threads have none: [name].
            Cell(p.cmdline or f"[{p.comm}]", p.comm.lower()),
        ),
        p,
    )


def by_cgroup(processes: tuple[ProcessRow, ...]) -> list[CgroupRow]:
    """One row per cgroup holding processes, busiest first. Disk rates are summed over the
    processes whose rates are known (None if none is)."""
    groups: dict[str, list[ProcessRow]] = {}
    for p in processes:
        groups.setdefault(p.cgroup, []).append(p)
    rows = []
    for cgroup, members in groups.items():
        reads = [p.disk_read_bps for p in members if p.disk_read_bps is not None]
        writes = [p.disk_write_bps for p in members if p.disk_write_bps is not None]
        rows.append(CgroupRow(
            cgroup=cgroup,
            tasks=len(members),
            cpu_percent=round(sum(p.cpu_percent for p in members), 1),
            sys_percent=round(sum(p.sys_percent for p in members), 1),
            rss_bytes=sum(p.rss_bytes for p in members),
            disk_read_bps=sum(reads) if reads else None,
            disk_write_bps=sum(writes) if writes else None,
        ))
    rows.sort(key=lambda g: (-g.cpu_percent, g.cgroup))
    return rows


def _rate(bps: float | None, tie: int = 0) -> Cell:
    """Bytes a second as iotop shows them, in powers of 1024; "-" where unknown."""
    if bps is None:
        return num("-", (-1.0, tie))
    style = "bold red" if bps >= 10 << 20 else ("green" if bps else "")
    return num(human_bytes(bps) if bps else "0", (bps, tie), style)


def _busy(percent: float) -> str:
    return "bold red" if percent >= 50 else ("green" if percent >= 5 else "")
