"""Travelling through a recording in the app (Pilot, no root): stepping, going to a time,
the window over records, panes, filters and drill-downs in the past; and `R`, recording
the live screen, stopped by a full disk without stopping the screen."""

from __future__ import annotations

import os

import pytest
from conftest import run_app
from test_recording_cli import SPIKE, SPIKE_FUNCTION, make_recording
from test_ui import INTERVAL, SwitchableSource, column, next_frames

from ktop.record import fileformat as recording_module
from ktop.record.fileformat import Recording, RecordingError
from ktop.record.replay import ReplaySource, TimelineView
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.function import FunctionScreen
from ktop.ui.widgets.timeline import timeline_text


@pytest.fixture
def replay(tmp_path, recorded_snapshot) -> ReplaySource:
    return ReplaySource(Recording(make_recording(tmp_path / "s.krec", recorded_snapshot)))


def header(app) -> str:
    return "\n".join(screen_text(app).splitlines()[:5])


async def settle(pilot) -> None:
    """The merge runs in a worker: wait until the panes show the position."""
    app = pilot.app
    for _ in range(500):
        if not any(w.group == "timeline" and not w.is_finished for w in app.workers):
            break
        await pilot.pause(0.01)
    await pilot.pause(0.05)


def test_it_opens_at_the_end_and_steps_through_time(replay):
    seen = []

    async def scenario(pilot):
        app = pilot.app
        seen.append(header(app))
        for keys in (["home"], ["right"], ["right_square_bracket"], ["left_square_bracket"],
                     ["left"], ["end"], ["left"] * 3):
            await pilot.press(*keys)
            await settle(pilot)
            seen.append((replay.position, header(app)))

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert "record 180/180" in seen[0] and "2026-01-01 11:53:44" in seen[0]
    positions = [position for position, _ in seen[1:]]
    assert positions == [0, 1, 61, 1, 0, 179, 176]
    # The header's clock is the record's own (the panes show it, not just the timeline).
    assert "11:51:46" in seen[3][1].splitlines()[0]  # record 61: START + 61 s
    assert "record 62/180" in seen[3][1]


def test_g_goes_to_a_time_and_the_panes_show_that_moment(replay):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("w", *"1", "enter")  # one record: that second alone
        await pilot.press("g", *"11:52:25", "enter")
        await settle(pilot)
        seen["position"] = replay.position
        seen["header"] = header(app)
        seen["functions"] = column(app, "functions", "symbol")
        await pilot.press("g", *"13:00:00", "enter")  # not in it: said, nothing moves
        await settle(pilot)
        seen["after"] = replay.position
        seen["notes"] = [str(n.message) for n in app._notifications]
        await pilot.press("g", *"[red]x[/]", "enter")  # typed text is shown, never markup
        await pilot.pause(0.1)
        seen["toast"] = [(n.message, n.markup) for n in app._notifications][-1]

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert seen["position"] == SPIKE
    assert "kernel  90.0%" in seen["header"]  # the spike's CPU split
    assert SPIKE_FUNCTION in seen["functions"]
    assert seen["after"] == SPIKE
    assert any("13:00:00 is not in the recording" in note for note in seen["notes"])
    assert seen["toast"] == ("expected HH:MM:SS (or YYYY-MM-DD HH:MM:SS), not '[red]x[/]'", False)


def test_the_window_sums_the_records_as_live_would(replay):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("g", *"11:52:25", "enter", "w", *"1", "enter")
        await settle(pilot)
        seen["one"] = app.snapshot
        await pilot.press("w", *"30s", "enter")
        await settle(pilot)
        seen["thirty"] = app.snapshot
        seen["header"] = header(app)
        await pilot.press(*["right"] * 29)  # the spike is the window's oldest record
        await settle(pilot)
        seen["edge"] = column(app, "functions", "symbol")
        await pilot.press("right")  # and now it has left the window
        await settle(pilot)
        seen["gone"] = column(app, "functions", "symbol")

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    one, thirty = seen["one"], seen["thirty"]
    assert thirty.cpu.window_s == 30.0 and thirty.cpu.total_samples == 30 * one.cpu.total_samples
    assert "window 30 records (30s)" in seen["header"]
    assert "samples" in seen["header"] and "in 30s" in seen["header"]
    assert SPIKE_FUNCTION in seen["edge"] and SPIKE_FUNCTION not in seen["gone"]


