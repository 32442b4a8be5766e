"""ktop's compositor repaints what Textual's own would, asking only the widgets it must."""

from __future__ import annotations

import gc
from dataclasses import replace

from conftest import run_app
from rich.cells import cell_len
from rich.segment import ControlType
from test_ui import INTERVAL, SwitchableSource, many_processes, next_frames
from textual._compositor import Compositor
from textual.strip import Strip

from ktop.ui.app import build_app
from ktop.ui.widgets.compositor import ChangedRowsCompositor


def with_changes(snapshot, count: int, step: int):
    """`count` processes whose CPU figures move with `step`, and a hot list that changes."""
    changed = many_processes(snapshot, count)
    processes = tuple(replace(p, cpu_percent=round((p.cpu_percent * (step + 3)) % 97, 1))
                      for p in changed.processes)
    cpu = replace(snapshot.cpu, functions=snapshot.cpu.functions[step % 3:])
    return replace(changed, processes=processes, cpu=cpu)


def written_cells(update, console) -> dict[tuple[int, int], tuple[str, object]]:
    """What an update writes on the terminal: each cell it sets, with its character and
    style (cursor moves that write nothing are not part of what the user sees)."""
    cells = {}
    x = y = 0
    for segment in update.__rich_console__(console, console.options):
        if segment.control:
            for code in segment.control:
                if code[0] == ControlType.CURSOR_MOVE_TO:
                    x, y = code[1], code[2]
        elif segment.text == "\n":
            x, y = 0, y + 1
        else:
            for char in segment.text:
                cells[(x, y)] = (char, segment.style)
                x += cell_len(char)
    return cells


def test_every_frame_writes_what_textuals_compositor_writes(recorded_snapshot):
    """Each partial update is rendered both ways, Textual's first; the cells written on the
    terminal (character and style) must be the same, through data changes, scrolling,
    focus, zoom, a toast laid over changing rows and a help screen opened and closed."""
    source = SwitchableSource(with_changes(recorded_snapshot, 300, 0))
    compared: list[tuple[dict, dict]] = []

    async def scenario(pilot):
        app = pilot.app
        compositor = app.main_screen._compositor
        assert isinstance(compositor, ChangedRowsCompositor)

        def both_ways():
            regions = set(compositor._dirty_regions)
            textuals = Compositor.render_partial_update(compositor)
            compositor._dirty_regions.update(regions)
            ours = ChangedRowsCompositor.render_partial_update(compositor)
            if textuals is not None or ours is not None:
                compared.append((written_cells(textuals, app.console) if textuals else {},
                                 written_cells(ours, app.console) if ours else {}))
            return ours

        compositor.render_partial_update = both_ways
        steps = [(), ("tab",), ("down", "down", "down"), ("z",), ("z",), ("tab", "tab"),
                 ("pagedown",), ("question_mark",), ("escape",), ("end",), ("home",)]
        for step, keys in enumerate(steps, 1):
            source.current = with_changes(recorded_snapshot, 300 - 20 * step, step)
            if step == 4:
                app.notify("a toast over rows that change beneath it", timeout=30)
            await pilot.press(*keys)
            await next_frames(pilot, source)

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert len(compared) > 10
    assert sum(len(textuals) for textuals, _ in compared) > 5000  # cells written: it was tried
    differing = [i for i, (textuals, ours) in enumerate(compared) if textuals != ours]
    assert not differing, f"{len(differing)} of {len(compared)} frames differ"


def test_a_changed_row_asks_only_the_widgets_under_it(recorded_snapshot):
    """One process's figure changes: only the processes table draws (one line); the header,
    the other panes, the grid and the screen behind are not asked for a line."""
    source = SwitchableSource(recorded_snapshot)
    asked: list[tuple[str, int]] = []

    async def scenario(pilot):
        app = pilot.app
        await next_frames(pilot, source)
        header = app.main_screen.header_bar()
        for widget in app.main_screen.walk_children(with_self=True):
            original = widget.render_lines

            def render_lines(crop, widget=widget, original=original):
                if widget is not header:  # the header's clock moves each second
                    asked.append((f"{type(widget).__name__}#{widget.id}", crop.height))
                return original(crop)

            widget.render_lines = render_lines
        top = max(recorded_snapshot.processes, key=lambda p: p.cpu_percent)
        source.current = replace(recorded_snapshot, processes=tuple(
            replace(p, cpu_percent=p.cpu_percent + 0.5) if p is top else p
            for p in recorded_snapshot.processes))
        await next_frames(pilot, source)

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert asked, "nothing was repainted"
    assert {name for name, _ in asked} == {"KeyedTable#processes-processes"}, asked
    assert all(height <= 2 for _, height in asked), asked


def _strips_in_cycles_of_their_own() -> int:
    """Strips waiting in reference cycles for the collector because their own cache holds
    them (collected here)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sum(isinstance(thing, Strip) and [thing] in thing._divide_cache._cache.values()
                   for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_repainted_lines_are_freed_at_once_not_left_to_the_collector(recorded_snapshot):
    """Every line a refresh repaints replaces the one drawn before; the old lines must go
    when they are replaced, not wait in reference cycles for the collector's oldest
    generation, which ktop runs rarely (their memory stayed meanwhile)."""
    source = SwitchableSource(with_changes(recorded_snapshot, 200, 0))
    left: list[int] = []

    async def scenario(pilot):
        await next_frames(pilot, source)
        _strips_in_cycles_of_their_own()  # start-up's full repaints are Textual's own
        for step in range(1, 6):
            source.current = with_changes(recorded_snapshot, 200 - 10 * step, step)
            await next_frames(pilot, source)
        left.append(_strips_in_cycles_of_their_own())

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert left == [0]
