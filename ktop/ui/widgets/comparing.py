"""A pane compared with a baseline window (key b): one table for every pane, made from its
Comparison (ktop.registry) by ktop.compare's one diff. Each row: its figure a second now, in the
baseline, the change, the name; `new` and `gone` rows marked; biggest change first."""

from __future__ import annotations

from collections.abc import Sequence

from ktop.compare import GONE, NEW, Change, changed_count, compare_rows, format_figure, holds
from ktop.model import Snapshot
from ktop.registry import PaneDef
from ktop.ui.widgets.pane import Display, PaneRow, View
from ktop.ui.widgets.table import Cell, Column, num
from ktop.units import format_span

COMPARE_VIEW = "compare"


def compare_view(spec: PaneDef) -> View:
    assert spec.compare is not None
    return View(COMPARE_VIEW, (
        Column("now", spec.compare.label, 9, right=True, priority=9),
        Column("base", "baseline", 9, right=True, priority=8),
        Column("change", "change", 9, right=True, priority=9),
        Column("name", "name", None, descending=False, priority=9, min_width=20),
    ), "change")


def row_key(change: Change) -> str:
    return "|".join(map(str, change.key))


def _cells(change: Change, unit: str) -> tuple[Cell, ...]:
    rise = change.change > 0
    return (
        num(GONE if change.now is None else format_figure(change.now, unit, suffix=False),
            change.now or 0.0, "dim" if change.now is None else ""),
        num(NEW if change.base is None else format_figure(change.base, unit, suffix=False),
            change.base or 0.0, "bold" if change.base is None else ""),
        num(format_figure(change.change, unit, signed=True, suffix=False),
            (abs(change.change), max(change.now or 0.0, change.base or 0.0)),
            ("red" if rise else "green") if change.change else ""),
        Cell(change.name, style="dim" if change.now is None else ""),
    )


def compared(spec: PaneDef, snapshot: Snapshot, display: Display,
             by_command: bool = False) -> tuple[list[Change], Sequence[PaneRow], str, str]:
    """(the changes, their rows, what to say when there are none, the border subtitle)."""
    assert spec.compare is not None and display.baseline is not None
    baseline = display.baseline.snapshot
    if not holds(spec, baseline):
        return [], [], (f"the baseline holds no {spec.key_label.lower()} data (written by a ktop "
                        "without this pane, or before it attached)"), "B: leave"
    changes = compare_rows(spec.compare, snapshot, baseline,
                           display.shows if display.filtered else None, by_command)
    unit = spec.compare.unit
    rows = [(row_key(c), _cells(c, unit), c.row) for c in changes]
    counted = changed_count(changes)
    keyed = ""
    if spec.compare.command_key is not None:
        keyed = "by command (m)  " if by_command else "by process (m)  "
    # Short enough for a pane 80 columns wide: the header names the baseline in full.
    subtitle = (f"{keyed}{format_span(snapshot.duration_s)} vs "
                f"{format_span(baseline.duration_s)} baseline"
                + (f"  {counted}" if counted else "") + "  B: leave")
    return changes, rows, "nothing in either window", subtitle
