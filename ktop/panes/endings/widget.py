"""Endings: what died lately and how (newest first), and the signals sent, by (signal,
sender, target). Enter shows the signal's sender and its stacks."""

from __future__ import annotations

import time
from functools import partial

from ktop.model import Snapshot
from ktop.panes.endings.model import Ending, SignalCount
from ktop.text import format_pid
from ktop.ui.widgets.pane import WIDE, Display, Drill, Pane, PaneRow, View, window_label
from ktop.ui.widgets.table import Cell, Column, num

PANE_ENDINGS = "endings"


def clock(unix: float) -> str:
    """"03:12:07.412" in local time."""
    return time.strftime("%H:%M:%S", time.localtime(unix)) + f".{int(unix * 1000) % 1000:03d}"


def span(seconds: float) -> str:
    if seconds < 0:
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.0f}d"


def killed_by(e: Ending) -> str:
    if e.killer is not None:
        who = f"{e.killer_comm} {e.killer_pid}"
        if e.killer.oom:
            return f"OOM killer in {who}"
        return "itself (fault)" if e.killer_pid == e.pid else who
    return "" if not e.signal else "(sender not seen)"


class EndingsPane(Pane):
    PANE = PANE_ENDINGS
    COLUMN_HELP = {
        "TIME": "when it ended (local time)",
        "PID": "the process",
        "COMMAND": "its command",
        "HOW": "exit code, or the signal that ended it",
        "KILLED BY": "who sent that signal: command and pid (Enter: its stacks)",
        "LIFE": "how long it lived",
        "CPU": "its threads' time on a CPU, over its life",
        "PPID": "its parent",
        "SIGNAL": "the signal",
        "RESULT": "what the kernel did with it: delivered, ignored, already pending...",
        "SENDER": "who sent it",
        "TARGET": "who it was sent to",
        "COUNT": "how many in the window",
    }
    VIEWS = (
        View("endings", (
            Column("time", "TIME", 12, descending=True, priority=8),
            Column("pid", "PID", 7, right=True, descending=False, priority=8),
            Column("comm", "COMMAND", 15, descending=False, priority=9),
            Column("how", "HOW", 14, descending=False, priority=9),
            Column("life", "LIFE", 7, right=True, priority=6),
            Column("cpu", "CPU", 7, right=True, priority=5),
            Column("ppid", "PPID", 7, right=True, descending=False, shown_from=WIDE),
            Column("killer", "KILLED BY", None, descending=False, priority=9, min_width=14),
        ), "time"),
        View("signals", (
            Column("count", "COUNT", 6, right=True, priority=8),
            Column("signal", "SIGNAL", 10, descending=False, priority=9),
            Column("result", "RESULT", 15, descending=False, priority=6),
            Column("sender", "SENDER", 22, descending=False, priority=8),
            Column("target", "TARGET", None, descending=False, priority=8, min_width=14),
        ), "count"),
    )

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        endings = snapshot.endings
        if endings is None:
            return [], "waiting for signals and exits...", ""
        shows = display.shows if display.filtered else None
        rows: list[PaneRow] = []
        if self.view == "endings":
            for e in endings.endings:
                if shows is not None and not shows(e.pid, e.cgroup):
                    continue
                style = "bold red" if e.signal and e.signal not in ("SIGTERM", "SIGINT",
                                                                     "SIGHUP", "SIGPIPE") \
                    else ("" if e.exit_code == 0 or e.signal else "yellow")
                rows.append((f"{e.pid}|{e.time}", (
                    Cell(clock(e.time), e.time),
                    num(format_pid(e.pid), e.pid),
                    Cell(e.comm),
                    Cell(e.how, e.how, style=style),
                    num(span(e.lifetime_s), e.lifetime_s),
                    num(span(e.cpu_s), e.cpu_s),
                    num(format_pid(e.ppid), e.ppid),
                    Cell(killed_by(e)),
                ), e))
            shown = f"{endings.exits} ended"
            what = "last 1m, newest first (v)" if not snapshot.cumulative else "newest first (v)"
        else:
            for c in endings.counts:
                if shows is not None and not (shows(c.sender_pid, c.cgroup)
                                              or shows(c.target_pid, "")):
                    continue
                rows.append((f"{c.sig}|{c.result}|{c.sender_pid}|{c.target_pid}|"
                             f"{c.sender_comm}|{c.target_comm}|{c.cgroup}", (
                                 num(str(c.count), c.count),
                                 Cell(c.signal),
                                 Cell(c.result),
                                 Cell(f"{c.sender_comm} {c.sender_pid}"),
                                 Cell(f"{c.target_comm} {c.target_pid}"),
                             ), c))
            shown = f"{sum(c.count for c in endings.counts)} sent"
            what = "signals (v)"
        label = window_label(snapshot)
        subtitle = f"{what}  {shown}, {label}"
        if endings.oom_kills:
            subtitle += f"  OOM {endings.oom_kills}"
        lost = sum(endings.lost.values())
        if lost:
            subtitle += f"  lost {lost}"
        empty = "no process ended" if self.view == "endings" else "no signal sent"
        return rows, f"{empty} in the window", subtitle

    def view_description(self) -> str:
        return {"endings": "processes ended", "signals": "signals sent"}.get(self.view, self.view)

    def drill_row(self, row: Ending | SignalCount) -> Drill:
        from ktop.panes.endings.screens import SignalScreen  # noqa: PLC0415

        snapshot = self._snapshot
        if snapshot is None:
            return None
        return partial(SignalScreen, row, snapshot)
