"""Two moments compared (issue 31, part 1): b marks the window shown as the baseline, every
pane then shows each row's figure a second now and in the baseline and the change, biggest
change first, new and gone rows marked; Enter shows the row's stacks against the
baseline's. The recording (compare_data.py) is made here: calm records, then busy ones,
each pane's rows changing by known amounts. No root."""

from __future__ import annotations

import re

import pytest
from compare_data import make_compare_recording, record
from conftest import drill_into, run_app
from test_replay_ui import settle
from test_ui import INTERVAL, SwitchableSource, next_frames, rows

from ktop.aggregate.merge import merge_snapshots
from ktop.compare import GONE, NEW, baseline_of, compare_rows, compare_stacks, window_label
from ktop.record.fileformat import Recording
from ktop.record.replay import ReplaySource
from ktop.registry import PANES, pane
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.compare import CompareStacksScreen

# The baseline: ten calm records ending at record 29 (11:51:14); now: five busy records
# ending at the last (11:52:44). Windows of different lengths: the figures are a second.
BASELINE_END, BASELINE_RECORDS = 29, 10
NOW_RECORDS = 5

# Each pane's compare rows as shown, in order: (figure now, baseline, change, name).
EXPECTED = {
    "functions": [("40.00", NEW, "+40.00", "spike_func"),
                  (GONE, "10.00", "-10.00", "calm_func"),
                  ("20.00", "20.00", "0.00", "steady_func")],
    "locks": [("5.00", NEW, "+5.00", "hot_lock+0x10 rwsem"),
              # a rise of 2 and a fall of 2: the busier row first
              ("3.00", "1.00", "+2.00", "steady_lock+0x10 spinlock"),
              (GONE, "2.00", "-2.00", "calm_lock+0x10 mutex")],
    "blockio": [("4.0M", "1.0M", "+3.0M", "100 dd sda W"),
                ("2.0M", NEW, "+2.0M", "200 tar sda R")],
    "processes": [("50.00", "10.00", "+40.00", "100 dd"),
                  ("20.00", NEW, "+20.00", "200 tar"),
                  (GONE, "5.00", "-5.00", "300 calmd")],
    "waits": [("50.00", "10.00", "+40.00", "100 dd"),
              ("10.00", NEW, "+10.00", "200 tar")],
}

# The drill-down of each pane's first row: its stacks' changes, innermost frame first.
EXPECTED_STACKS = {
    "functions": [("+30.00%", NEW, ["spike_func", "vfs_write", "do_syscall_64", "dd"]),
                  ("+10.00%", NEW, ["spike_func", "vfs_read", "do_syscall_64", "tar"])],
    "locks": [("+5.00ms/s", NEW, ["hot_lock", "do_syscall_64", "tar"])],
    "blockio": [("+3.0MB/s", "", ["submit_bio", "dd_io_path", "dd"])],
    "processes": [("+30.00%", NEW, ["spike_func", "vfs_write", "do_syscall_64", "dd"]),
                  ("0.00%", "", ["steady_func", "vfs_write", "do_syscall_64", "dd"])],
    "waits": [("+20.00%", NEW, ["io_schedule", "dd_wait_path", "dd"])],
}


def window(last: int, count: int):
    return merge_snapshots([record(i) for i in range(last - count + 1, last + 1)])


@pytest.fixture(scope="module")
def windows():
    return window(119, NOW_RECORDS), window(BASELINE_END, BASELINE_RECORDS)


@pytest.fixture
def recording(tmp_path) -> str:
    return make_compare_recording(tmp_path / "calm-then-busy.krec")


def at_the_calm_window(recording: str) -> ReplaySource:
    """The recording replayed at its ten calm records: what b marks as the baseline."""
    return ReplaySource(Recording(recording), window_s=BASELINE_RECORDS, position=BASELINE_END)


def run_compare(source, scenario, size=(180, 50), **app_args) -> None:
    """The app on `source` (build_app's other arguments: a baseline, a pid), `scenario` run."""
    run_app(build_app(source, interval_s=INTERVAL, **app_args), scenario, size=size)


def test_every_pane_has_a_comparison_the_one_diff_reads():
    assert [spec.name for spec in PANES if spec.compare is None] == []


