"""A pane is one entry of ktop.registry: a fifth pane, registered by a test as the waits pane
will be, gets its place in the grid, its number key, its tab and its line in the help,
with nothing else changed."""

from __future__ import annotations

import pytest
from conftest import run_app

from ktop import registry as panes
from ktop.engine import RecordedSource
from ktop.panes.processes.widget import ProcessesPane
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.help import HelpScreen


class FifthPane(ProcessesPane):
    """A stand-in widget: the processes again, under its own name."""

    PANE = "fifth"


FIFTH = panes.PaneDef(name="fifth", field="processes", title="Fifth pane", key_label="Fifth",
                      short_label="5th", drill_by="pid", widget=lambda: FifthPane)


@pytest.fixture
def five_panes():
    """The first four panes and the stand-in (whatever the registry holds by then)."""
    saved = list(panes.PANES)
    panes.PANES[:] = [*saved[:4], FIFTH]
    try:
        yield
    finally:
        panes.PANES[:] = saved


def regions(app) -> dict[str, tuple[int, int, int, int]]:
    """Each pane's (x, y, width, height) on screen, the hidden ones left out."""
    return {spec.name: tuple(app.main_screen.pane(spec.name).region) for spec in panes.PANES
            if app.main_screen.pane(spec.name).display}


def test_five_panes_share_a_big_screen_two_a_row(recorded_snapshot, five_panes):
    seen = {}

    async def scenario(pilot):
        await pilot.pause(0.1)
        seen["regions"] = regions(pilot.app)
        seen["text"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([recorded_snapshot])), scenario, size=(160, 50))
    shown = seen["regions"]
    assert len(shown) == 5
    for name in ("functions", "locks", "blockio", "processes"):
        x, y, width, height = shown[name]
        assert width >= 78 and height >= 13, (name, shown[name])
    x, y, width, height = shown["fifth"]
    assert (x, width) == (0, 160) and height >= 13  # the odd one out spans the row
    assert y > max(shown[name][1] for name in ("functions", "locks", "blockio", "processes"))
    assert "5 Fifth pane" in seen["text"]


def test_five_panes_under_tabs_on_a_small_screen(recorded_snapshot, five_panes):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        seen["tabs"] = app.query_one("#tabs").tabs_text().plain
        await pilot.press("5")
        await pilot.pause(0.1)
        seen["regions"] = regions(app)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        seen["help"] = screen_text(app) if isinstance(app.screen, HelpScreen) else ""

    run_app(build_app(RecordedSource([recorded_snapshot])), scenario, size=(80, 24))
    tabs = seen["tabs"]
    # Every tab whole; the key hint, least useful, only where it fits whole (not here).
    assert len(tabs) <= 80 and tabs.rstrip().endswith("5 Fifth") and "Tab/" not in tabs, tabs
    assert list(seen["regions"]) == ["fifth"] and seen["regions"]["fifth"][2] == 80
    assert "5" in seen["help"] and "Fifth" in seen["help"]


@pytest.fixture
def four_panes():
    saved = list(panes.PANES)
    panes.PANES[:] = saved[:4]
    try:
        yield
    finally:
        panes.PANES[:] = saved


def test_four_panes_keep_their_two_by_two_grid(recorded_snapshot, four_panes):
    seen = {}

    async def scenario(pilot):
        seen["regions"] = regions(pilot.app)

    run_app(build_app(RecordedSource([recorded_snapshot])), scenario, size=(160, 50))
    shown = seen["regions"]
    assert len(shown) == 4
    assert {x for x, _, _, _ in shown.values()} == {0, 80}  # two columns
    assert len({y for _, y, _, _ in shown.values()}) == 2  # two rows
    assert {width for _, _, width, _ in shown.values()} == {80}


@pytest.fixture
def first_six_panes():
    """The panes up to endings (the seventh, syscalls, takes a row of its own then)."""
    saved = list(panes.PANES)
    panes.PANES[:] = saved[:6]
    try:
        yield
    finally:
        panes.PANES[:] = saved


def test_the_waits_and_endings_panes_share_the_last_row(recorded_snapshot, first_six_panes):
    seen = {}

    async def scenario(pilot):
        await pilot.pause(0.1)
        seen["regions"] = regions(pilot.app)
        seen["text"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([recorded_snapshot])), scenario, size=(160, 50))
    shown = seen["regions"]
    assert [spec.name for spec in panes.PANES][4:] == ["waits", "endings"] and len(shown) == 6
    (x, y, width, height), (x2, y2, width2, _) = shown["waits"], shown["endings"]
    assert (x, width, x2, width2) == (0, 80, 80, 80) and y == y2 and height >= 13
    assert "5 Waits (off-CPU)" in seen["text"] and "6 Endings" in seen["text"]
