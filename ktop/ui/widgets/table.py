"""A table whose rows are keyed by a stable id, drawn with Textual's line API.

Textual's DataTable re-renders every visible cell through Rich's full pipeline whenever any
cell changes (its caches are keyed by one global update counter): measured at ~225 us a
cell, 45 ms a refresh for four panes. Here a row is one Strip, built only when its own cells,
the width or the cursor changed; everything else comes from the cache.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any, ClassVar, Literal, NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip

from ktop.text import printable


class Cell(NamedTuple):
    """What a table cell shows (always plain text: untrusted names are never markup) and
    the value it sorts by. A named tuple: panes make thousands a second at high sampling
    rates, three times faster than a frozen dataclass."""

    text: str
    value: Any = None
    right: bool = False
    style: str = ""

    def __rich__(self) -> Text:
        return Text(printable(self.text), style=self.style, justify="right" if self.right else "left",
                    no_wrap=True, overflow="ellipsis")

    @property
    def sort_value(self) -> Any:
        return self.text.lower() if self.value is None else self.value


# What a number cell sorts by: the number, or it and a tie-breaker (a pid, a bucket's low
# bound) so equal figures keep a stable order.
SortValue = float | tuple[float | str, int | float]


def num(text: str, value: SortValue, style: str = "") -> Cell:
    return Cell(text, value, right=True, style=style)


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int | None = None  # None: the last such column takes the remaining width
    right: bool = False
    descending: bool = True  # the natural order for this column when chosen for sorting
    shown_from: int = 0  # drawn only in a table at least this wide (a zoomed or wide pane)
    # When the table is too narrow for every column, the lowest priority goes first (as perf
    # and htop drop theirs); the sort column stays. A name column keeps min_width to be read.
    priority: int = 5
    min_width: int = 0


Row = tuple[str, Sequence[Cell]]

_PAD = 1  # blank cells each side of a column, as DataTable draws them


def _drawn(row: Row) -> tuple:
    """What a row looks like: a value that moved without changing the text (0.051% and
    0.054% both read 0.05%) needs no repaint."""
    return row[0], tuple((c.text, c.right, c.style) for c in row[1])
_MIN_FLEX = 8


def _scrollbar_picture(bar: ScrollBar, virtual_height: int) -> list[tuple[str, Any]]:
    """What each line of the scrollbar shows for this many lines to scroll, as Textual's own
    renderer draws it."""
    window = bar.window_size if bar.window_size < virtual_height else 0
    drawn = bar.renderer.render_bar(size=bar.size.height, virtual_size=virtual_height,
                                    window_size=window, position=bar.position,
                                    thickness=bar.thickness, vertical=bar.vertical)
    return [(segment.text, segment.style) for segment in drawn.segments]


def _tell_scrollbar(bar: ScrollBar, virtual_height: int) -> None:
    """The scrollbar learns the new row count but repaints only the lines where its thumb
    changed: a hot list that grows by a row a second repainted all 20 lines each refresh."""
    before = _scrollbar_picture(bar, bar.window_virtual_size)
    after = _scrollbar_picture(bar, virtual_height)
    bar.set_reactive(ScrollBar.window_virtual_size, virtual_height)
    if len(before) != len(after):
        bar.refresh()
        return
    changed = [y for y, (was, now) in enumerate(zip(before, after)) if was != now]
    if changed:
        bar.refresh(*(Region(0, y, bar.size.width, 1) for y in changed))


class _LineCachedScrollBar(ScrollBar):
    """A vertical scrollbar that draws each distinct line once. Textual renders the whole
    bar through Rich for any line it repaints (a 1-line repaint of a 20-line bar: ~450 us,
    each refresh whose row count moves the thumb). A line's look depends only on its
    segment of the bar (track above or below the thumb, the thumb, or a thumb end), the
    bar's colours and its size: such a line, drawn by Textual once, is kept."""

    _KEPT = 64  # distinct lines: a few per thumb position and state

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lines: dict[tuple, Strip] = {}

    def render_lines(self, crop: Region) -> list[Strip]:
        renderable = self.render()
        if not self.vertical or not isinstance(renderable, ScrollBarRender):
            return super().render_lines(crop)
        picture = _scrollbar_picture(self, self.window_virtual_size)
        look = (renderable.style, self.size, crop.x, crop.width, self.styles._cache_key,
                tuple(map(id, self.app.get_line_filters())))
        lines = []
        for y in crop.line_range:
            key = (picture[y] if y < len(picture) else None, look)
            line = self._lines.get(key)
            if line is None:
                if len(self._lines) >= self._KEPT:
                    self._lines.clear()
                line = self._lines[key] = super().render_lines(
                    Region(crop.x, y, crop.width, 1))[0]
            lines.append(line)
        return lines


