"""The pane tabs of the narrow layout: one pane at a time, its number and name lit, as htop's
and btop's tabs (1-4 or Tab switch)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from ktop.ui.widgets.fit import MUST, Item, fit_items, item


class PaneTabs(Widget):
    """One line, drawn with the line API: it changes only when the user switches panes."""

    class Selected(Message):
        """A click on a tab: show that pane."""

        def __init__(self, pane: str) -> None:
            super().__init__()
            self.pane = pane

    def __init__(self, labels: Sequence[tuple[str, str, str]], *, id: str | None = None) -> None:
        """labels: (pane name, label, short label) in screen order; each label starts with its
        key. The short labels are shown when the long ones do not fit."""
        super().__init__(id=id)
        self._labels = list(labels)
        self.active = labels[0][0]

    def set_labels(self, labels: Sequence[tuple[str, str, str]]) -> None:
        """The panes chosen changed (key p): their tabs, in their new order."""
        self._labels = list(labels)
        if labels and self.active not in {name for name, _, _ in labels}:
            self.active = labels[0][0]
        self.refresh()

    def show(self, active: str) -> None:
        if active != self.active:
            self.active = active
            self.refresh()

    def tabs_text(self, short: bool | None = None) -> Text:
        """The tabs, long labels if they fit the width, then the key hint if it fits too."""
        width = self.size.width or None
        if short is None:
            long = sum(len(label) + 3 for _, label, _ in self._labels)
            short = width is not None and long > width
        items = [Item(Text(f" {short_label if short else label} ",
                           style="bold reverse" if name == self.active else ""), MUST, gap=" ")
                 for name, label, short_label in self._labels]
        items.append(item(f"Tab/1-{len(self._labels)} switch", 1, "dim", gap="  "))
        text = fit_items(items, width)
        self._spans = []  # (first cell, end, pane) of each tab, for clicks
        start = 0
        for name, label, short_label in self._labels:
            end = start + len(short_label if short else label) + 2
            self._spans.append((start, end, name))
            start = end + 1
        return text

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y:
            return Strip.blank(width, base)
        strip = Strip(list(self.tabs_text().render(self.app.console))).apply_style(base)
        return strip.crop(0, width).adjust_cell_length(width, Style(bgcolor=base.bgcolor))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        self.tabs_text()
        for start, end, name in self._spans:
            if start <= offset.x < end:
                self.post_message(self.Selected(name))
