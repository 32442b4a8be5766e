"""The drill-down of a compared row (a baseline is set, key b): the stacks behind it in both
windows, stack by stack, a second of each window, biggest change first; a stack of one window
alone is marked new or gone. One screen for every pane: its Comparison (ktop.registry) says
which stacks are behind a row and in what figure."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from ktop.compare import (
    Baseline,
    Change,
    StackChange,
    compare_stacks,
    figure_of,
    format_figure,
    window_label,
)
from ktop.model import Snapshot
from ktop.registry import PaneDef
from ktop.text import printable
from ktop.ui.screens.drill import DetailScreen, DrillHost, frame_line
from ktop.ui.widgets.fit import MUST, Item, item

STACKS_SHOWN = 40


class CompareStacksScreen(DetailScreen):
    """A row's stacks now against the baseline's."""

    TITLE = "Compared with the baseline: stack by stack"

    def __init__(self, spec: PaneDef, change: Change, baseline: Baseline, by_command: bool,
                 snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        assert spec.compare is not None
        self.spec = spec
        self.comparison = spec.compare
        self.change = change
        self.baseline = baseline
        self.by_command = by_command  # the row is a command's processes together
        self.stacks = self._stacks(snapshot)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Stacks are compared by function names: there are no offsets to split.
        if action == "toggle_offsets":
            return False
        return super().check_action(action, parameters)  # the timeline keys: a replay's only

    def _stacks(self, snapshot: Snapshot) -> list[StackChange]:
        return compare_stacks(self.comparison, snapshot, self.baseline.snapshot, self.change.key,
                              self.by_command)

    def still_present(self, snapshot: Snapshot) -> bool:
        """Always: a row gone from the newest window is what the comparison says (gone)."""
        now = figure_of(self.comparison, snapshot, self.change.key, self.by_command)
        self.change = Change(self.change.key, self.change.name, now, self.change.base,
                             self.change.row)
        self.stacks = self._stacks(snapshot)
        return True

    def shown(self) -> object:
        return self.stacks, self.change.now, self.header().plain

    def _figure(self, value: float | None, signed: bool = False) -> str:
        return format_figure(value, self.comparison.unit, signed) if value is not None else "-"

    def header_items(self) -> list[Item]:
        c, unit = self.change, self.comparison.unit
        title = Text(f"{self.spec.key_label}: ", style="bold")
        title.append(printable(c.name), style="bold cyan")
        now = "gone" if c.now is None else format_figure(c.now, unit)
        base = "new" if c.base is None else format_figure(c.base, unit)
        return [Item(title, MUST),
                item(f"{self.comparison.label} now {now}", 80, short=f"now {now}", gap="   "),
                item(f"baseline {base}", 70, gap=", "),
                item(f"change {format_figure(c.change, unit, signed=True)}", 90, gap=", "),
                item(f"now {window_label(self.snapshot)} vs baseline {self.baseline.label}", 20,
                     "dim", gap="   ")]

    def draw(self) -> None:
        self.header_widget().update(self.header())
        unit = self.comparison.unit
        lines: list[Text] = [Text(f"stacks behind the row, {self.comparison.label} a second of "
                                  "each window, biggest change first", style="bold")]
        for s in self.stacks[:STACKS_SHOWN]:
            head = Text(f"  {format_figure(s.change, unit, signed=True)}", style="bold")
            if s.status:
                head.append(f"  {s.status}", style="bold reverse")
            head.append(f"   now {self._figure(s.now)}, baseline {self._figure(s.base)}",
                        style="dim")
            lines.append(head)
            # Innermost first, as every drill-down lists a stack's frames.
            lines.extend(frame_line(frame) for frame in reversed(s.frames))
        if len(self.stacks) > STACKS_SHOWN:
            lines.append(Text(f"... {len(self.stacks) - STACKS_SHOWN} more stacks", style="dim"))
        if not self.stacks:
            lines.append(Text("no stacks kept for this row in either window", style="dim"))
        self.query_one("#stack-list-text", Static).update(Group(*lines))
