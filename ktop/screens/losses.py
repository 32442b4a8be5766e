"""`L`: each loss the header folds into one total, with the pane it hurts and why it happens."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class LossesScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,L,backspace", "dismiss", "close")]

    def __init__(self, losses: list[tuple[str, str, int, str]], window: str) -> None:
        """losses: (pane, loss name, count, why), as header.loss_lines gives them."""
        super().__init__()
        self._losses = losses
        self._window = window

    def compose(self) -> ComposeResult:
        # Two columns: the count, then the name and pane over the reason (readable at 80).
        table = Table(box=None, padding=(0, 1), show_header=False, expand=True)
        table.add_column(justify="right", style="bold yellow", no_wrap=True)
        table.add_column(ratio=1)
        for pane, name, count, why in self._losses:
            what = Text(name, style="bold")
            what.append(f"  in {pane}\n", style="dim")
            what.append(why)
            table.add_row(Text(str(count)), what)
        with VerticalScroll(id="losses-box") as box:
            box.border_title = f"lost in the last {self._window} (Esc closes)"
            yield Static(table if self._losses else Text("nothing lost: every event was counted"))

    def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