class KeyedTable(ScrollView, can_focus=True):
    """Rows keyed by stable ids; `<` and `>` (app keys) pick the sort column."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First row", show=False),
        Binding("end", "cursor_to(-1)", "Last row", show=False),
        Binding("enter", "select", "Drill down", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "keyed-table--header", "keyed-table--cursor", "keyed-table--message",
    }
    DEFAULT_CSS = """
    KeyedTable {
        background: $surface;
        color: $foreground;
        /* Columns are cut to the width, never scrolled: without this, the vertical
           scrollbar's column made the rows one cell too wide and a horizontal scrollbar
           took a line of rows. */
        overflow-x: hidden;
        & > .keyed-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .keyed-table--message { color: $warning; }
        & > .keyed-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
        }
        &:focus > .keyed-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: bold;
        }
    }
    """

    class RowSelected(Message):
        """Enter, or a click on the row under the cursor: drill into it."""

        def __init__(self, table: KeyedTable, row_key: str) -> None:
            super().__init__()
            self.table = table
            self.row_key = row_key

        @property
        def control(self) -> KeyedTable:
            return self.table

    def __init__(self, columns: Sequence[Column], sort_column: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table_columns = list(columns)
        self.sort_column = sort_column
        self.sort_descending = self._column(sort_column).descending
        self.filter_text = ""
        self.cursor_row = 0
        self._all_rows: list[Row] = []
        self._rows: list[Row] = []  # shown: filtered and sorted
        self._row_cache: dict[str, tuple[tuple, Strip]] = {}
        self._header_cache: tuple[tuple, Strip] | None = None
        # Rich styles of the table's parts, kept until its CSS changes: Textual computes
        # rich_style by walking the ancestors on every call, and drops its own cache of
        # component styles on every refresh.
        self._style_cache: dict[str, Style] = {}
        self._widths_cache: dict[tuple[int, str], list[int | None]] = {}
        # render_lines: (the styles' cache key when found, the background its line filters
        # get or False to draw through Textual's styles cache); -1: not known.
        self._plain: tuple[int, Color | Literal[False]] = (-1, False)
        # Said in place of rows when there are none (why the pane is empty or unavailable):
        # drawn by the table, so it coming and going costs no layout pass of the screen.
        self.message = ""

    # ---- what tests and the app read --------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def selected_key(self) -> str | None:
        if not self._rows:
            return None
        return self._rows[min(self.cursor_row, len(self._rows) - 1)][0]

    def get_row_at(self, index: int) -> Sequence[Cell]:
        return self._rows[index][1]

    def _column(self, key: str) -> Column:
        return next(c for c in self.table_columns if c.key == key)

    # ---- data -------------------------------------------------------------------------------

    def show_rows(self, rows: Sequence[Row]) -> None:
        self._all_rows = list(rows)
        if self.filter_text:
            rows = [r for r in rows if any(self.filter_text in c.text.lower() for c in r[1])]
        # The cursor follows its row when the user has moved it, like htop; at the top it
        # stays at the top, so the busiest row stays in view.
        selected = self.selected_key if self.cursor_row > 0 else None
        index = [c.key for c in self.table_columns].index(self.sort_column)
        ordered = sorted(rows, key=lambda r: r[1][index].sort_value, reverse=self.sort_descending)
        ordered = self._keep_order_of_equals(ordered, index)
        if ordered == self._rows:
            return  # nothing to redraw: an idle pane costs nothing
        before, cursor_before = self._rows, self.cursor_row
        self._rows = ordered
        shown = {key for key, _ in self._rows}
        for key in [k for k in self._row_cache if k not in shown]:
            del self._row_cache[key]
        if selected is not None:
            self.cursor_row = next((i for i, (k, _) in enumerate(self._rows) if k == selected), 0)
        self.cursor_row = max(0, min(self.cursor_row, len(self._rows) - 1))
        if self.cursor_row != cursor_before:
            self._size_to_rows(self.size)
            self.refresh()
            return
        # Repaint only the visible lines whose row changed (a row gone or new counts as
        # changed); row i is virtual line i + 1, on screen line i + 1 - top. A full repaint
        # re-renders every line. A run of changed lines is one region (each refresh call costs
        # Textual's geometry, and a row that moved shifts every row below it). The region
        # stops short of the scrollbar, which Textual's refresh_lines would redraw too.
        top = self.scroll_offset.y
        end = min(max(len(before), len(ordered)), top + self.size.height)
        changed = [i for i in range(top, end) if i >= len(before) or i >= len(ordered)
                   or _drawn(before[i]) != _drawn(ordered[i])]
        width = self.scrollable_content_region.width
        for _, run in groupby(enumerate(changed), key=lambda pair: pair[1] - pair[0]):
            lines = [i for _, i in run]
            self.refresh(Region(0, lines[0] + 1 - top, width, len(lines)))
        if len(before) != len(ordered):
            self._size_to_rows(self.size)

    def _keep_order_of_equals(self, ordered: list[Row], index: int) -> list[Row]:
        """Rows that show the same figure in the sort column keep the order they had on
        screen: 0.1% and 0.1% swapping places every second is noise to the reader, and each
        swap repaints two lines (at idle, most of a refresh's repainted lines)."""
        before = {key: i for i, (key, _) in enumerate(self._rows)}
        if not before:
            return ordered
        new = len(before)  # rows new on screen go after the ones already there
        kept: list[Row] = []
        for _, run in groupby(ordered, key=lambda r: r[1][index].text):
            run = list(run)
            if len(run) > 1:
                run.sort(key=lambda r: before.get(r[0], new))
            kept += run
        return kept

    def set_message(self, text: str) -> None:
        if text != self.message:
            self.message = text
            if not self._rows:
                self.refresh()

    def _message_lines(self, width: int) -> list[str]:
        room = max(1, width - 2 * _PAD)
        return [line for paragraph in self.message.splitlines()
                for line in textwrap.wrap(printable(paragraph), room) or [""]]

    def cycle_sort(self, step: int) -> str:
        keys = [c.key for c in self.table_columns]
        shown = [c.key for c in self.table_columns if self._is_shown(c)]
        index = keys.index(self.sort_column)
        for _ in keys:  # the next column on screen: one too narrow to show is skipped
            index = (index + step) % len(keys)
            if keys[index] in shown or not shown:
                break
        self.sort_column = keys[index]
        self.sort_descending = self._column(self.sort_column).descending
        self._header_cache = None
        self.show_rows(self._all_rows)
        # The arrow moves in the same frame as the rows; the sort column may widen for it.
        self.refresh()
        return self._column(self.sort_column).label

    def set_filter(self, text: str) -> None:
        """Only rows with a cell holding `text`; the first match on the top line."""
        self.filter_text = text.lower()
        self.cursor_row = 0
        self.scroll_to(y=0, animate=False, immediate=True)
        self.show_rows(self._all_rows)

    # ---- geometry ---------------------------------------------------------------------------

    def shows(self, column: Column) -> bool:
        """Whether the table has room for this column at its width now."""
        return self._is_shown(column)

    def _is_shown(self, column: Column) -> bool:
        return self._widths(self.size.width)[self.table_columns.index(column)] is not None

    def _widths(self, total: int) -> list[int | None]:
        """Each column's width; None for a column the table has no room for: too narrow for
        its shown_from, or dropped (lowest priority first) so the rest fit and each flexible
        column keeps its min_width. Kept per width and sort column: every line asks."""
        key = (total, self.sort_column)
        cached = self._widths_cache.get(key)
        if cached is not None:
            return cached
        columns = self.table_columns
        shown = [c.shown_from <= total for c in columns]
        while True:
            widths = self._fit(total, shown)
            if widths is not None:
                break
            droppable = [i for i, c in enumerate(columns)
                         if shown[i] and c.key != self.sort_column and sum(shown) > 1]
            if not droppable:  # nothing left to drop: squeeze what is there
                widths = self._fit(total, shown, squeeze=True)
                break
            # The lowest priority, the rightmost of equals.
            shown[min(droppable, key=lambda i: (columns[i].priority, -i))] = False
        self._widths_cache[key] = widths
        return widths

    def _fit(self, total: int, shown: list[bool], squeeze: bool = False) -> list[int | None] | None:
        """The widths of the shown columns in `total` cells; None if they do not fit."""
        columns = self.table_columns
        fixed = [self._fixed_width(c) for c in columns]
        used = sum(w + 2 * _PAD for w, on in zip(fixed, shown) if on and w is not None)
        flexible = [i for i, (c, on) in enumerate(zip(columns, shown)) if on and c.width is None]
        share = (total - used) // len(flexible) - 2 * _PAD if flexible else 0
        fits = used <= total and all(share >= (columns[i].min_width or 1) for i in flexible)
        if not fits and not squeeze:
            return None
        widths: list[int | None] = [w if on else None for w, on in zip(fixed, shown)]
        for i in flexible:
            widths[i] = max(_MIN_FLEX, share)
        return widths

    def _fixed_width(self, column: Column) -> int | None:
        """A column's width; the sort column's is wide enough for its name and the arrow
        beside it (`contended▼`, `S▼`), never the name cut for the arrow."""
        if column.width is None or column.key != self.sort_column:
            return column.width
        return max(column.width, cell_len(column.label) + 1)

    def on_resize(self, event: events.Resize) -> None:
        self._size_to_rows(event.size)

    def _size_to_rows(self, size: Size) -> None:
        """The scrollable height: the rows and the header line, but never less than the table
        itself. While the rows fit it stays put, so a row count changing every second costs
        a repaint of this table, not a layout pass of the whole screen.

        A table that has needed its scrollbar keeps it (one blank line to scroll) while the
        window is the same: a row count going to and fro across the table's height showed and
        hid it, and each time asked for a layout pass of the whole screen (a hot list around
        20 rows at idle: 8 passes in 34 refreshes)."""
        before = self.virtual_size
        height = max(len(self._rows) + 1, size.height)
        if before.width == size.width and before.height > size.height:
            height = max(height, size.height + 1)
        virtual = Size(size.width, height)
        if virtual == before:
            return
        if before.width == virtual.width and min(before.height, virtual.height) > size.height:
            # Still more rows than lines: the scrollbar stays, so tell it alone. Setting
            # virtual_size asks for a layout pass of the whole screen (processes come and go
            # every second or two).
            self.set_reactive(KeyedTable.virtual_size, virtual)
            _tell_scrollbar(self.vertical_scrollbar, virtual.height)
            self.scroll_y = min(self.scroll_y, self.max_scroll_y)
            return
        self.virtual_size = virtual

    # ---- drawing ----------------------------------------------------------------------------

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        """Textual's, made as Textual makes it, but drawing each distinct line once."""
        if self._vertical_scrollbar is None:
            bar = _LineCachedScrollBar(vertical=True, name="vertical",
                                       thickness=self.scrollbar_size_vertical)
            bar.display = False
            self._vertical_scrollbar = bar
            self.app._start_widget(self, bar)
        return self._vertical_scrollbar

    def _style(self, part: str) -> Style:
        """The rich style of "base" (the table itself) or of a component class."""
        style = self._style_cache.get(part)
        if style is None:
            style = self.rich_style if part == "base" else self.get_component_rich_style(part)
            self._style_cache[part] = style
        return style

    def notify_style_update(self) -> None:
        """CSS changed (theme, focus): styles are computed again, lines drawn again."""
        super().notify_style_update()
        self._style_cache.clear()
        self._row_cache.clear()
        self._header_cache = None
        self._plain = (-1, False)  # the background may be another colour now

    def render_lines(self, crop: Region) -> list[Strip]:
        """The lines as Textual's styles cache would draw them, without it when the table has
        nothing for it to add (no border, outline, padding, tint, opacity or hatch, as
        ktop's CSS has it). It re-reads those styles for every line and builds a new strip
        each time, whose line filter then runs again: 50 -> 11 us a repainted line (idle: ~20
        lines a second). A style that needs it goes back to Textual's path."""
        styles_now = self.styles._cache_key  # (changes with any of its styles)
        if self._plain[0] != styles_now:
            self._plain = (styles_now, self._background_if_plain())
        background = self._plain[1]
        if background is False:
            return super().render_lines(crop)
        width = self.size.width
        base = self._style("base")
        filters = self.app.get_line_filters()
        strips = []
        for y in crop.line_range:
            strip = self._render_line(y, width).adjust_cell_length(width, base)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _background_if_plain(self) -> Color | Literal[False]:
        """The background line filters are given, if the styles cache has nothing to add."""
        styles = self.styles
        plain = (  # (links: its cells are plain text, none has a link to style)
            not self.BLANK
            and not any(edge for edge, _ in styles.border)
            and not any(edge for edge, _ in styles.outline)
            and not any(styles.padding)
            and not styles.tint.a and self.opacity == 1.0 and styles.text_opacity == 1.0
            and not (styles.has_rule("hatch") and styles.hatch != "none")
        )
        return self.background_colors[1] if plain else False

    def _line(self, cells: Sequence[tuple[str, bool, str]], width: int, base: Style) -> Strip:
        """One table line: each cell cut (with an ellipsis) or padded to its column, its
        style over the base. Built from segments directly: a Rich Text per row cost 3x more.
        Neighbours of one style are one segment: Textual writes each segment with its own
        colour codes, and a line of plain cells was 15 segments (at 99 Hz, 1,400 escape
        sequences for 3,500 characters a refresh)."""
        pad = Segment(" " * _PAD, base)
        segments = []
        for (content, right, style), column_width in zip(cells, self._widths(width)):
            if column_width is None:
                continue
            if cell_len(content) > column_width:
                content = set_cell_size(content, max(0, column_width - 1)) + "…" if column_width else ""
            content = set_cell_size(content, column_width) if not right else (
                " " * (column_width - cell_len(content)) + content)
            segments += (pad, Segment(content, base + Style.parse(style) if style else base), pad)
        return Strip(Segment.simplify(segments)).crop(0, width).adjust_cell_length(width, base)

    def render_line(self, y: int) -> Strip:
        return self._render_line(y, self.size.width)

    def _render_line(self, y: int, width: int) -> Strip:
        """Line y of the table `width` cells wide (size is a walk up to the screen: asked
        once per repaint, not per line)."""
        if y == 0:
            key = (width, self.sort_column, self.sort_descending, self.has_focus)
            if self._header_cache is None or self._header_cache[0] != key:
                arrow = "▼" if self.sort_descending else "▲"
                labels = [
                    (c.label + (arrow if c.key == self.sort_column else ""), c.right, "")
                    for c in self.table_columns
                ]
                style = self._style("keyed-table--header")
                self._header_cache = (key, self._line(labels, width, style))
            return self._header_cache[1]
        index = self.scroll_offset.y + y - 1
        if not self._rows and self.message:
            lines = self._message_lines(width)
            if index < len(lines):
                style = self._style("base") + self._style("keyed-table--message")
                strip = Strip([Segment(" " * _PAD + lines[index], style)])
                return strip.crop(0, width).adjust_cell_length(width, self._style("base"))
        if index >= len(self._rows):
            return Strip.blank(width, self._style("base"))
        key, cells = self._rows[index]
        cursor = index == self.cursor_row
        cache_key = (_drawn((key, cells)), width, self.sort_column, cursor, cursor and self.has_focus)
        cached = self._row_cache.get(key)
        if cached is None or cached[0] != cache_key:
            base = self._style("keyed-table--cursor" if cursor else "base")
            content = [(printable(c.text), c.right, "" if cursor else c.style) for c in cells]
            cached = self._row_cache[key] = (cache_key, self._line(content, width, base))
        return cached[1]

    def on_focus(self) -> None:
        self._style_cache.clear()  # the cursor's style follows focus
        self.refresh()

    def on_blur(self) -> None:
        self._style_cache.clear()
        self.refresh()

    # ---- moving -----------------------------------------------------------------------------

    def move_cursor(self, row: int) -> None:
        if not self._rows:
            return
        self.cursor_row = max(0, min(row, len(self._rows) - 1))
        visible = max(1, self.size.height - 1)
        top = self.scroll_offset.y
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)
        self.refresh()

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step * max(1, self.size.height - 2))

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else len(self._rows) - 1)

    def action_select(self) -> None:
        key = self.selected_key
        if key is not None:
            self.post_message(self.RowSelected(self, key))

    def on_click(self, event: events.Click) -> None:
        index = self.scroll_offset.y + event.y - 1
        if event.y < 1 or index >= len(self._rows):
            return
        if index == self.cursor_row:
            self.action_select()  # a click on the selected row opens it
        else:
            self.move_cursor(index)
