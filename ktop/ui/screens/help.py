"""`?` / F1: what each column of the focused pane is, and every key of the screen the user
came from, read from its bindings."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    """The keys, and what each column of the focused pane's view is (as htop's F1); the box
    scrolls, and says so while there is more than it shows."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1,backspace", "dismiss", "close help"),
    ]

    def __init__(self, title: str, keys: list[tuple[str, str]],
                 columns: list[tuple[str, str, bool]] | None = None, columns_title: str = "") -> None:
        super().__init__()
        self._title = title
        self._keys = keys
        self._columns = columns or []
        self._columns_title = columns_title

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box") as box:
            what = "columns and keys" if self._columns else "keys"
            box.border_title = f"{self._title}: {what} (Esc closes)"
            if self._columns:
                yield Static(Text(self._columns_title, style="bold"), classes="help-heading")
                yield Static(self._table(
                    (label, what if shown else f"{what} (not shown at this width: z zooms)")
                    for label, what, shown in self._columns))
                yield Static(Text("keys", style="bold"), classes="help-heading")
            yield Static(self._table(self._keys))

    @staticmethod
    def _table(rows: Iterable[tuple[str, str]]) -> Table:
        table = Table(box=None, show_header=False, padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for name, description in rows:
            table.add_row(Text(name), Text(description))
        return table

    def on_mount(self) -> None:
        box = self.query_one("#help-box", VerticalScroll)
        box.focus()  # the arrows and PgUp/PgDn scroll it
        self.watch(box, "scroll_y", self._say_more, init=False)
        self.call_after_refresh(self._say_more)

    def _say_more(self, _scrolled: float | None = None) -> None:
        """The box's bottom line says how far the text goes on, while it goes on."""
        boxes = self.query("#help-box")  # none once Esc closed it: a scroll may come after
        if not boxes:
            return
        box = boxes.first(VerticalScroll)
        below = max(0, round(box.max_scroll_y - box.scroll_y))
        subtitle = f"{below} more lines: Down PgDn" if below else (
            "Up PgUp: back to the top" if box.scroll_y else "")
        if box.border_subtitle != subtitle:
            box.border_subtitle = subtitle

    def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)


def bindings_help(bindings: list[Binding]) -> list[tuple[str, str]]:
    """Group bindings by action, keys shown as the user types them."""
    rows: dict[str, list[str]] = {}
    descriptions: dict[str, str] = {}
    for binding in bindings:
        keys = [_key_label(k) for k in binding.key.split(",")]
        rows.setdefault(binding.action, []).extend(keys)
        # The footer's word is short; a tooltip, where there is one, says it whole.
        descriptions.setdefault(binding.action,
                                binding.tooltip or binding.description or binding.action)
    return [(" ".join(dict.fromkeys(keys)), descriptions[action]) for action, keys in rows.items()]


_KEY_NAMES = {
    "question_mark": "?",
    "slash": "/",
    "less_than_sign": "<",
    "greater_than_sign": ">",
    "space": "space",
    "shift+tab": "Shift-Tab",
    "tab": "Tab",
    "escape": "Esc",
    "enter": "Enter",
    "backspace": "Backspace",
    "plus": "+",
    "minus": "-",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
}


def _key_label(key: str) -> str:
    key = key.strip()
    if key.startswith("ctrl+"):
        return "Ctrl-" + key[5:].upper()
    return _KEY_NAMES.get(key, key.upper() if key.startswith("f") and key[1:].isdigit() else key)