@pytest.mark.parametrize("name", list(EXPECTED))
def test_one_diff_compares_every_pane_a_second_of_each_window(name, windows):
    now, base = windows
    spec = pane(name).compare
    changes = compare_rows(spec, now, base)
    shown = [(c.name, c.status, round(c.now or 0, 6), round(c.base or 0, 6)) for c in changes]
    assert [row[0] for row in shown] == [row[3] for row in EXPECTED[name]]
    for (_, status, got_now, got_base), (now_text, base_text, _, _) in zip(shown, EXPECTED[name]):
        assert status == (NEW if base_text == NEW else GONE if now_text == GONE else "")
        if name == "blockio":  # bytes a second: MiB
            assert got_now == {"4.0M": 4 << 20, "2.0M": 2 << 20}.get(now_text, 0)
            assert got_base == {"1.0M": 1 << 20}.get(base_text, 0)
        else:
            assert got_now == (0 if now_text == GONE else float(now_text))
            assert got_base == (0 if base_text == NEW else float(base_text))


def test_stacks_present_in_both_windows_show_both_figures(windows):
    now, base = windows
    spec = pane("locks").compare
    [stack] = compare_stacks(spec, now, base, ("steady_lock+0x10", "spinlock"))
    assert (stack.now, stack.base, stack.change, stack.status) == (3.0, 1.0, 2.0, "")
    assert stack.frames == ("dd", "do_syscall_64", "steady_lock")


def test_a_gone_row_keeps_its_baseline_stacks(windows):
    now, base = windows
    [stack] = compare_stacks(pane("locks").compare, now, base, ("calm_lock+0x10", "mutex"))
    assert (stack.now, stack.base, stack.status) == (None, 2.0, GONE)


def _row_line(screen: str, cells: tuple[str, ...]) -> bool:
    """A line of the screen holding the row's cells, in order, apart by spaces."""
    pattern = r"\s+".join(re.escape(cell) for cell in cells)
    return any(re.search(pattern, line) for line in screen.splitlines())


async def _compare_last_window_with_the_calm_one(pilot) -> None:
    """b on ten calm records, then the last five busy ones."""
    await pilot.press("b")
    await pilot.pause()
    await pilot.press("w", *str(NOW_RECORDS), "enter", "end")
    await settle(pilot)


@pytest.mark.parametrize("size", [(80, 24), (180, 50)])
@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_pane_and_its_drill_down_compare_with_the_baseline(recording, name, size):
    source = at_the_calm_window(recording)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await _compare_last_window_with_the_calm_one(pilot)
        await pilot.press(str(pane(name).number))
        await pilot.pause()
        seen["rows"] = rows(app, name)
        seen["screen"] = screen_text(app)
        seen["subtitle"] = app.main_screen.pane(name)._subtitle
        await drill_into(pilot, CompareStacksScreen)
        seen["drill"] = screen_text(app)
        seen["drill_screen"] = type(app.screen)
        await pilot.press("escape", "B")
        await pilot.pause()
        seen["after"] = screen_text(app)

    run_compare(source, scenario, size)
    assert seen["rows"] == [list(row) for row in EXPECTED[name]]
    screen = seen["screen"]
    assert "vs baseline 11:51:04-11:51:14, 10s" in screen.splitlines()[0]
    for row in EXPECTED[name]:
        assert _row_line(screen, row), (row, screen)
    subtitle = seen["subtitle"]
    assert subtitle.startswith("by process (m)  " if name in ("blockio", "processes", "waits")
                               else "5s vs 10s baseline")
    assert ("1 new" in subtitle) == any(row[1] == NEW for row in EXPECTED[name])
    assert ("1 gone" in subtitle) == any(row[0] == GONE for row in EXPECTED[name])
    assert subtitle.endswith("B: leave") and subtitle in screen  # whole, at 80 columns too

    assert seen["drill_screen"] is CompareStacksScreen
    drill = seen["drill"]
    first = EXPECTED[name][0]
    title = drill.splitlines()[0]
    assert title.startswith(f"{pane(name).key_label}: {first[3]}   ") and "change +" in title
    # One line (ktop.ui.widgets.fit): the windows compared are the part 80 columns leave out.
    assert ("vs baseline 11:51:04-11:51:14, 10s" in title) == (size[0] > 100), title
    lines = [line.strip("│").rstrip() for line in drill.splitlines()]
    heads = [i for i, line in enumerate(lines) if re.match(r"^\s*[+-]?\d+\.\d+\S*\s", line)]
    got = []
    for i in heads:
        change, _, rest = lines[i].strip().partition("  ")
        frames = []
        for line in lines[i + 1:]:
            if not line.startswith("    "):
                break
            frames.append(line.strip())
        got.append((change, NEW if rest.startswith(NEW) else "", frames))
    assert got == EXPECTED_STACKS[name], drill

    # B: the panes' own views again, the baseline gone from the header.
    assert "vs baseline" not in seen["after"] and "change▼" not in seen["after"]


