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
from textual.widgets import SelectionList, Static

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
        *(Binding(key, f"layout('{name}')", f"the {name} layout") for key, name in LAYOUT_KEYS),
    ]

    def __init__(self, shown: Sequence[str]) -> None:
        super().__init__()
        self.order = [name for name in shown]  # ticked, in the order they will show

    def compose(self) -> ComposeResult:
        with Vertical(id="panes-box"):
            yield SelectionList[str](*(
                (Text(f"{spec.title}  ({spec.name}"
                      + (", no BPF program" if spec.build is None else "") + ")"),
                 spec.name, spec.name in self.order) for spec in PANES), id="panes-list")
            yield Static(Text(chooser_help()), id="panes-help")

    def on_mount(self) -> None:
        box = self.query_one("#panes-box")
        box.border_title = "panes shown (a pane not shown is not loaded)"
        selections = self.query_one(SelectionList)
        selections.highlighted = 0
        selections.focus()
        self._say_order()

    def on_selection_list_selection_toggled(
            self, event: SelectionList.SelectionToggled) -> None:
        name = event.selection.value
        if name in self.order:
            self.order.remove(name)
        else:
            self.order.append(name)
        self._say_order()

    def _say_order(self) -> None:
        shown = ", ".join(f"{i} {name}" for i, name in enumerate(self.order, 1))
        self.query_one(SelectionList).border_subtitle = shown or "none ticked"

    def action_layout(self, name: str) -> None:
        self.order = list(config.layout_panes(name))
        selections = self.query_one(SelectionList)
        with selections.prevent(SelectionList.SelectionToggled):
            selections.deselect_all()
            for pane_name in self.order:
                selections.select(pane_name)
        self._say_order()

    def action_done(self) -> None:
        if not self.order:
            self.notify("tick one pane at least (Space)", severity="warning")
            return
        self.dismiss(tuple(self.order))