def test_a_drill_down_moves_in_time_with_the_timeline_keys(replay):
    """Issue 31: inside a drill-down of a replay, [ ] Left Right move the window as on the
    panes, the drill-down follows, and its title says the window's time (it said "in the
    last 1.0s", and the keys did nothing)."""
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("g", *"11:52:25", "enter", "w", *"1", "enter")
        await settle(pilot)
        await pilot.press("slash", *"spike", "enter")
        await pilot.pause(0.1)
        await pilot.press("enter")
        await pilot.pause(0.3)
        seen["screen"] = app.screen
        seen["at"] = (replay.position, " ".join(screen_text(app).splitlines()[:2]))
        for step, keys in (("on", ["right"]), ("back", ["left"]),
                           ("minute back", ["left_square_bracket"]),
                           ("minute on", ["right_square_bracket"])):
            await pilot.press(*keys)
            await settle(pilot)
            seen[step] = (replay.position, " ".join(screen_text(app).splitlines()[:2]))
        seen["still"] = app.screen

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert isinstance(seen["screen"], FunctionScreen) and seen["still"] is seen["screen"]
    position, title = seen["at"]
    assert position == SPIKE and "in 11:52:24-11:52:25 (1.0s)" in title  # the window's time
    assert "5 samples" in title and "STALE" not in title and "NOT IN" not in title
    position, title = seen["on"]
    assert position == SPIKE + 1  # the timeline moved from inside the drill-down
    # The function is not in the next second: said, with the time moved to.
    assert "NOT IN THE WINDOW MOVED TO (11:52:26)" in title, title
    position, title = seen["back"]
    assert position == SPIKE and "NOT IN" not in title and "in 11:52:24-11:52:25" in title
    assert seen["minute back"][0] == SPIKE - 60 and "NOT IN THE WINDOW MOVED TO (11:51:25)" in (
        seen["minute back"][1])
    assert seen["minute on"][0] == SPIKE and "NOT IN" not in seen["minute on"][1]


def test_drill_down_sort_and_filter_in_the_past(replay):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("g", *"11:52:25", "enter", "w", *"1", "enter")
        await settle(pilot)
        await pilot.press("slash", *"spike", "enter")  # a filter: stepping keeps it
        await pilot.pause(0.1)
        seen["filtered"] = column(app, "functions", "symbol")
        await pilot.press("enter")
        await pilot.pause(0.3)
        seen["screen"] = app.screen
        seen["drill"] = screen_text(app)
        seen["position"] = replay.position
        await pilot.press("escape", "right")
        await settle(pilot)
        seen["later"] = column(app, "functions", "symbol")
        await pilot.press("slash", "escape")  # the filter cleared
        await pilot.press("4", "greater_than_sign", "greater_than_sign")  # by USR%, then SYS%
        await settle(pilot)
        seen["sorted"] = [float(v) for v in column(app, "processes", "sys")]

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert seen["filtered"] == [SPIKE_FUNCTION]
    assert isinstance(seen["screen"], FunctionScreen)
    assert f"callers of {SPIKE_FUNCTION}" in seen["drill"] and "do_syscall_64" in seen["drill"]
    assert seen["position"] == SPIKE
    assert seen["later"] == []  # one record on, the function is not in the window
    assert len(seen["sorted"]) > 5 and seen["sorted"] == sorted(seen["sorted"], reverse=True)
    assert seen["sorted"] != sorted(seen["sorted"])


def test_arrows_in_a_typed_filter_move_the_cursor_not_time(replay):
    seen = {}

    async def scenario(pilot):
        await pilot.press("slash", "a", "b", "left", "home", "end")
        await pilot.pause(0.1)
        seen["position"] = replay.position

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert seen["position"] == 179


@pytest.mark.parametrize("width", [80, 160])
def test_the_timeline_fits_the_width(replay, width):
    view = TimelineView(replay.records, SPIKE, 5, "its last record is cut off: 100 bytes dropped")
    top, sparks = timeline_text(view, width - 2).split("\n")  # the bar's padding
    assert top.cell_len <= width - 2 and sparks.cell_len <= width - 2
    assert "2026-01-01 11:52:25" in top.plain and "record 101/180" in top.plain
    assert "window 5 records (5s)" in top.plain
    plain = sparks.plain
    assert plain.count("█") >= 2  # the kernel CPU and I/O latency spikes
    assert "90%" in plain and "40ms" in plain
    reversed_at = [span for span in sparks.spans if "reverse" in str(span.style)]
    assert len(reversed_at) == 3  # the position marked in each sparkline


# ---- R: recording the live screen ------------------------------------------------------------


class RecordableSource(SwitchableSource):
    """A live source whose interval is the snapshot itself, as LiveSource gives it."""

    def interval_snapshot(self, shown):
        return shown