def test_b_again_moves_the_baseline_and_the_header_says_which(recording):
    source = at_the_calm_window(recording)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await _compare_last_window_with_the_calm_one(pilot)
        await pilot.press("b")  # the busy window is the baseline now: nothing changed
        await pilot.pause()
        seen["header"] = screen_text(app).splitlines()[0]
        seen["changes"] = [row[2] for row in rows(app, "functions")]

    run_compare(source, scenario)
    assert "vs baseline 11:52:39-11:52:44, 5s" in seen["header"]
    assert seen["changes"] == ["0.00", "0.00"]


def test_live_the_mark_is_the_window_then(windows):
    """Live, b marks the window shown; the panes compare each new one with it."""
    now, base = windows
    source = SwitchableSource(base)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("b")
        await pilot.pause()
        source.current = now
        await next_frames(pilot, source)
        seen["rows"] = rows(app, "processes")
        seen["header"] = screen_text(app).splitlines()[0]

    run_compare(source, scenario)
    assert seen["rows"] == [list(row) for row in EXPECTED["processes"]]
    assert f"vs baseline {window_label(base)}" in seen["header"]


def test_live_the_arrows_in_a_compared_drill_down_scroll_and_never_crash(windows):
    """Issue 44: live, b, Enter on a row, then Left crashed the app (the compare drill-down
    offered the replay's timeline keys, and there is no timeline live)."""
    now, base = windows
    source = SwitchableSource(base)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("b")
        await pilot.pause()
        source.current = now
        await next_frames(pilot, source)
        screen = await drill_into(pilot, CompareStacksScreen)
        await pilot.press("left", "right", "left_square_bracket", "home", "end")
        await pilot.pause(0.1)
        seen["screen"], seen["still"] = screen, app.screen
        seen["running"] = app.is_running

    run_compare(source, scenario)
    assert isinstance(seen["screen"], CompareStacksScreen)
    assert seen["still"] is seen["screen"] and seen["running"]


def test_baseline_given_to_the_app_compares_from_the_first_frame(windows):
    now, base = windows
    seen = {}

    async def scenario(pilot):
        seen["rows"] = rows(pilot.app, "locks")

    run_compare(SwitchableSource(now), scenario, baseline=baseline_of(base, "x.json"))
    assert seen["rows"] == [list(row) for row in EXPECTED["locks"]]


def test_hostile_names_in_the_compare_view_are_shown_as_text(recorded_snapshot):
    """Rows gone since the baseline keep their names, escaped as every pane's are."""
    import dataclasses  # noqa: PLC0415

    now = dataclasses.replace(recorded_snapshot, blockio=dataclasses.replace(
        recorded_snapshot.blockio, processes=()))
    seen = {}

    async def scenario(pilot):
        await pilot.press("3", "z")
        await pilot.pause()
        seen["by command"] = screen_text(pilot.app)
        await pilot.press("m")
        await pilot.pause()
        seen["by process"] = screen_text(pilot.app)

    run_compare(SwitchableSource(now), scenario,
                baseline=baseline_of(recorded_snapshot, "\x1b[2Jbase.json"))
    # Another file: its processes are matched by command at first, m by process.
    screen = seen["by command"]
    assert " \\x1b[2J evil vda W" in screen and " [bold]red[/] vda R" in screen
    assert "4242" not in screen
    assert "of \\x1b[2Jbase.json" in screen.splitlines()[0]
    assert "\x1b" not in screen
    screen = seen["by process"]
    assert "4242 \\x1b[2J evil vda W" in screen and "4243 [bold]red[/] vda R" in screen
    assert "\x1b" not in screen


def test_a_baseline_without_a_panes_data_says_so_rather_than_all_new(windows):
    """A file from before the waits pane: its rows would all read new."""
    import dataclasses  # noqa: PLC0415

    now, base = windows
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        seen["rows"] = rows(app, "waits")
        seen["screen"] = screen_text(app)
        seen["locks"] = rows(app, "locks")

    run_compare(SwitchableSource(now), scenario,
                baseline=baseline_of(dataclasses.replace(base, waits=None)))
    assert seen["rows"] == []
    assert "the baseline holds no waits data" in seen["screen"]
    assert seen["locks"] == [list(row) for row in EXPECTED["locks"]]


