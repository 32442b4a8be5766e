"""The endings pane's drill-down: an ending (or a row of signals) and the signal behind it,
its sender's kernel and user stacks. Takes its data as arguments."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from ktop.model import Snapshot
from ktop.panes.endings.model import Ending, SignalCount, SignalSent
from ktop.panes.endings.widget import clock, killed_by, span
from ktop.text import format_pid, printable
from ktop.ui.screens.drill import DetailScreen, DrillHost, frame_line, heading
from ktop.ui.widgets.fit import MUST, Item, item

RECENT_SIGNALS = 20


def signal_lines(s: SignalSent) -> list[Text]:
    """One signal and its sender's stacks, as lines."""
    head = Text(f"{clock(s.time)}  ", style="bold")
    head.append(f"{s.signal}", style="bold red")
    head.append(printable(f" ({s.code}, {s.result}) from {s.sender_comm} "
                          f"{s.sender_pid}/{s.sender_tid} to {s.target_comm} "
                          f"{s.target_pid}/{s.target_tid}"))
    if s.oom:
        head.append("  OOM killer", style="bold")
    lines = [head, Text("  sender's kernel stack", style="dim")]
    lines.extend(frame_line(f) for f in s.kernel)
    if not s.kernel:
        lines.append(Text("    (none)", style="dim"))
    lines.append(Text("  sender's user stack", style="dim"))
    lines.extend(frame_line(f) for f in s.user)
    if not s.user:
        lines.append(Text("    (none: a kernel thread, or not walked)", style="dim"))
    return lines


class SignalScreen(DetailScreen):
    """Who ended a process, or who sent a kind of signal: the sender's stacks."""

    TITLE = "Endings: the signal and its sender's stacks"

    def __init__(self, row: Ending | SignalCount, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.row = row

    def still_present(self, snapshot: Snapshot) -> bool:
        return True  # an ending stays what it was: the screen keeps the one drilled into

    def _signals(self) -> list[SignalSent]:
        row = self.row
        if isinstance(row, Ending):
            return [row.killer] if row.killer is not None else []
        sent = self.snapshot.endings.signals if self.snapshot.endings else ()
        return [s for s in sent if (s.sig, s.result, s.sender_pid, s.target_pid)
                == (row.sig, row.result, row.sender_pid, row.target_pid)][:RECENT_SIGNALS]

    def shown(self) -> object:
        return self.row, tuple(self._signals())

    def header_items(self) -> list[Item]:
        row = self.row
        if isinstance(row, Ending):
            title = Text(f"{format_pid(row.pid)} ", style="bold")
            title.append(printable(row.comm), style="bold cyan")
            items = [Item(title, MUST), item(printable(f"ended: {row.how}"), 95, gap=" ")]
            if row.signal:
                items.append(item(printable(f"killed by {killed_by(row)}"), 90, gap=", "))
            return [*items, item(f"lived {span(row.lifetime_s)}", 60, gap=", "),
                    item(f"CPU {span(row.cpu_s)}", 50, gap=", ")]
        title = Text(f"{row.signal} ", style="bold")
        title.append(printable(f"{row.sender_comm} {row.sender_pid} -> "
                               f"{row.target_comm} {row.target_pid}"), style="bold cyan")
        return [Item(title, MUST), item(f"{row.count} {row.result}", 80, gap=" ")]

    def draw(self) -> None:
        self.header_widget().update(self.header())
        parts: list[Text] = []
        row = self.row
        if isinstance(row, Ending):
            parts.append(heading("the signal that ended it" if row.signal else "how it ended"))
            if not row.signal:
                parts.append(Text(printable(f"  {row.how}: it exited by itself (exit(2) or "
                                            "returning from main)"), style="dim"))
        else:
            parts.append(heading("the latest of these signals with a record"))
        signals = self._signals()
        for s in signals:
            parts.extend(signal_lines(s))
            parts.append(Text(""))
        if not signals and (not isinstance(row, Ending) or row.signal):
            parts.append(Text("  no record of its sender: sent before ktop started, or its "
                              "record dropped (see L)", style="dim"))
        self.query_one("#stack-list-text", Static).update(Group(*parts))
