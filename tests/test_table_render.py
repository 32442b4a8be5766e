"""A table draws its lines without Textual's styles cache, and they are the cache's lines."""

from __future__ import annotations

from conftest import run_app
from rich.cells import cell_len
from test_compositor import with_changes
from test_ui import INTERVAL, SwitchableSource, next_frames
from textual.geometry import Region
from textual.widget import Widget

from ktop.ui.app import build_app
from ktop.ui.widgets.table import KeyedTable


def cells(strips) -> list[list[tuple[str, object]]]:
    """Each line as the terminal gets it: (character, style) per cell."""
    return [[(char, segment.style) for segment in strip for char in segment.text
             for _ in range(cell_len(char))] for strip in strips]


def textuals(table: KeyedTable, crop: Region):
    table._styles_cache.clear()  # nothing cached: every line drawn through the cache
    return Widget.render_lines(table, crop)


def crops(table: KeyedTable) -> list[Region]:
    width, height = table.size
    return [Region(0, 0, width, height), Region(0, 3, width, 1), Region(0, 2, width, 5),
            Region(7, 0, width - 9, height), Region(width - 1, 1, 1, 4)]


def differences(app) -> list[tuple[str, Region]]:
    return [(table.id, crop) for table in app.main_screen.query(KeyedTable)
            for crop in crops(table)
            if cells(table.render_lines(crop)) != cells(textuals(table, crop))]


def test_tables_draw_the_cells_textuals_styles_cache_draws(recorded_snapshot):
    """Every table, whole and cropped, through data changes, focus, the cursor, scrolling
    and a filter that leaves a message: the same characters in the same styles."""
    source = SwitchableSource(with_changes(recorded_snapshot, 300, 0))
    found: list = []
    checked: list[int] = []

    async def scenario(pilot):
        app = pilot.app
        steps = [(), ("tab",), ("down", "down"), ("pagedown",), ("tab", "tab"), ("z",),
                 ("z",), ("slash", "x", "y", "z", "q", "enter")]
        for step, keys in enumerate(steps):
            source.current = with_changes(recorded_snapshot, 300 - 20 * step, step)
            await pilot.press(*keys)
            await next_frames(pilot, source)
            found.extend(differences(app))
            checked.append(sum(1 for _ in app.main_screen.query(KeyedTable)))

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert min(checked) >= 4
    assert found == []


def test_a_table_with_padding_or_a_border_is_drawn_by_textual(recorded_snapshot):
    """Styles the short path does not draw send the table back to the styles cache."""
    source = SwitchableSource(recorded_snapshot)
    found: list = []

    async def scenario(pilot):
        app = pilot.app
        tables = list(app.main_screen.query(KeyedTable))
        tables[0].styles.padding = (0, 2)
        tables[1].styles.border = ("round", "red")
        tables[2].styles.tint = "red 30%"
        await next_frames(pilot, source)
        found.extend(differences(app))

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert found == []


def test_scrollbars_draw_the_lines_textual_draws_as_rows_come_and_go(recorded_snapshot):
    """A table's scrollbar keeps each distinct line it drew: through row counts that move
    the thumb, scrolling, the mouse over the bar, and crops, every line is the one Textual's
    own scrollbar draws at that moment."""
    from textual.scrollbar import ScrollBar

    source = SwitchableSource(with_changes(recorded_snapshot, 300, 0))
    found: list = []
    drawn: list[int] = []

    def bar_differences(app) -> None:
        for table in app.main_screen.query(KeyedTable):
            bar = table.vertical_scrollbar
            if not bar.display or not bar.size.height:
                continue
            drawn.append(bar.size.height)
            width, height = bar.size
            for crop in (Region(0, 0, width, height), Region(0, 1, width, 1),
                         Region(0, height - 3, width, 3)):
                bar._styles_cache.clear()
                textual = ScrollBar.render_lines(bar, crop)  # (the base class: no lines kept)
                if cells(bar.render_lines(crop)) != cells(textual):
                    found.append((table.id, crop, bar.window_virtual_size, bar.position))

    async def scenario(pilot):
        app = pilot.app
        steps = [(), ("tab",), ("pagedown",), ("pagedown",), ("end",), ("home",), ("tab",)]
        for step, keys in enumerate(steps):
            source.current = with_changes(recorded_snapshot, 300 - 37 * step, step)
            await pilot.press(*keys)
            await next_frames(pilot, source)
            bar_differences(app)
            bars = [t.vertical_scrollbar for t in app.main_screen.query(KeyedTable)]
            for bar in bars:  # the mouse over the bar changes its colours
                bar.mouse_over = not bar.mouse_over
            bar_differences(app)

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert len(drawn) >= 10, "too few scrollbars were shown to compare"
    assert found == []


def test_a_table_line_is_one_segment_per_run_of_one_style(recorded_snapshot):
    """The terminal gets one colour code per run of cells in one style, not one per cell and
    pad (a refresh at 99 Hz wrote 18 KB, 1,160 escape sequences, for 3,700 characters)."""
    lines: list[list] = []

    async def scenario(pilot):
        for table in pilot.app.main_screen.query(KeyedTable):
            width, height = table.size
            lines.extend(list(strip) for strip in table.render_lines(Region(0, 0, width, height)))

    run_app(build_app(SwitchableSource(recorded_snapshot), interval_s=INTERVAL), scenario)
    rows = [segments for segments in lines if any(s.text.strip() for s in segments)]
    assert len(rows) > 20
    for segments in rows:
        runs = 1 + sum(a.style != b.style for a, b in zip(segments, segments[1:]))
        # (a line shorter than the table is padded with one more segment of its style)
        assert len(segments) <= runs + 1, [(s.text, str(s.style)) for s in segments]
