"""One line of items that must fit the screen's width: whole items are dropped (or take their
short form), the least useful first, never cut mid-word. The header's lines, the pane tabs
and the footer's keys are made this way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from rich.text import Text

MUST = 100  # an item of this worth is never dropped (a badge: a filter, a replay, REC)


class Item(NamedTuple):
    """A piece of a line: its text, its worth (the lowest goes first), a shorter text
    for a narrow screen (tried before the item is dropped), and the gap before it."""

    text: Text
    worth: int
    short: Text | None = None
    gap: str = "  "


def fit_items(items: Sequence[Item], width: int | None) -> Text:
    """The items in order, gaps between them, as wide as `width` at most: items go, least
    worth first (the rightmost of equals), each first shortened where it can be. Items of
    MUST worth stay (in their short form, if they have one and the rest went); if they alone
    overflow, the line is cut at its end with an ellipsis."""
    texts: list[Text | None] = [item.text for item in items]
    if width is not None and width > 0:
        order = sorted(range(len(items)), key=lambda i: (items[i].worth, -i))
        for i in order:
            if _length(items, texts) <= width:
                break
            short = items[i].short
            if short is not None and texts[i] is not short:
                texts[i] = short
                if _length(items, texts) <= width:
                    break
            if items[i].worth < MUST:
                texts[i] = None
    line = Text()
    for item, text in zip(items, texts):
        if text is None:
            continue
        if line.cell_len:
            line.append(item.gap)
        line.append_text(text)
    if width is not None and width > 0 and line.cell_len > width:
        line.truncate(width, overflow="ellipsis")
    return line


def _length(items: Sequence[Item], texts: Sequence[Text | None]) -> int:
    shown = [(item, text) for item, text in zip(items, texts) if text is not None]
    return sum(text.cell_len for _, text in shown) + sum(len(item.gap) for item, _ in shown[1:])


def item(text: str, worth: int, style: str = "", short: str | None = None,
         gap: str = "  ") -> Item:
    """An item of plain text (escape what comes from outside ktop before)."""
    return Item(Text(text, style=style), worth,
                None if short is None else Text(short, style=style), gap)
