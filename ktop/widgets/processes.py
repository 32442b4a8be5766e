"""Processes as top shows them: PID USER S CPU% SYS% THR RES COMMAND (100% = one CPU)."""

from __future__ import annotations

from ktop.model import PANE_PROCESSES, ProcessRow, Snapshot
from ktop.text import human_bytes
from ktop.widgets.pane import Display, Drill, Pane, PaneRow, View
from ktop.widgets.table import Cell, Column, num


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
                Column("command", "COMMAND", None, descending=False),
            ),
            "cpu",
        ),
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._made: dict[int, PaneRow] = {}  # pid -> the row shown for it last time

    def rows(self, snapshot: Snapshot, display: Display):
        processes = snapshot.processes
        if display.pid is not None:
            processes = tuple(p for p in processes if p.pid == display.pid)
        # The collector hands back the same row object for a process whose figures did not
        # change (most, on an idle machine): its cells are the ones made last time.
        made, self._made = self._made, {}
        rows = []
        for p in processes:
            kept = made.get(p.pid)
            row = kept if kept is not None and kept[2] is p else _row(p)
            self._made[p.pid] = row
            rows.append(row)
        running = sum(1 for p in snapshot.processes if p.state == "R")
        subtitle = f"{len(snapshot.processes)} tasks, {running} running"
        return rows, "no such process (it may have exited)", subtitle

    def drill_row(self, row: ProcessRow) -> Drill:
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
            # The command line as htop shows it; kernel threads have none: [name].
            Cell(p.cmdline or f"[{p.comm}]", p.comm.lower()),
        ),
        p,
    )


def _busy(percent: float) -> str:
    return "bold red" if percent >= 50 else ("green" if percent >= 5 else "")