def test_m_matches_processes_by_command_and_drills_into_all_of_them(recording):
    """The panes that list processes compare by pid, or (m) by command: what two boots share."""
    source = at_the_calm_window(recording)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await _compare_last_window_with_the_calm_one(pilot)
        await pilot.press("4", "m")
        await pilot.pause()
        seen["processes"] = rows(app, "processes")
        await pilot.press("2", "m")
        seen["notes"] = [str(n.message) for n in app._notifications]
        await pilot.press("5", "m")
        await pilot.pause()
        seen["waits"] = rows(app, "waits")
        await drill_into(pilot, CompareStacksScreen)
        seen["drill"] = screen_text(app)
        await pilot.press("escape", "4", "b")  # a new baseline matches as its own kind does
        await pilot.pause()
        seen["again"] = [row[3] for row in rows(app, "processes")]

    run_compare(source, scenario)
    assert seen["again"] == ["100 dd", "200 tar"]
    assert seen["processes"] == [["50.00", "10.00", "+40.00", "dd"],
                                 ["20.00", NEW, "+20.00", "tar"],
                                 [GONE, "5.00", "-5.00", "calmd"]]
    assert any("rows matched by name" in note for note in seen["notes"])  # locks: no processes
    assert seen["waits"] == [["50.00", "10.00", "+40.00", "dd"], ["10.00", NEW, "+10.00", "tar"]]
    assert "Waits: dd   wait% now 50.00%, baseline 10.00%, change +40.00%" in seen["drill"]
    assert "+20.00%  new" in seen["drill"]


def test_the_compare_title_names_what_is_compared_and_b_gives_the_view_back(windows):
    """Hot functions compare kernel functions (Self): a user view's title would say otherwise."""
    now, base = windows
    seen = []

    async def scenario(pilot):
        functions = pilot.app.main_screen.pane("functions")
        await pilot.press("v")  # the user-space view
        await pilot.pause()
        seen.append(str(functions.border_title))
        await pilot.press("b")
        await pilot.pause()
        seen.append(str(functions.border_title))
        await pilot.press("B")
        await pilot.pause()
        seen.append((str(functions.border_title), functions.view, functions.comparing))

    run_compare(SwitchableSource(now), scenario)
    assert seen == ["1 Hot user functions", "1 Hot kernel functions",
                    ("1 Hot user functions", "user", False)]


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_v_reaches_every_view_with_a_baseline_and_m_matches_by_pid_or_command(
        recorded_snapshot, size):
    """With a baseline `v` switched pid/command matching, so the block pane's disks view
    (iostat -x) could not be reached. v cycles the views as ever, the compare table first;
    matching is m, in the footer and the help."""
    import dataclasses  # noqa: PLC0415

    from ktop.model import DiskIo, IostatProfile  # noqa: PLC0415

    now = dataclasses.replace(recorded_snapshot, iostat=IostatProfile(
        3.0, (DiskIo("vda", 254, 0, reads=30, writes=90, busy_ms=1200),)))
    seen: dict[str, object] = {}

    async def scenario(pilot):
        blockio = pilot.app.main_screen.pane("blockio")
        await pilot.press("3", "z")
        await pilot.pause()
        seen["first"] = (blockio.comparing, str(blockio.border_subtitle))
        seen["footer"] = screen_text(pilot.app).splitlines()[-1]
        await pilot.press("m")
        await pilot.pause()
        seen["matched"] = str(blockio.border_subtitle)
        views = []
        for _ in range(len(blockio.VIEWS) + 1):
            await pilot.press("v")
            await pilot.pause()
            views.append("compare" if blockio.comparing else blockio.view)
            if blockio.view == "disks" and not blockio.comparing:
                seen["disks"] = screen_text(pilot.app)
        seen["views"] = views
        await pilot.press("question_mark")
        pages = []
        for _ in range(4):  # 80x24 scrolls it
            await pilot.pause()
            pages.append(screen_text(pilot.app))
            await pilot.press("pagedown")
        seen["help"] = "\n".join(pages)
        await pilot.press("escape", "B")
        await pilot.pause()
        seen["footer after"] = screen_text(pilot.app).splitlines()[-1]

    run_compare(SwitchableSource(now), scenario, size,
                baseline=baseline_of(recorded_snapshot, "base.json"))
    assert seen["first"][0] and seen["first"][1].startswith("by command (m)")  # another file
    assert seen["matched"].startswith("by process (m)")
    assert seen["views"] == ["processes", "requests", "histogram", "commands", "disks", "compare"]
    disks = seen["disks"]
    assert "r/s" in disks and re.search(r"^.*\bvda\b", disks, re.M), disks
    assert "vs baseline" in disks.splitlines()[0]  # the baseline is still set
    assert " v View  m Match" in seen["footer"], seen["footer"]
    assert " m " not in seen["footer after"]  # no baseline: nothing to match
    assert re.search(r"│ +m +compared rows of processes: matched by", seen["help"]), seen["help"]


