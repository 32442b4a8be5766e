"""The panes a user chooses: only they are on the screen, their number keys follow the order
chosen, and key p adds and removes them, telling the engine (which loads only those) and
keeping the choice for the next start."""

from __future__ import annotations

import pytest
from conftest import run_app
from textual.binding import Binding

from ktop import config, registry
from ktop.engine import RecordedSource
from ktop.panes.processes.widget import ProcessesPane
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.help import HelpScreen
from ktop.ui.screens.main import MainScreen, main_keys
from ktop.ui.screens.panes import PanesScreen
from ktop.ui.widgets.pane import Pane


class LiveRecorded(RecordedSource):
    """Recorded data that says it is live: what the screen asks of the engine is kept."""

    live = True

    def __init__(self, snapshots) -> None:
        super().__init__(snapshots)
        self.loaded: list[frozenset[str]] = []

    def set_panes(self, names: frozenset[str]) -> None:
        self.loaded.append(names)


def mounted(app) -> list[str]:
    """The panes on the screen, in the grid's order."""
    return [p.PANE for p in app.main_screen.query(Pane)]


def test_only_the_panes_chosen_show_numbered_in_their_order(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.pause(0.1)
        seen["mounted"] = mounted(app)
        seen["titles"] = [str(app.main_screen.pane(n).border_title) for n in seen["mounted"]]
        seen["text"] = screen_text(app)
        await pilot.press("2")
        seen["focused"] = app.main_screen.focused_pane().PANE
        await pilot.press("3")  # no third pane: nothing moves
        seen["still"] = app.main_screen.focused_pane().PANE
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        seen["help"] = isinstance(app.screen, HelpScreen) and screen_text(app)

    run_app(build_app(RecordedSource([recorded_snapshot]), panes=("waits", "functions")),
            scenario, size=(160, 50))
    assert seen["mounted"] == ["waits", "functions"]
    assert seen["titles"][0].startswith("1 Waits") and seen["titles"][1].startswith("2 Hot")
    assert "Lock contention" not in seen["text"] and "Block I/O" not in seen["text"]
    assert seen["focused"] == "functions" and seen["still"] == "functions"
    assert "1  Waits" in seen["help"] or "1 Waits" in " ".join(seen["help"].split())


def test_the_help_numbers_the_panes_shown():
    bindings = [b for b in MainScreen.BINDINGS if isinstance(b, Binding)]
    keys = dict(main_keys(bindings, False, ("processes", "locks")))
    assert keys["1"] == "Processes" and keys["2"] == "Lock contention" and "3" not in keys


def test_key_p_adds_and_removes_panes_and_keeps_the_choice(recorded_snapshot, tmp_path):
    seen: dict[str, object] = {}
    path = str(tmp_path / "ktop" / "ktop.conf")
    source = LiveRecorded([recorded_snapshot])

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("p")
        await pilot.pause(0.1)
        seen["chooser"] = isinstance(app.screen, PanesScreen) and screen_text(app)
        await pilot.press("down", "space")  # the second pane, locks: ticked
        await pilot.press("up", "space")  # the first, functions: unticked
        await pilot.press("escape")
        await pilot.pause(0.2)
        seen["after"] = mounted(app)
        seen["locks"] = str(app.main_screen.pane("locks").border_title)
        await pilot.press("2")
        seen["two"] = app.main_screen.focused_pane().PANE
        seen["kept"] = config.read_config(path)
        await pilot.press("p", "a", "escape")  # the "all" layout
        await pilot.pause(0.2)
        seen["all"] = mounted(app)
        await pilot.press("p", "d", "escape")
        await pilot.pause(0.2)
        seen["default"] = mounted(app)

    run_app(build_app(source, panes=("waits", "functions"), config_path=path), scenario,
            size=(160, 50))
    assert "Hot kernel functions" in seen["chooser"] and "Space/Enter" in seen["chooser"]
    assert seen["after"] == ["waits", "locks"]
    assert seen["locks"].startswith("2 Lock contention") and seen["two"] == "locks"
    assert seen["kept"] == (("waits", "locks"), "")
    assert source.loaded[0] == frozenset({"waits", "locks"})
    assert seen["all"] == list(config.pane_names())
    assert seen["default"] == list(config.default_panes())
    assert config.read_config(path)[0] == config.default_panes()


def test_no_pane_ticked_is_refused(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("p", "space", "escape")  # untick the one pane shown
        await pilot.pause(0.1)
        seen["still_open"] = isinstance(app.screen, PanesScreen)
        await pilot.press("space", "escape")
        await pilot.pause(0.1)
        seen["mounted"] = mounted(app)

    run_app(build_app(RecordedSource([recorded_snapshot]), panes=("functions",)), scenario,
            size=(160, 50))
    assert seen["still_open"] and seen["mounted"] == ["functions"]


@pytest.fixture
def seven_panes():
    """The registry's panes and stand-ins up to seven (as syscalls and endings will come)."""
    saved = list(registry.PANES)
    extra = []
    for name in ("sixth", "seventh", "eighth"):
        widget = type(f"{name.title()}Pane", (ProcessesPane,), {"PANE": name})
        extra.append(registry.PaneDef(name=name, field="processes", title=f"{name.title()} pane",
                                      key_label=name.title(), short_label=name[:3],
                                      drill_by="pid", widget=lambda w=widget: w))
    registry.PANES[:] = [*saved, *extra][:7]
    try:
        yield tuple(spec.name for spec in registry.PANES)
    finally:
        registry.PANES[:] = saved


def shown(app) -> list[str]:
    return [p.PANE for p in app.main_screen.query(Pane) if p.display]


@pytest.mark.parametrize(("size", "compact"), [((120, 28), False), ((120, 24), True),
                                               ((160, 50), False)])
def test_seven_panes_on_a_short_screen_show_one_at_a_time(recorded_snapshot, seven_panes,
                                                          size, compact):
    seen = {}

    async def scenario(pilot):
        await pilot.pause(0.1)
        seen["shown"] = shown(pilot.app)
        seen["text"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([recorded_snapshot]), panes=seven_panes), scenario,
            size=size)
    if compact:  # a grid of four rows would give each pane a row or two
        assert seen["shown"] == ["functions"]
        seventh = registry.pane(seven_panes[6])
        assert f"7 {seventh.key_label}" in seen["text"] or f"7 {seventh.short_label}" in \
            seen["text"], "the tabs reach the seventh"
    else:
        assert seen["shown"] == list(seven_panes)


def test_fewer_panes_chosen_fit_the_grid_again(recorded_snapshot, seven_panes):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("7")  # the last pane, shown alone under the tabs
        seen["before"] = shown(app)
        await pilot.press("p", "c")  # the cpu layout (four panes, the seventh left out)
        await pilot.press("escape")
        await pilot.pause(0.2)
        seen["after"] = shown(app)
        seen["focused"] = app.main_screen.focused_pane().PANE

    run_app(build_app(RecordedSource([recorded_snapshot]), panes=seven_panes), scenario,
            size=(120, 24))
    assert seen["before"] == [seven_panes[6]]
    assert seen["after"] == list(config.layout_panes("cpu"))
    assert seen["focused"] in seen["after"]  # the focus left the seventh for one shown
