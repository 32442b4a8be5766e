"""Processes as top shows them: PID USER S CPU% USR% SYS% THR RES COMMAND (100% = one CPU),
with iotop's DISK R/s and DISK W/s and the cgroup where the pane is wide enough; or grouped by
command or by cgroup (v). Children that exited in the interval show as one `exited` row
under the process that waited for them."""

from __future__ import annotations

from dataclasses import dataclass

from ktop.cgroups import short_name
from ktop.model import EXITED_PID, PANE_PROCESSES, ProcessRow, Snapshot
from ktop.text import human_bytes
from ktop.ui.widgets.pane import WIDE, WIDER, CgroupFilter, Display, Drill, Pane, PaneRow, View
from ktop.ui.widgets.table import Cell, Column, num

READ_LATE_SHOWN_S = 0.5  # processes read this long after the drain: the title says so


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


@dataclass(frozen=True)
class CommandRow:
    """The processes running one command (as htop groups them), summed; or the exited
    children of processes of one command."""

    command: str
    tasks: int  # processes; 0 for exited children
    threads: int
    cpu_percent: float
    user_percent: float
    sys_percent: float
    rss_bytes: int
    disk_read_bps: float | None
    disk_write_bps: float | None
    exited: bool = False


class ProcessesPane(Pane):
    PANE = PANE_PROCESSES
    COLUMN_HELP = {
        "PID": "the process id (exited: processes that ended, folded by command)",
        "USER": "its owner",
        "S": "its state: R running, S sleeping, D uninterruptible (mostly disk I/O), "
             "Z zombie, T stopped, I idle kernel thread, X exited",
        "CPU%": "CPU time, user and kernel, 100 = one CPU",
        "USR%": "CPU time in user mode",
        "SYS%": "CPU time in the kernel",
        "RUNQ%": "time its threads waited for a CPU (schedstat), 100 = one thread all along",
        "THR": "its threads",
        "RES": "resident memory",
        "DISK R/s": "bytes a second read from storage for it (/proc/PID/io)",
        "DISK W/s": "bytes a second it caused to be written (counted as it dirtied pages)",
        "CGROUP": "its cgroup v2",
        "COMMAND": "its command line (the commands view: its command)",
        "NAME": "the cgroup's short name (a unit, a container)",
        "TASKS": "processes in it",
    }
    VIEWS = (
        View(
            "processes",
            (
                Column("pid", "PID", 7, right=True, descending=False, priority=9),
                Column("user", "USER", 8, descending=False, priority=4),
                Column("state", "S", 1, descending=False, priority=5),
                Column("cpu", "CPU%", 5, right=True, priority=9),
                Column("usr", "USR%", 5, right=True, priority=5),
                Column("sys", "SYS%", 5, right=True, priority=6),
                Column("runq", "RUNQ%", 5, right=True, priority=4),
                Column("threads", "THR", 4, right=True, shown_from=WIDE, priority=2),
                Column("rss", "RES", 6, right=True, priority=3),
                Column("disk_read", "DISK R/s", 8, right=True, shown_from=WIDE),
                Column("disk_write", "DISK W/s", 8, right=True, shown_from=WIDE),
                Column("cgroup", "CGROUP", 14, descending=False, shown_from=WIDER),
                Column("command", "COMMAND", None, descending=False, priority=9, min_width=20),
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
                Column("cgroup", "CGROUP", None, descending=False, priority=3, min_width=16),
            ),
            "cpu",
        ),
        View(
            "commands",
            (
                Column("tasks", "TASKS", 5, right=True),
                Column("cpu", "CPU%", 5, right=True, priority=9),
                Column("usr", "USR%", 5, right=True),
                Column("sys", "SYS%", 5, right=True),
                Column("threads", "THR", 4, right=True, shown_from=WIDE),
                Column("rss", "RES", 6, right=True),
                Column("disk_read", "DISK R/s", 8, right=True, shown_from=WIDE),
                Column("disk_write", "DISK W/s", 8, right=True, shown_from=WIDE),
                Column("name", "COMMAND", None, descending=False, priority=9, min_width=20),
            ),
            "cpu",
        ),
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._made: dict[int, PaneRow] = {}  # pid -> the row shown for it last time

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        processes = snapshot.processes
        if display.filtered:
            processes = tuple(p for p in processes if display.shows(p.parent or p.pid, p.cgroup))
        subtitle = task_summary(snapshot, processes if display.filtered else None)
        rows: list[PaneRow]
        if self.view == "commands":
            commands = by_command(processes)
            rows = [(f"{c.exited}|{c.command}", _command_cells(c), c) for c in commands]
            return rows, "no such process (it may have exited)", f"by command (v)  {subtitle}"
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

    def view_description(self) -> str:
        return {"processes": "one row per process", "cgroups": "grouped by cgroup",
                "commands": "grouped by command"}.get(self.view, self.view)

    def drill_row(self, row: ProcessRow | CgroupRow | CommandRow) -> Drill:
        if isinstance(row, CgroupRow):
            return CgroupFilter(row.cgroup) if row.cgroup else None
        if isinstance(row, CommandRow):
            self.notify("a command holds several processes: open one in the per-process view (v)")
            return None
        return row.parent or row.pid  # every pane shows this process (the exited's parent) alone


def task_summary(snapshot: Snapshot, shown: tuple[ProcessRow, ...] | None = None) -> str:
    """Processes and threads listed, and the kernel's own count of runnable tasks (a scan of
    process states finds none under fork churn: the tasks that run exit before they are
    read), with tasks started a second. Under a filter, the rows shown are counted, "of" the
    machine's: the kernel's counts are the machine's, so the running ones are the rows'."""
    processes = threads = 0
    for p in snapshot.processes:
        if p.pid != EXITED_PID:
            processes += 1
            threads += p.threads
    if shown is not None:
        listed = [p for p in shown if p.pid != EXITED_PID]
        running = sum(1 for p in listed if p.state == "R")
        return (f"{len(listed)} of {processes} tasks, {sum(p.threads for p in listed)} thr;"
                f" {running} running")
    tasks = snapshot.tasks
    if tasks is None:  # a recording from before ktop kept the kernel's counts
        running = sum(1 for p in snapshot.processes if p.state == "R")
        return f"{processes} tasks, {running} running"
    text = f"{processes} tasks, {threads} thr; {tasks.running} running"
    if tasks.forks_per_s:
        text += f", {tasks.forks_per_s:.0f} started/s"
    if tasks.read_late_s >= READ_LATE_SHOWN_S:  # a saturated machine: say the rows are later
        text += f"; read {tasks.read_late_s:.1f}s after the other panes"
    return text


def _row(p: ProcessRow) -> PaneRow:
    exited = p.pid == EXITED_PID
    tie = -(p.parent or p.pid)
    command = p.cmdline or f"[{p.comm}]"  # as htop shows it; kernel threads have none: [name]
    return (
        f"exited|{p.parent}" if exited else str(p.pid),
        (
            num("exited" if exited else str(p.pid), p.parent if exited else p.pid),
            Cell(p.user[:8], p.user),
            Cell(p.state, style="bold green" if p.state == "R" else ""),
            num(_percent(p.cpu_percent), (p.cpu_percent, tie), _busy(p.cpu_percent)),
            num(_percent(p.usr_percent), (p.usr_percent, tie)),
            num(_percent(p.sys_percent), (p.sys_percent, tie)),
            _runq(p.runq_percent, tie),
            num("-" if exited else str(p.threads), p.threads),
            num("-" if exited else human_bytes(p.rss_bytes), p.rss_bytes),
            _rate(p.disk_read_bps, tie),
            _rate(p.disk_write_bps, tie),
            Cell(short_name(p.cgroup), p.cgroup.lower()),
            Cell(f"<children of {p.parent}> {command}" if exited else command, p.comm.lower()),
        ),
        p,
    )


def _runq(percent: float | None, tie: int) -> Cell:
    """Time waiting for a CPU (schedstat's run_delay): "-" where unknown."""
    if percent is None:
        return num("-", (-1.0, tie))
    return num(_percent(percent), (percent, tie), "bold" if percent >= 10 else "")


def _command_cells(c: CommandRow) -> tuple[Cell, ...]:
    return (
        num(str(c.tasks) if c.tasks else "-", c.tasks),
        num(_percent(c.cpu_percent), c.cpu_percent, _busy(c.cpu_percent)),
        num(_percent(c.user_percent), c.user_percent),
        num(_percent(c.sys_percent), c.sys_percent),
        num(str(c.threads) if c.tasks else "-", c.threads),
        num(human_bytes(c.rss_bytes) if c.tasks else "-", c.rss_bytes),
        _rate(c.disk_read_bps),
        _rate(c.disk_write_bps),
        Cell(c.command, (c.exited, c.command.lower())),
    )


def by_command(processes: tuple[ProcessRow, ...]) -> list[CommandRow]:
    """One row per command (the program's name, as htop groups by it), busiest first; the
    exited children of each command's processes in a row of their own."""
    groups: dict[tuple[bool, str], list[ProcessRow]] = {}
    for p in processes:
        groups.setdefault((p.pid == EXITED_PID, p.comm), []).append(p)
    rows = []
    for (exited, comm), members in groups.items():
        reads = [p.disk_read_bps for p in members if p.disk_read_bps is not None]
        writes = [p.disk_write_bps for p in members if p.disk_write_bps is not None]
        rows.append(CommandRow(
            command=f"<children of {comm}>" if exited else comm,
            tasks=0 if exited else len(members),
            threads=sum(p.threads for p in members),
            cpu_percent=round(sum(p.cpu_percent for p in members), 1),
            user_percent=round(sum(p.usr_percent for p in members), 1),
            sys_percent=round(sum(p.sys_percent for p in members), 1),
            rss_bytes=sum(p.rss_bytes for p in members),
            disk_read_bps=sum(reads) if reads else None,
            disk_write_bps=sum(writes) if writes else None,
            exited=exited,
        ))
    rows.sort(key=lambda c: (-c.cpu_percent, c.exited, c.command))
    return rows


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
            tasks=sum(1 for p in members if p.pid != EXITED_PID),
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


def _percent(percent: float) -> str:
    """100 = one CPU, in five columns: 99.5, 199.8, and 1600 on a machine of 16 CPUs."""
    return f"{percent:.1f}" if percent < 999.95 else f"{percent:.0f}"


def _busy(percent: float) -> str:
    return "bold red" if percent >= 50 else ("green" if percent >= 5 else "")
