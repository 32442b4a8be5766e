"""The replay's timeline, under the header: where the window is in the recording, and a
sparkline of kernel CPU, lock wait and I/O latency over all of it.

Two lines, drawn for the width they get (160 or 80 columns alike): the time of the current
record, its position, the window; then the three sparklines, each column the highest value
of the records it covers, the window's columns marked and the current one reversed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from ktop.record.fileformat import FIGURES, RecordIndex
from ktop.record.replay import TimelineView
from ktop.registry import figured_panes
from ktop.ui.widgets.fit import MUST, fit_items, item
from ktop.units import format_scale, format_span

SPARKS = "▁▂▃▄▅▆▇█"
KEYS_HINT = "←/→ interval  [ ] minute  Home/End  g time  w window"


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def columns_of(count: int, width: int) -> list[range]:
    """The records each of `width` columns covers (every record in exactly one column; with
    fewer records than columns, one column each)."""
    width = max(1, min(width, count))
    return [range(count * c // width, count * (c + 1) // width) for c in range(width)]


def sparkline(values: Sequence[float], columns: Sequence[range]) -> tuple[str, float]:
    """(one character per column, the top of the scale). A column without any value
    (the pane had no data then) is a space; the scale starts at zero."""
    finite = [v for v in values if not math.isnan(v)]
    top = max(finite, default=0.0)
    chars = []
    for column in columns:
        known = [values[i] for i in column if not math.isnan(values[i])]
        if not known:
            chars.append(" ")
        elif top <= 0:
            chars.append(SPARKS[0])
        else:
            level = max(known) / top
            chars.append(SPARKS[min(len(SPARKS) - 1, int(level * (len(SPARKS) - 1) + 0.5))])
    return "".join(chars), top


def _series(records: RecordIndex, index: int, per_second: bool) -> Sequence[float]:
    figures = records.figure(index)
    if not per_second:
        return figures
    return [value / duration if duration > 0 else math.nan
            for value, duration in zip(figures, records.durations())]


def timeline_text(view: TimelineView, width: int) -> Text:
    """The two lines for a width (at least 40 columns)."""
    records = view.records
    current = records[view.position]
    first = records[view.first]
    start = records[0].taken_at - records[0].duration_s
    span = current.taken_at - (first.taken_at - first.duration_s)
    shown = view.position - view.first + 1  # fewer than asked at the recording's start
    # What does not fit the width is left out, the least useful first.
    items = [
        item("replay ", MUST, "bold reverse", gap=""),
        item(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(current.taken_at)), MUST,
             "bold", gap=" "),
        item(f"record {view.position + 1}/{len(records)}", 9),
        item(f"window {shown} record{'s' if shown > 1 else ''} ({format_span(span)})", 8, "bold",
             short=f"window {format_span(span)}"),
        *([item(view.note, 7, "yellow")] if view.note else []),
        item(f"{_clock(current.taken_at - start)} of {_clock(records[-1].taken_at - start)}", 4),
        item(KEYS_HINT, 1, "dim", gap="   "),
    ]
    text = fit_items(items, width)
    text.append("\n")

    narrow = width < 120
    series = [
        (figure.short if narrow else figure.label,
         _series(records, index, figure.per_second),
         (lambda top, unit=figure.unit: format_scale(top, unit)))
        for index, figure in enumerate(spec.figure for spec in figured_panes()[:FIGURES]
                                       if spec.figure)
    ]
    # Labels and scales first; the sparklines share what is left.
    fixed = sum(len(label) + 2 + len(scale(max([v for v in values if not math.isnan(v)],
                                                    default=0.0))) + 2
                for label, values, scale in series)
    spark_width = max(4, (width - fixed) // len(series))
    columns = columns_of(len(records), spark_width)
    window = range(view.first, view.position + 1)
    for i, (label, values, scale) in enumerate(series):
        chars, top = sparkline(values, columns)
        if i:
            text.append("  ")
        text.append(f"{label} ", style="dim")
        for column, char in zip(columns, chars):
            if view.position in column:
                style = "bold reverse"
            elif column.start <= window.stop - 1 and window.start <= column.stop - 1:
                style = "bold yellow"
            else:
                style = "cyan"
            text.append(char, style=style)
        text.append(f" {scale(top)}", style="dim")
    return text


class TimelineBar(Widget):
    """Redrawn when the position or window moves (not every second): a Rich Text render."""

    def __init__(self, view: TimelineView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = view

    def show(self, view: TimelineView) -> None:
        if view != self.view:
            self.view = view
            self.refresh()

    def render(self) -> Text:
        width = self.content_size.width or 160
        text = timeline_text(self.view, width)
        text.no_wrap = True
        text.overflow = "crop"
        return text