def test_a_filtered_callers_waits_are_the_same_in_the_pane_and_its_compare_view(
        recorded_snapshot):
    """Under --pid the pane and the compare view each summed a caller's waits by the tasks
    shown, in two copies: the pane kept the caller's own figures when every task it lists
    was shown, though they need not be all its waits (a caller whose tasks were left out
    of a file). One function (ktop.lockviews.caller_waits_of) serves both now."""
    import dataclasses  # noqa: PLC0415

    from ktop.model import LockTask  # noqa: PLC0415
    from ktop.ui.widgets.pane import Display  # noqa: PLC0415

    locks = recorded_snapshot.locks
    caller = dataclasses.replace(locks.callers[0], contended=812, tasks=(
        LockTask(4243, "red", 500, 30_000_000, 1_000_000),))  # 312 waits by tasks not listed
    snapshot = dataclasses.replace(recorded_snapshot, locks=dataclasses.replace(
        locks, callers=(caller, *locks.callers[1:])))
    compared = pane("locks").compare.rows(snapshot, Display(pid=4243).shows)
    seen = {}

    async def scenario(pilot):
        await pilot.press("2")
        await pilot.pause()
        seen["rows"] = rows(pilot.app, "locks")

    from ktop.engine import RecordedSource  # noqa: PLC0415

    run_compare(RecordedSource([snapshot]), scenario, pid=4243)
    assert [c.contended for c in compared] == [500]
    assert [row[0] for row in seen["rows"]] == ["500"], seen["rows"]  # pid 4243's, not 812


def test_a_baseline_recording_loads_on_the_screen_its_progress_in_the_header(recording):
    """Issue 44: --baseline BIG.krec merged before the screen opened, with no word of it (5
    minutes of a blank terminal). The screen opens at once; its header counts the records
    merged; then every pane compares."""
    import threading  # noqa: PLC0415

    from ktop.compare import load_baseline  # noqa: PLC0415

    halfway = threading.Event()

    def loader(say, progress):
        def held_at_ten(done, total):
            progress(done, total)
            if done == 10:
                halfway.wait(20)
        return load_baseline(recording, None, 5.0, say, held_at_ten)

    source = ReplaySource(Recording(recording), window_s=NOW_RECORDS)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        for _ in range(200):
            if "10/120" in screen_text(app).splitlines()[0]:
                break
            await pilot.pause(0.02)
        seen["loading"] = screen_text(app).splitlines()[0]
        seen["rows"] = rows(app, "functions")
        halfway.set()
        for _ in range(200):
            if "vs baseline" in screen_text(app).splitlines()[0]:
                break
            await pilot.pause(0.02)
        seen["loaded"] = screen_text(app).splitlines()[0]
        seen["compared"] = rows(app, "functions")

    try:
        run_compare(source, scenario, baseline_loader=loader)
    finally:
        halfway.set()
    assert "loading the baseline: 10/120 records" in seen["loading"], seen["loading"]
    assert [row[0] for row in seen["rows"]][:1] != ["new"]  # the panes' own view meanwhile
    assert "vs baseline 11:50:44-11:52:44, 120s of calm-then-busy.krec" in seen["loaded"]
    assert "loading" not in seen["loaded"]
    assert any(row[2] == "+20.00" for row in seen["compared"]), seen["compared"]


def test_q_while_the_baseline_loads_leaves_at_once_and_a_bad_one_is_one_line(recording):
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    from ktop.compare import BaselineError, load_baseline  # noqa: PLC0415

    calls = []
    held = threading.Event()

    def loader(say, progress):
        def slow(done, total):
            calls.append(done)
            progress(done, total)
            held.wait(0.05)
        return load_baseline(recording, None, 5.0, say, slow)

    source = ReplaySource(Recording(recording), window_s=NOW_RECORDS)
    seen = {}

    async def scenario(pilot):
        await pilot.pause(0.3)
        started = time.monotonic()
        await pilot.press("q")
        seen["left_in"] = time.monotonic() - started

    run_compare(source, scenario, baseline_loader=loader)
    time.sleep(0.3)
    assert seen["left_in"] < 2.0
    assert 0 < len(calls) < 60  # it stopped merging, 120 records to go at 20 a second

    def refused(say, progress):
        raise BaselineError("--baseline x.krec: its records together hold more than ...")

    app = build_app(ReplaySource(Recording(recording)), interval_s=INTERVAL,
                    baseline_loader=refused)

    async def wait_for_exit(pilot):
        for _ in range(100):
            if not app.is_running:
                break
            await pilot.pause(0.02)

    run_app(app, wait_for_exit)
    assert app.baseline_error.startswith("--baseline x.krec: its records together")
    assert app.return_code == 2
