"""`p`: which panes show. Every pane of the registry with a box to tick, the named layouts
(btop's presets) a key each; closing it shows the panes ticked, in the order they were
ticked (their number keys follow it). The screen that opened it loads and unloads them and
keeps the choice (ktop.config): this screen only chooses."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ktop import config
from ktop.registry import PANES

# A key for each layout, by its first letter: (key, layout name).
LAYOUT_KEYS = tuple((name[0], name) for name in config.LAYOUTS)


def chooser_help() -> str:
    return ("Space/Enter tick or untick · "
            + " · ".join(f"{key} {name}" for key, name in LAYOUT_KEYS)
            + " · Esc/p show them")


class PanesScreen(ModalScreen[tuple[str, ...] | None]):
    SPACE_IS_ITS_OWN = True  # not the app's pause: a tick here
    BINDINGS = [
        Binding("escape,p", "done", "show the panes ticked"),
        Binding("space", "toggle", "tick or untick"),
        *(Binding(key, f"layout('{name}')", f"the {name} layout") for key, name in LAYOUT_KEYS),
    ]

    def __init__(self, shown: Sequence[str]) -> None:
        super().__init__()
        self.order = list(shown)  # ticked, in the order they will show

    def compose(self) -> ComposeResult:
        with Vertical(id="panes-box"):
            yield OptionList(*(Option(self._prompt(spec.name), id=spec.name) for spec in PANES),
                             id="panes-list")
            yield Static(Text(chooser_help()), id="panes-help")

    def _prompt(self, name: str) -> Text:
        """`[x] 2 Lock contention  (locks)`: ticked or not, and its number key once shown."""
        spec = config.ordered([name])[0]
        ticked = name in self.order
        text = Text("[x] " if ticked else "[ ] ", style="bold" if ticked else "dim")
        text.append(f"{self.order.index(name) + 1 if ticked else ' '} ", style="bold")
        text.append(spec.title, style="" if ticked else "dim")
        text.append(f"  ({spec.name}{', no BPF program' if spec.build is None else ''})",
                    style="dim")
        return text

    def on_mount(self) -> None:
        box = self.query_one("#panes-box")
        box.border_title = "panes shown (a pane not shown is not loaded)"
        options = self.query_one(OptionList)
        options.highlighted = 0
        options.focus()

    def _redraw(self) -> None:
        options = self.query_one(OptionList)
        for spec in PANES:
            options.replace_option_prompt(spec.name, self._prompt(spec.name))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self._toggle(event.option.id or "")

    def action_toggle(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None:
            self._toggle(options.get_option_at_index(options.highlighted).id or "")

    def _toggle(self, name: str) -> None:
        if name in self.order:
            self.order.remove(name)
        elif name:
            self.order.append(name)
        self._redraw()

    def action_layout(self, name: str) -> None:
        self.order = list(config.layout_panes(name))
        self._redraw()

    def action_done(self) -> None:
        if not self.order:
            self.notify("tick one pane at least (Space)", severity="warning")
            return
        self.dismiss(tuple(self.order))
