"""A DataTable whose rows are keyed by a stable id and updated in place.

Re-adding every row each second re-renders everything and loses the cursor; here only
changed cells are written, stale rows removed, and the cursor follows its row's key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.widgets import DataTable

from ktop.text import printable


@dataclass(frozen=True)
class Cell:
    """What a table cell shows (always plain text: untrusted names are never markup) and
    the value it sorts by."""

    text: str
    value: Any = None
    right: bool = False
    style: str = ""

    def __rich__(self) -> Text:
        return Text(
            printable(self.text),
            style=self.style,
            justify="right" if self.right else "left",
            no_wrap=True,
            overflow="ellipsis",
        )

    @property
    def sort_value(self) -> Any:
        return self.text.lower() if self.value is None else self.value


def num(text: str, value: float, style: str = "") -> Cell:
    return Cell(text, value, right=True, style=style)


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None = None
    right: bool = False
    descending: bool = True  # the natural order for this column when chosen for sorting


Row = tuple[str, Sequence[Cell]]


class KeyedTable(DataTable):
    """Rows keyed by stable ids; `<` and `>` pick the sort column."""

    def __init__(self, columns: Sequence[Column], sort_column: str, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.table_columns = list(columns)
        self.sort_column = sort_column
        self.sort_descending = self._column(sort_column).descending
        self.filter_text = ""
        self._rows: dict[str, Sequence[Cell]] = {}
        self._all_rows: list[Row] = []
        self._order: dict[str, int] = {}

    def on_mount(self) -> None:
        for column in self.table_columns:
            label = Text(column.label, justify="right" if column.right else "left")
            self.add_column(label, key=column.key, width=column.width)
        self._mark_sort_column()

    def _column(self, key: str) -> Column:
        return next(c for c in self.table_columns if c.key == key)

    def _mark_sort_column(self) -> None:
        for column in self.table_columns:
            label = column.label + ("▼" if self.sort_descending else "▲") * (
                column.key == self.sort_column
            )
            self.columns[column.key].label = Text(
                label, justify="right" if column.right else "left"
            )
        self.refresh()

    def cycle_sort(self, step: int) -> str:
        keys = [c.key for c in self.table_columns]
        self.sort_column = keys[(keys.index(self.sort_column) + step) % len(keys)]
        self.sort_descending = self._column(self.sort_column).descending
        self._mark_sort_column()
        self.show_rows(self._all_rows)
        return self._column(self.sort_column).label

    def set_filter(self, text: str) -> None:
        self.filter_text = text.lower()
        self.show_rows(self._all_rows)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def show_rows(self, rows: Sequence[Row]) -> None:
        self._all_rows = list(rows)
        if self.filter_text:
            rows = [r for r in rows if any(self.filter_text in c.text.lower() for c in r[1])]
        # The cursor follows its row when the user has moved it, like htop; at the top it
        # stays at the top, so the busiest row stays in view.
        selected = self.selected_key if self.cursor_row > 0 else None
        index = next(i for i, c in enumerate(self.table_columns) if c.key == self.sort_column)
        rows = sorted(rows, key=lambda r: r[1][index].sort_value, reverse=self.sort_descending)
        wanted = {key for key, _ in rows}
        for key in [k for k in self._rows if k not in wanted]:
            self.remove_row(key)
            del self._rows[key]
        for key, cells in rows:
            old = self._rows.get(key)
            if old is None:
                self.add_row(*cells, key=key)
            elif old != cells:
                for column, before, after in zip(self.table_columns, old, cells):
                    if before != after:
                        self.update_cell(key, column.key, after)
            self._rows[key] = cells
        order = {key: i for i, (key, _) in enumerate(rows)}
        if order != self._order:  # re-ordering invalidates every cached row render
            self._reorder(order)
            self._order = order
        if selected in order:
            self.move_cursor(row=order[selected], animate=False, scroll=False)

    def _reorder(self, order: dict[str, int]) -> None:
        """Put rows in the given order without re-adding them (what DataTable.sort does,
        but by our precomputed order: the row key decides, not the cell values)."""
        self._row_locations = TwoWayDict({row_key: order[row_key.value] for row_key in self.rows})
        self._update_count += 1
        self.refresh()
