"""Waits: where threads' time goes off the CPU, by process, blocking function, command or
cgroup. Percentages are of one thread's wall time over the window, summed over threads."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ktop.cgroups import short_name
from ktop.model import PANE_WAITS, Snapshot
from ktop.text import format_pid, printable
from ktop.ui.widgets.pane import (
    WIDE,
    WIDER,
    Display,
    Drill,
    Pane,
    PaneRow,
    View,
    in_window,
    window_label,
)
from ktop.ui.widgets.table import Cell, Column, num
from ktop.units import format_ns
from ktop.waitviews import (
    WaitGroup,
    WaitReason,
    by_cgroup,
    by_command,
    by_process,
    by_reason,
    percent,
    pressure_line,
)

_SHARE_COLUMNS = (
    Column("cpu", "CPU%", 6, right=True, priority=6),
    Column("runq", "RUNQ%", 6, right=True, priority=8),
    Column("d", "D%", 6, right=True, priority=8),
    Column("s", "S%", 6, right=True, priority=7),
    Column("other", "OTHER%", 7, right=True, shown_from=WIDE),
    Column("waits", "waits", 7, right=True, shown_from=WIDER),
)


def _share(ns: int, window_s: float, strong: float = 50.0) -> Cell:
    value = percent(ns, window_s)
    return num(f"{value:.1f}", value, "bold" if value >= strong else "")


def _share_cells(g: WaitGroup, window_s: float) -> tuple[Cell, ...]:
    return (
        _share(g.on_cpu_ns, window_s),
        _share(g.runq_ns, window_s, 10.0),
        _share(g.blocked_d_ns, window_s, 10.0),
        _share(g.blocked_s_ns, window_s),
        _share(g.blocked_other_ns, window_s),
        num(str(g.waits), g.waits),
    )


def _split_cells(g: WaitGroup, window_s: float, cpu: tuple[float, float] | None) -> tuple[Cell, ...]:
    """USR% and SYS%: the on-CPU time the scheduler counted, split as /proc/PID/stat's user
    and system ticks split it over the last refresh ("-" where the process pane has none)."""
    if cpu is None or cpu[0] + cpu[1] <= 0:
        return num("-", -1.0), num("-", -1.0)
    user = g.on_cpu_ns * cpu[0] / (cpu[0] + cpu[1])
    return _share(round(user), window_s), _share(g.on_cpu_ns - round(user), window_s)


class WaitsPane(Pane):
    PANE = PANE_WAITS
    COLUMN_HELP = {
        "PID": "the process, its threads summed",
        "CPU%": "time on a CPU, 100 = one thread all along",
        "USR%": "of that, in user mode (as /proc/PID/stat splits it)",
        "SYS%": "of that, in the kernel",
        "RUNQ%": "time runnable, waiting for a CPU",
        "D%": "time blocked uninterruptibly (D: disk I/O, some locks)",
        "S%": "time asleep (S: waiting for an event, a timer, input)",
        "OTHER%": "time off CPU in another state (stopped, idle kernel threads)",
        "waits": "blocked waits counted",
        "COMMAND": "its command",
        "top reason": "the blocking function its threads spent most blocked time in",
        "total": "blocked time summed",
        "%": "the share of all blocked time",
        "max": "the longest single wait",
        "S": "the state the threads blocked in: S (asleep) or D (uninterruptible)",
        "procs": "processes that waited",
        "blocking function": "where the threads blocked: the first meaningful function "
                             "below the scheduler",
        "cgroup": "the cgroup v2",
    }
    VIEWS = (
        View("processes", (
            Column("pid", "PID", 7, right=True, descending=False, priority=8),
            *_SHARE_COLUMNS[:1],
            Column("usr", "USR%", 6, right=True, shown_from=WIDE),
            Column("sys", "SYS%", 6, right=True, shown_from=WIDE),
            *_SHARE_COLUMNS[1:],
            Column("comm", "COMMAND", 15, descending=False, priority=9),
            Column("reason", "top reason", None, descending=False, priority=7, min_width=12),
        ), "runq"),
        View("reasons", (
            Column("total", "total", 9, right=True, priority=8),
            Column("share", "%", 6, right=True, priority=6),
            Column("count", "waits", 7, right=True, priority=7),
            Column("max", "max", 9, right=True, priority=4),
            Column("state", "S", 5, descending=False, priority=6),
            Column("procs", "procs", 5, right=True, shown_from=WIDE),
            Column("reason", "blocking function", None, descending=False, priority=9, min_width=20),
        ), "total"),
        View("commands", (
            Column("procs", "procs", 5, right=True, priority=5),
            *_SHARE_COLUMNS,
            Column("comm", "COMMAND", 15, descending=False, priority=9),
            Column("reason", "top reason", None, descending=False, priority=7, min_width=12),
        ), "runq"),
        View("cgroups", (
            Column("procs", "procs", 5, right=True, priority=5),
            *_SHARE_COLUMNS,
            Column("cgroup", "cgroup", None, descending=False, priority=9, min_width=20),
        ), "runq"),
    )

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        waits = snapshot.waits
        if waits is None:
            return [], "waiting for scheduler events...", ""
        window = waits.window_s or snapshot.duration_s
        shows = display.shows if display.filtered else None
        rows: list[PaneRow]
        if self.view == "reasons":
            reasons = by_reason(waits, shows)
            rows = [
                (
                    f"{r.reason}|{r.state}",
                    (
                        num(format_ns(r.total_ns), r.total_ns),
                        _share(r.total_ns, window),
                        num(str(r.count), r.count),
                        # None ended in the window (one blocked all along): no max yet.
                        num(format_ns(r.max_ns), r.max_ns) if r.count else num("-", -1),
                        Cell(r.state),
                        num(str(r.processes), r.processes),
                        Cell(r.reason),
                    ),
                    r,
                )
                for r in reasons
            ]
        elif self.view == "processes":
            cpu = {p.pid: (p.usr_percent, p.sys_percent) for p in snapshot.processes}
            rows = []
            for g in by_process(waits, shows):
                shares = _share_cells(g, window)
                cells = (num(format_pid(g.pid), g.pid), shares[0],
                         *_split_cells(g, window, cpu.get(g.pid)), *shares[1:], Cell(g.comm),
                         Cell(g.reason))
                rows.append((g.key, cells, g))
        elif self.view == "commands":
            rows = [
                (
                    g.key,
                    (num(str(g.processes), g.processes), *_share_cells(g, window), Cell(g.comm),
                     Cell(g.reason)),
                    g,
                )
                for g in by_command(waits, shows)
            ]
        else:
            rows = [
                (
                    g.key,
                    (num(str(g.processes), g.processes), *_share_cells(g, window),
                     Cell(short_name(g.cgroup), g.cgroup.lower())),
                    g,
                )
                for g in by_cgroup(waits, shows)
            ]
        label = window_label(replace(snapshot, duration_s=window))
        named = "blocking functions" if self.view == "reasons" else self.view
        subtitle = f"by {named} (v)  % of a thread's time, {label}"
        lost = sum(waits.lost.values())
        if lost:
            subtitle += f"  lost {lost}"
        return rows, f"no waits {in_window(replace(snapshot, duration_s=window))}", subtitle

    def note(self, snapshot: Snapshot, display: Display) -> str:
        """Where the pressure the header shows comes from, in one line."""
        waits = snapshot.waits
        if waits is None:
            return ""
        line = pressure_line(waits, waits.window_s or snapshot.duration_s)
        return f"pressure from  {printable(line)}" if line else ""

    def view_description(self) -> str:
        return {"processes": "by process", "reasons": "by blocking function",
                "commands": "by command", "cgroups": "by cgroup"}.get(self.view, self.view)

    def drill_row(self, row: WaitGroup | WaitReason) -> Drill:
        from ktop.ui.screens.waits import WaitStacksScreen  # noqa: PLC0415  (loaded when opened)

        snapshot = self._snapshot
        if snapshot is None:  # no rows shown yet: nothing to open
            return None
        if isinstance(row, WaitReason):
            return partial(WaitStacksScreen, ("reason", row.reason), snapshot)
        if self.view == "cgroups":  # G filters every pane to it
            return partial(WaitStacksScreen, ("cgroup", row.cgroup), snapshot)
        if self.view == "commands":
            return partial(WaitStacksScreen, ("comm", row.comm), snapshot)
        return partial(WaitStacksScreen, ("pid", str(row.pid)), snapshot)
