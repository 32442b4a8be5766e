"""Keys at random, and screens opened and closed faster than they are drawn (issue 44, item
5): a drill-down pushed and dismissed before its widgets were mounted, or updated (a refresh,
`r`, `o`) after Esc dismissed it, crashed the app with NoMatches. No root: recorded data, a
replay and a live-like source that changes under the keys."""

from __future__ import annotations

import random
import time

import pytest
from compare_data import make_compare_recording
from conftest import drill_into, run_app
from test_compare import window
from test_ui import SwitchableSource
from textual import events

from ktop.compare import baseline_of
from ktop.record.fileformat import Recording
from ktop.record.replay import ReplaySource
from ktop.ui.app import build_app
from ktop.ui.screens.compare import CompareStacksScreen
from ktop.ui.screens.drill import DrillScreen
from ktop.ui.screens.function import FunctionScreen

# Every key a screen binds, Enter and Esc more often (they open and close the screens);
# not q (quit), s (writes a file), R (records).
KEYS = (["enter"] * 6 + ["escape"] * 4
        + ["backspace", "r", "r", "o", "v", "tab", "shift+tab", "b", "B", "m", "i", "c", "z",
           "left", "right", "left_square_bracket", "right_square_bracket", "home", "end",
           "up", "down", "pageup", "pagedown", "1", "2", "3", "4", "5", "question_mark", "f1",
           "L", "space", "less_than_sign", "greater_than_sign", "plus", "minus", "e", "E", "C",
           "G", "slash", "a", "d", "w", "g", "9"])
FUZZ_KEYS = 250
FUZZ_SECONDS = 8.0  # per source: the test stays well under 20 s on a loaded machine


def send_at_once(app, *keys: str) -> None:
    """Keys queued together, as a fast typist or a paste sends them: none waits for the
    screen the one before opens or closes."""
    for key in keys:
        event = events.Key(key, key if len(key) == 1 else None)
        event.set_sender(app)
        app._driver.send_message(event)


async def random_keys(pilot, seed: int, source: SwitchableSource | None = None,
                      changes: tuple = ()) -> int:
    """FUZZ_KEYS keys in bursts of 1 to 4, with pauses from none to 30 ms; a live-like
    source switches its data between them. Returns the keys sent."""
    rnd = random.Random(seed)
    app = pilot.app
    sent, deadline = 0, time.monotonic() + FUZZ_SECONDS
    while sent < FUZZ_KEYS and app.is_running and time.monotonic() < deadline:
        burst = [rnd.choice(KEYS) for _ in range(rnd.choice((1, 1, 1, 2, 3, 4)))]
        send_at_once(app, *burst)
        sent += len(burst)
        if source is not None and rnd.random() < 0.3:
            source.current = changes[0] if source.current is changes[1] else changes[1]
        await pilot.pause(rnd.choice((0, 0, 0, 0.001, 0.01, 0.03)))
    await pilot.pause(0.1)
    return sent


@pytest.fixture(scope="module")
def windows():
    return window(119, 5), window(29, 10)


@pytest.mark.parametrize("seed", [0, 6])
def test_random_keys_on_a_live_like_source_never_crash(windows, tmp_path, seed):
    """Seed 0 crashed with NoMatches '#stack-list-text' on CompareStacksScreen, seed 6 on
    FunctionScreen: a drill-down dismissed before it was mounted, then drawn."""
    now, base = windows
    source = SwitchableSource(base)
    seen = {}

    async def scenario(pilot):
        seen["sent"] = await random_keys(pilot, seed, source, (now, base))
        seen["running"] = pilot.app.is_running

    run_app(build_app(source, interval_s=0.05, save_dir=str(tmp_path)), scenario)
    assert seen["running"] and seen["sent"] > 50  # (a crash raises out of run_app)


def test_random_keys_on_a_replay_never_crash(tmp_path):
    recording = make_compare_recording(tmp_path / "calm-then-busy.krec")
    source = ReplaySource(Recording(recording), window_s=10, position=29)
    seen = {}

    async def scenario(pilot):
        seen["sent"] = await random_keys(pilot, 3)
        seen["running"] = pilot.app.is_running

    run_app(build_app(source, interval_s=1.0, save_dir=str(tmp_path)), scenario)
    assert seen["running"] and seen["sent"] > 50


def test_a_drill_down_updated_after_esc_draws_nothing_and_the_panes_stay(windows):
    """The crash the random keys found, step by step: Esc, then a refresh (r, the next
    snapshot) reaching the drill-down whose widgets are gone."""
    now, base = windows
    source = SwitchableSource(now)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        screen = await drill_into(pilot, CompareStacksScreen)
        seen["opened"] = screen
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["back"] = app.screen
        screen.action_refresh_data()  # as r, and each refresh, reached it
        screen.follow(base)
        screen.action_toggle_offsets()
        screen.show_paused()
        await pilot.pause(0.1)
        seen["after"] = app.screen

    run_app(build_app(source, interval_s=0.2, baseline=baseline_of(base)), scenario)
    assert isinstance(seen["opened"], CompareStacksScreen)
    assert seen["back"] is seen["after"] and not isinstance(seen["after"], DrillScreen)


def test_a_drill_down_closed_before_it_was_drawn_leaves_the_panes_working(windows):
    """Enter and Esc at once: the screen's mount comes after it was dismissed; and a refresh
    reaching a screen not composed yet (Enter, then r) waits for its widgets."""
    now, base = windows
    source = SwitchableSource(now)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        table = app.main_screen.pane("functions").table
        table.focus()
        await pilot.pause()
        for close in (True, False):
            screen = FunctionScreen("spike_func", now, app)
            app.push_screen(screen)
            screen.action_refresh_data()  # before its widgets are composed
            if close:
                screen.action_back()
                screen.action_back()  # twice: the panes' screen stays
            await pilot.pause(0.2)
            seen[close] = (app.screen, screen)
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["end"] = app.screen

    run_app(build_app(source, interval_s=0.2), scenario)
    assert seen[True][0] is not seen[True][1] and not isinstance(seen[True][0], DrillScreen)
    top, screen = seen[False]
    assert top is screen and "spike_func" in str(screen.header())
    assert not isinstance(seen["end"], DrillScreen)
