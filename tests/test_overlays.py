"""Issue 31 part 5: an overlay costs what it shows. With help (?) or the losses list (L) open,
new data under it repainted every widget of both screens each refresh (ktop's CPU 1.0-1.7%
on the main screen, 2.5% with help open, 5.2% with L); the screen under an overlay now
catches up when it is on top again, and the overlay redraws only when what it shows changes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import run_app
from test_ui import SwitchableSource, next_frames
from textual.widget import Widget

from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.help import HelpScreen
from ktop.ui.screens.losses import LossesScreen


@pytest.fixture
def renders(monkeypatch) -> dict[str, int]:
    """Every widget's render, counted by its class's name."""
    counted: dict[str, int] = {}
    render_lines = Widget.render_lines

    def counting(self, crop):
        name = type(self).__name__
        counted[name] = counted.get(name, 0) + 1
        return render_lines(self, crop)

    monkeypatch.setattr(Widget, "render_lines", counting)
    return counted


def moving(snapshot, i: int):
    """The data a second later: the clock, the processes and the CPU split all changed."""
    return replace(snapshot, taken_at=snapshot.taken_at + i,
                   processes=snapshot.processes[: len(snapshot.processes) - i],
                   cpu=replace(snapshot.cpu, times=replace(snapshot.cpu.times, user=10.0 + i)))


@pytest.mark.parametrize(("key", "overlay"), [("question_mark", HelpScreen), ("L", LossesScreen)])
def test_an_overlay_is_not_redrawn_while_only_the_data_under_it_changes(
        recorded_snapshot, renders, key, overlay):
    source = SwitchableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press(key)
        await next_frames(pilot, source)
        assert isinstance(app.screen, overlay)
        renders.clear()
        for i in range(1, 6):  # five refreshes of new data under the overlay
            source.current = moving(recorded_snapshot, i)
            await next_frames(pilot, source, 1)
        await pilot.pause(0.1)
        seen["renders"] = dict(renders)
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["after"] = screen_text(app)

    run_app(build_app(source, interval_s=0.05), scenario)
    # Nothing drawn: not the overlay (its content did not change), not the panes under it.
    assert seen["renders"] == {}, seen["renders"]
    # Back on the panes, they show the newest data at once.
    newest = moving(recorded_snapshot, 5)
    assert "user  15.0%" in seen["after"]
    assert f"{len(newest.processes)} tasks" in seen["after"]


def test_the_losses_list_is_redrawn_when_the_losses_change(recorded_snapshot, renders):
    source = SwitchableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("L")
        await next_frames(pilot, source)
        renders.clear()
        locks = recorded_snapshot.locks
        source.current = replace(recorded_snapshot, locks=replace(
            locks, lost={**locks.lost, "unpaired_end": locks.lost.get("unpaired_end", 0) + 7}))
        await next_frames(pilot, source, 2)
        await pilot.pause(1.2)  # the list looks again each second
        seen["renders"] = dict(renders)
        seen["text"] = screen_text(app)
        seen["behind"] = app.main_screen.behind

    run_app(build_app(source, interval_s=0.05), scenario)
    assert seen["renders"].get("Static", 0) >= 1  # the list, drawn again
    assert "unpaired_end" in seen["text"]
    # The panes under it still wait for the data (drawn again as they were, under the header).
    assert seen["behind"]


def test_a_drill_down_under_help_catches_up_when_help_closes(recorded_snapshot, renders):
    source = SwitchableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("2", "enter")  # the top lock caller's stacks
        await next_frames(pilot, source)
        drill = app.screen
        await pilot.press("question_mark")
        await next_frames(pilot, source)
        renders.clear()
        callers = recorded_snapshot.locks.callers
        top = replace(callers[0], contended=callers[0].contended + 1000)
        source.current = replace(recorded_snapshot, taken_at=recorded_snapshot.taken_at + 9,
                                 locks=replace(recorded_snapshot.locks,
                                               callers=(top, *callers[1:])))
        await next_frames(pilot, source, 3)
        seen["renders"] = dict(renders)
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["drill"] = app.screen is drill
        seen["text"] = screen_text(app)
        seen["contended"] = top.contended

    run_app(build_app(source, interval_s=0.05), scenario)
    assert seen["renders"] == {}, seen["renders"]
    assert seen["drill"] and f"{seen['contended']} waits" in seen["text"]