def test_r_records_the_live_screen_and_r_stops(tmp_path, recorded_snapshot):
    source = RecordableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("R")
        seen["badge"] = header(app).splitlines()[0]
        seen["first"] = source.frames
        await next_frames(pilot, source, 3)
        await pilot.press("R")
        seen["stopped"] = source.frames  # on a loaded machine, more than 3 may have come
        await pilot.pause()
        seen["after"] = header(app).splitlines()[0]
        await next_frames(pilot, source, 2)

    run_app(build_app(source, interval_s=INTERVAL, save_dir=str(tmp_path)), scenario)
    (name,) = os.listdir(tmp_path)
    assert name.startswith("ktop-") and name.endswith(".krec")
    assert "● REC " + name in seen["badge"] and "REC" not in seen["after"]
    recording = Recording(str(tmp_path / name))
    # each frame while recording, and the interval in progress at the stop: not the later
    shown = seen["stopped"] - seen["first"]
    assert 3 <= len(recording) and shown - 1 <= len(recording) <= shown + 1, (len(recording), seen)
    assert recording.snapshot(0).processes == recorded_snapshot.processes
    assert (tmp_path / name).stat().st_mode & 0o777 == 0o600


def test_a_full_disk_stops_recording_and_the_screen_goes_on(tmp_path, recorded_snapshot,
                                                            monkeypatch):
    source = RecordableSource(recorded_snapshot)
    seen = {}
    real_append = recording_module.RecordWriter.append

    def append(writer, snapshot):
        if writer.records >= 2:
            raise RecordingError(f"recording to {writer.name} stopped: No space left on device "
                                 "(the file keeps its 2 whole records)")
        return real_append(writer, snapshot)

    monkeypatch.setattr(recording_module.RecordWriter, "append", append)

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("R")
        await next_frames(pilot, source, 5)
        seen["header"] = header(app).splitlines()[0]
        seen["notes"] = [str(n.message) for n in app._notifications]
        frames = source.frames
        await next_frames(pilot, source, 2)
        seen["still"] = source.frames > frames and app.is_running

    run_app(build_app(source, interval_s=INTERVAL, save_dir=str(tmp_path)), scenario)
    assert "REC" not in seen["header"]
    assert any("No space left on device" in note for note in seen["notes"])
    assert seen["still"]
    (name,) = os.listdir(tmp_path)
    assert len(Recording(str(tmp_path / name))) == 2


def test_r_is_not_offered_on_a_replay(replay):
    seen = {}

    async def scenario(pilot):
        await pilot.press("R")
        await pilot.pause()
        seen["header"] = header(pilot.app)

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert "REC" not in seen["header"]



def test_esc_and_backspace_in_the_time_prompt_belong_to_it(replay):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("4", "enter")  # a process drilled into: every pane shows it alone
        await pilot.pause(0.1)
        seen["pid"] = app.main_screen.display_settings.pid
        await pilot.press("g", "1", "1", "backspace", "escape")
        await pilot.pause(0.1)
        seen["after"] = (app.main_screen.display_settings.pid, app.main_screen.focused_pane().PANE, replay.position,
                         app.query_one("#timeline-prompt").display)

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert seen["pid"] is not None
    assert seen["after"] == (seen["pid"], "processes", 179, False)


def test_a_pane_the_file_does_not_hold_says_so_instead_of_waiting(recorded_snapshot):
    """recorded.json was written before the waits pane existed: a replay never gets its
    data, so the pane says why it is empty rather than 'waiting for scheduler events'."""
    from ktop.engine import RecordedSource  # noqa: PLC0415

    assert recorded_snapshot.waits is None and "waits" not in recorded_snapshot.unavailable
    seen = {}

    async def scenario(pilot):
        await pilot.pause(0.2)
        seen["screen"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([recorded_snapshot]), interval_s=INTERVAL), scenario)
    assert "not in this file" in seen["screen"]
    assert "waiting for scheduler events" not in seen["screen"]
    assert "chacha_permute" in seen["screen"]  # the panes the file holds show their rows


def test_a_window_longer_than_any_recording_is_the_whole_of_it(replay):
    """Issue 44: `w`, 400 nines, Enter crashed the app (OverflowError: the number read as
    infinity); a window longer than the recording is all of it."""
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("w", *"9" * 400, "enter")
        await settle(pilot)
        seen["window"] = replay.window
        seen["header"] = header(app)
        await pilot.press("w", *"9" * 400, "h", "enter")  # a span of hours, as long
        await settle(pilot)
        seen["span"] = replay.window
        seen["running"] = app.is_running

    run_app(build_app(replay, interval_s=INTERVAL), scenario)
    assert seen["window"] == seen["span"] == 180 and seen["running"]
    assert "window 180 records" in seen["header"]


@pytest.mark.parametrize(("typed", "records"), [
    ("9" * 400, 1 << 40), ("9" * 400 + "s", 1 << 40), ("1e3", None), ("2.5", None),
    ("0", 1), ("30s", 30), ("1.5m", 90), ("12", 12),
])
def test_parse_window_reads_any_length_typed(typed, records):
    from ktop.record.replay import parse_window

    if records is None:
        with pytest.raises(ValueError):
            parse_window(typed, 1.0)
    else:
        assert parse_window(typed, 1.0) == records
