"""`L`: each loss the header folds into one total, with the pane it hurts and why it happens.
It follows the newest data while open; when its list changes, the header under it is drawn
again too, so that the total there and the list here are always of the same data."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ktop.text import printable

# (pane, loss name, count, why, counts intact), as header.loss_lines gives them, the span they
# were lost in ("in the last 5s", "since start (3m)"), and the BPF run time by pane (% of one
# CPU) with how many refreshes it was measured over one of (SelfCostRow.bpf_every).
Losses = tuple[list[tuple[str, str, int, str, bool]], str,
               tuple[tuple[tuple[str, float], ...], int]]


class LossesScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,L,backspace", "dismiss", "close")]

    def __init__(self, latest: Callable[[], Losses], interval_s: float = 1.0,
                 changed: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self._latest = latest
        self._interval_s = interval_s
        self._changed = changed  # draws the header under it again
        self._shown: Losses | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="losses-box"):
            yield Static(id="losses-list")

    def on_mount(self) -> None:
        self._update()
        self.set_interval(self._interval_s, self._update)

    def _update(self) -> None:
        if not self.query("#losses-list"):  # closed (Esc) with its timer's tick on the way
            return
        rows, window, (bpf_panes, bpf_every) = self._latest()
        # Compared as shown: a run time that moved in a digit not printed is no change.
        bpf_panes = tuple((pane, round(percent, 2)) for pane, percent in bpf_panes)
        losses = rows, window, (bpf_panes, bpf_every)
        if losses == self._shown:
            return
        if self._shown is not None:
            self._changed()
        self._shown = losses
        # Two columns: the count, then the name and pane over the reason (readable at 80).
        table = Table(box=None, padding=(0, 1), show_header=False, expand=True)
        table.add_column(justify="right", style="bold yellow", no_wrap=True)
        table.add_column(ratio=1)
        for pane, name, count, why, intact in rows:
            what = Text(printable(name), style="bold")  # a replayed file names its own
            what.append(f"  in {pane}", style="dim")
            what.append("  no count lost\n" if intact else "\n", style="bold green")
            what.append(why)
            table.add_row(Text(str(count), style="dim" if intact else ""), what)
        self.query_one("#losses-box").border_title = f"lost {window} (Esc closes)"
        lost = table if rows else Text("nothing lost: every event was counted")
        if bpf_panes:
            over = ("last refresh" if bpf_every <= 1 else f"the latest of every {bpf_every} "
                    "refreshes: the kernel's run-time statistics cost each program run, and "
                    "are on only then")
            cost = Text(f"\nBPF run time by pane (% of one CPU, {over}):\n", style="bold")
            for pane, percent in bpf_panes:
                cost.append(f"  {printable(pane):12} {percent:6.2f}%\n")
            lost = Group(lost, cost)
        self.query_one("#losses-list", Static).update(lost)

    def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
