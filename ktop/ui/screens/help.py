"""`?` / F1: every key of the screen the user came from, read from its bindings."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark,f1,backspace", "dismiss", "close help"),
    ]

    def __init__(self, title: str, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self._title = title
        self._keys = keys

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for keys, description in self._keys:
            table.add_row(Text(keys), Text(description))
        with VerticalScroll(id="help-box") as box:
            box.border_title = f"{self._title}: keys (Esc closes)"
            yield Static(table)

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
