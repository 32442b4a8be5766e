"""The app on recorded data, driven with Textual's Pilot: what a user sees and what keys do."""

from __future__ import annotations

import asyncio
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from conftest import PANE_TITLES, SCREEN_SIZE, run_app, wait_for_data

from ktop.engine import RecordedSource
from ktop.model import EXITED_PID
from ktop.stacktree import hot_functions
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.help import HelpScreen

PANES = ("functions", "locks", "blockio", "processes")
HOSTILE = ("\x1b[2J evil", "[bold]red[/]", "[/]")


INTERVAL = 0.2  # a frame every 0.2 s: fast enough to wait for, slow enough to leave keys room


class SwitchableSource:
    """Hands the app whatever snapshot the test sets, like a live source between frames."""

    live = True
    started_at = 0.0  # as RecordedSource: the first frame at once
    timeline = None  # live: nothing to move through

    def __init__(self, snapshot) -> None:
        self.current = snapshot
        self.cumulative = False
        self.frames = 0

    def start(self, wait: bool = True, patient: bool = False) -> None:
        pass

    def hurry_loading(self) -> None:
        pass

    def collect(self):
        self.frames += 1
        return self.current

    def close(self) -> None:
        pass


def app_for(snapshot, **kwargs):
    return build_app(RecordedSource([snapshot]), interval_s=INTERVAL, **kwargs)


def rows(app, pane: str) -> list[list[str]]:
    """The focused view's rows as shown, top to bottom, one string per cell."""
    table = app.main_screen.pane(pane).table
    return [[cell.text for cell in table.get_row_at(i)] for i in range(table.row_count)]


def column(app, pane: str, key: str) -> list[str]:
    table = app.main_screen.pane(pane).table
    index = [c.key for c in table.table_columns].index(key)
    return [row[index] for row in rows(app, pane)]


async def next_frames(pilot, source: SwitchableSource, frames: int = 2) -> None:
    """Wait until the source has handed over `frames` more snapshots (the first of them may
    have been collected before the test changed it)."""
    target = source.frames + frames
    for _ in range(500):
        if source.frames >= target:
            break
        await pilot.pause(0.01)
    assert source.frames >= target, "the collect loop stalled"
    await pilot.pause()


def test_every_pane_renders_rows_from_the_snapshot(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        for pane in PANES:
            seen[pane] = rows(pilot.app, pane)
        seen["screen"] = screen_text(pilot.app)

    run_app(app_for(recorded_snapshot), scenario)
    cpu = recorded_snapshot.cpu
    # The file predates Children: they (and the callers they list) come from its stacks.
    functions = hot_functions(cpu.stacks, cpu.sample_hz * cpu.window_s * cpu.cpus)
    visible_functions = [f for f in functions if not f.idle]
    assert len(seen["functions"]) == len(visible_functions)
    assert len(seen["locks"]) == len(recorded_snapshot.locks.callers)
    assert len(seen["blockio"]) == len(recorded_snapshot.blockio.processes)
    assert len(seen["processes"]) == len(recorded_snapshot.processes)
    screen = seen["screen"]
    for title in PANE_TITLES:
        assert title in screen
    top = max(visible_functions, key=lambda f: f.samples)
    assert seen["functions"][0][3] == top.symbol  # Children, Self, Samples, Symbol
    assert f"{top.percent:.2f}%" in screen
    assert recorded_snapshot.locks.callers[0].caller in screen
    assert "jbd2/vda-8" in screen
    assert "dd if=/dev/urandom" in screen


def test_header_shows_the_machine_and_the_sample_accounting(recorded_snapshot):
    cpu = recorded_snapshot.cpu
    screen = {}

    async def scenario(pilot):
        screen["text"] = screen_text(pilot.app)

    run_app(app_for(recorded_snapshot), scenario)
    header = "\n".join(screen["text"].splitlines()[:3])
    assert recorded_snapshot.hostname in header and recorded_snapshot.kernel in header
    assert recorded_snapshot.ktop_version in header
    assert f"{cpu.cpus} CPUs" in header and f"{cpu.sample_hz} Hz" in header
    assert "11:50:45" in header  # taken_at in UTC, as conftest pins the zone
    assert f"samples {cpu.total_samples}/{cpu.expected_samples}" in header
    assert "lost 1 (L lists)" in header  # every loss counted; L lists each
    assert recorded_snapshot.headers in header


def test_processes_are_sorted_by_cpu_descending(recorded_snapshot):
    shown = {}

    async def scenario(pilot):
        shown["cpu"] = [float(v) for v in column(pilot.app, "processes", "cpu")]

    run_app(app_for(recorded_snapshot), scenario)
    assert shown["cpu"] == sorted(shown["cpu"], reverse=True)
    assert shown["cpu"][0] == max(p.cpu_percent for p in recorded_snapshot.processes)


def test_tab_shift_tab_and_digits_move_between_panes(recorded_snapshot):
    visits = []

    async def scenario(pilot):
        app = pilot.app
        visits.append(app.main_screen.focused_pane().PANE)
        for key in ("tab", "tab", "tab", "tab", "tab", "tab", "tab", "shift+tab", "4", "2",
                    "1", "3", "5", "6", "7"):
            await pilot.press(key)
            visits.append(app.main_screen.focused_pane().PANE)

    run_app(app_for(recorded_snapshot), scenario)
    assert visits == [
        "functions", "locks", "blockio", "processes", "waits", "endings", "syscalls",
        "functions", "syscalls", "processes", "locks", "functions", "blockio", "waits",
        "endings", "syscalls",
    ]


def test_i_toggles_idle_rows(recorded_snapshot):
    cpu = recorded_snapshot.cpu
    functions = hot_functions(cpu.stacks, cpu.sample_hz * cpu.window_s * cpu.cpus)
    idle = [f.symbol for f in functions if f.idle]  # idle leaves, and callers only idling passed
    counts, symbols = [], []

    async def scenario(pilot):
        for _ in range(3):
            counts.append(pilot.app.main_screen.pane("functions").table.row_count)
            symbols.append(set(column(pilot.app, "functions", "symbol")))
            await pilot.press("i")
            await pilot.pause()

    run_app(app_for(recorded_snapshot), scenario)
    assert {"pv_native_safe_halt", "poll_idle"} <= set(idle)
    assert counts[1] == counts[0] + len(idle) == counts[2] + len(idle)
    assert not set(idle) & symbols[0]
    assert set(idle) <= symbols[1]
    assert not set(idle) & symbols[2]


def test_idle_flag_on_the_command_line_starts_with_idle_rows(recorded_snapshot):
    shown = {}

    async def scenario(pilot):
        shown["symbols"] = set(column(pilot.app, "functions", "symbol"))

    run_app(app_for(recorded_snapshot, show_idle=True), scenario)
    assert "pv_native_safe_halt" in shown["symbols"]


def test_z_zooms_the_focused_pane_to_the_full_screen(recorded_snapshot):
    states = []

    def state(app):
        return {p: (app.main_screen.pane(p).display, app.main_screen.pane(p).size.width) for p in PANES}

    async def scenario(pilot):
        app = pilot.app
        states.append(state(app))
        await pilot.press("2", "z")
        await pilot.pause()
        states.append(state(app))
        await pilot.press("4")  # moving to another pane while zoomed zooms that one
        await pilot.pause()
        states.append(state(app))
        await pilot.press("z")
        await pilot.pause()
        states.append(state(app))

    run_app(app_for(recorded_snapshot), scenario)
    normal, zoomed, switched, back = states
    width = SCREEN_SIZE[0]
    assert all(shown and w <= width // 2 for shown, w in normal.values())
    half = max(w for _, w in normal.values())
    assert zoomed["locks"][0] and zoomed["locks"][1] >= 2 * half - 2
    assert not any(zoomed[p][0] for p in PANES if p != "locks")
    assert switched["processes"] == zoomed["locks"] and not switched["locks"][0]
    assert back == normal


def test_question_mark_opens_help_listing_the_keys(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        seen["screen"] = pilot.app.screen
        seen["text"] = screen_text(pilot.app)
        await pilot.press("escape")
        await pilot.pause()
        seen["after"] = pilot.app.screen

    run_app(app_for(recorded_snapshot), scenario)
    assert isinstance(seen["screen"], HelpScreen)
    help_lines = [line for line in seen["text"].splitlines() if "│" in line]
    text = "\n".join(help_lines)
    # The keys the issue and the design promise.
    for key in ("q", "? F1", "Tab", "Shift-Tab", "1", "2", "3", "4", "space", "i", "z", "/",
                "<", ">", "s", "v", "PgUp"):
        assert any(f" {key} " in f" {line} " for line in help_lines), f"help lacks {key!r}"
    assert "Quit" in text and "Filter" in text and "Zoom" in text
    assert not isinstance(seen["after"], HelpScreen)


def test_v_switches_views_in_the_locks_pane(recorded_snapshot):
    locks = recorded_snapshot.locks
    views = []

    async def scenario(pilot):
        await pilot.press("2")
        for _ in range(7):
            pane = pilot.app.main_screen.pane("locks")
            views.append((pane.view, rows(pilot.app, "locks"), pane.border_subtitle))
            await pilot.press("v")
            await pilot.pause()

    run_app(app_for(recorded_snapshot), scenario)
    (_, callers, sub1), (_, addresses, _), (_, tasks, _), *_ = views
    assert [v[0] for v in views] == ["callers", "addresses", "tasks", "commands", "owners",
                                     "names", "callers"]
    assert {r[-1] for r in callers} == {c.caller for c in locks.callers}
    assert any("rename_lock" in r[-1] for r in addresses)
    assert {r[-1] for r in tasks} == {t.comm for t in locks.tasks}
    assert "callers" in sub1


def test_v_switches_views_in_the_block_io_pane(recorded_snapshot):
    block = recorded_snapshot.blockio
    views = []

    async def scenario(pilot):
        await pilot.press("3")
        for _ in range(3):
            views.append((pilot.app.main_screen.pane("blockio").view, rows(pilot.app, "blockio")))
            await pilot.press("v")
            await pilot.pause()

    run_app(app_for(recorded_snapshot), scenario)
    (v1, processes), (v2, requests), (v3, histogram) = views
    assert [v1, v2, v3] == ["processes", "requests", "histogram"]
    assert len(processes) == len(block.processes)
    assert {r[1] for r in requests} == {r.comm for r in block.requests}
    assert len(histogram) == sum(len(d.hist_us) for d in block.disks)


def test_slash_filter_narrows_the_focused_pane(recorded_snapshot):
    chacha = [f.symbol for f in recorded_snapshot.cpu.functions if "chacha" in f.symbol and not f.idle]
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        seen["before"] = app.main_screen.pane("functions").table.row_count
        await pilot.press("slash", *"chacha", "enter")
        await pilot.pause()
        seen["symbols"] = column(app, "functions", "symbol")
        seen["subtitle"] = app.main_screen.pane("functions").border_subtitle
        seen["processes"] = app.main_screen.pane("processes").table.row_count
        seen["focus"] = app.main_screen.focused_pane().PANE
        await pilot.press("slash", "escape")
        await pilot.pause()
        seen["cleared"] = app.main_screen.pane("functions").table.row_count

    run_app(app_for(recorded_snapshot), scenario)
    assert len(chacha) >= 2
    assert sorted(seen["symbols"]) == sorted(chacha)
    assert "filter: chacha" in seen["subtitle"]
    assert seen["processes"] == len(recorded_snapshot.processes)
    assert seen["focus"] == "functions"
    assert seen["cleared"] == seen["before"]


def test_sort_keys_change_the_order(recorded_snapshot):
    seen = []

    async def scenario(pilot):
        for key in ("less_than_sign", "greater_than_sign", "greater_than_sign"):
            await pilot.press(key)
            await pilot.pause()
            seen.append(column(pilot.app, "functions", "symbol"))

    run_app(app_for(recorded_snapshot), scenario)
    by_children, _by_self, by_symbol = seen
    cpu = recorded_snapshot.cpu
    visible = [f for f in hot_functions(cpu.stacks, cpu.sample_hz * cpu.window_s * cpu.cpus)
               if not f.idle]
    # Children (left of Self): a system call's entry, which every stack below it passed.
    assert by_children[0] == max(visible, key=lambda f: f.children).symbol
    assert by_children[0].startswith(("entry_SYSCALL", "do_syscall"))
    # Samples is shown in wide panes only: > skips it.
    assert by_symbol == sorted(by_symbol, key=str.lower)


def test_hostile_names_are_shown_escaped_and_never_as_markup(recorded_snapshot):
    screens = []

    async def scenario(pilot):
        screens.append(screen_text(pilot.app))
        # zoomed processes (whole command lines), lock tasks, block I/O requests
        for keys in (("4", "z"), ("z", "2", "v", "v"), ("3", "v")):
            await pilot.press(*keys)
            await pilot.pause()
            screens.append(screen_text(pilot.app))

    run_app(app_for(recorded_snapshot), scenario)
    for text in screens:
        assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text
    main, zoomed, tasks_and_requests = screens[0], screens[1], screens[3]
    assert "\\x1b[2J evil" in main  # the processes pane
    assert "[bold]red[/]" in main  # literally, brackets and all
    assert "rtl\\u202etxt.exe" in main
    assert "\\x1b[2J evil --title \\x9b31mred" in zoomed  # the whole command line
    assert "[bold]red[/] [link=https://example.invalid]click[/link]" in zoomed
    assert any(re.search(r"\b4244 +nobody .*\[/\]", line) for line in main.splitlines())
    for name in ("\\x1b[2J evil", "[bold]red[/]", "[/]"):
        assert name in tasks_and_requests


def test_exited_processes_folded_in_the_totals_read_exited(recorded_snapshot):
    locks, block = recorded_snapshot.locks, recorded_snapshot.blockio
    snapshot = replace(
        recorded_snapshot,
        locks=replace(locks, tasks=(replace(locks.tasks[0], pid=EXITED_PID, comm="rm"),)),
        blockio=replace(block, processes=(replace(block.processes[0], pid=EXITED_PID, comm="cp"),)),
    )
    seen = {}

    async def scenario(pilot):
        for pane, keys in (("locks", ("2", "v", "v")), ("blockio", ("3",))):
            await pilot.press(*keys)
            await pilot.pause()
            seen[pane] = screen_text(pilot.app)

    run_app(app_for(snapshot), scenario)
    assert re.search(r"exited +rm", seen["locks"])
    assert re.search(r"exited +cp", seen["blockio"])
    assert "-1 " not in seen["locks"] + seen["blockio"]


def test_unavailable_panes_say_why_and_the_rest_still_work(recorded_snapshot):
    reasons = {
        "locks": "kernel lacks tracepoint lock:contention_begin (Linux >= 5.19)",
        "blockio": "needs root (or CAP_BPF and CAP_PERFMON): run `sudo ktop`",
    }
    snapshot = replace(recorded_snapshot, locks=None, blockio=None, unavailable=reasons)
    seen = {}

    async def scenario(pilot):
        seen["text"] = screen_text(pilot.app)
        seen["functions"] = pilot.app.main_screen.pane("functions").table.row_count
        seen["processes"] = pilot.app.main_screen.pane("processes").table.row_count

    run_app(app_for(snapshot), scenario)
    flat = " ".join(seen["text"].split())
    assert "unavailable: kernel lacks tracepoint lock:contention_begin" in flat
    assert "unavailable: needs root" in flat
    assert seen["functions"] > 0 and seen["processes"] == len(snapshot.processes)


def test_no_cpu_sampling_is_said_in_the_header(recorded_snapshot):
    snapshot = replace(
        recorded_snapshot, cpu=None,
        unavailable={"functions": "needs root (or CAP_BPF and CAP_PERFMON): run `sudo ktop`"},
    )
    seen = {}

    async def scenario(pilot):
        seen["text"] = screen_text(pilot.app)

    run_app(app_for(snapshot), scenario)
    assert "CPU sampling unavailable" in seen["text"]
    assert "unavailable: needs root" in seen["text"]


def test_a_process_that_exits_is_gone_from_the_next_frame(recorded_snapshot):
    source = SwitchableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("4")
        pids = column(app, "processes", "pid")
        for _ in range(pids.index("4244")):  # put the cursor on the process that will exit
            await pilot.press("down")
        seen["selected"] = app.main_screen.pane("processes").table.selected_key
        source.current = replace(
            recorded_snapshot, processes=tuple(p for p in recorded_snapshot.processes if p.pid != 4244)
        )
        await next_frames(pilot, source)
        seen["pids"] = column(app, "processes", "pid")
        seen["cursor"] = app.main_screen.pane("processes").table.selected_key

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert seen["selected"] == "4244"
    assert "4244" not in seen["pids"]
    assert len(seen["pids"]) == len(recorded_snapshot.processes) - 1
    assert seen["cursor"] in seen["pids"]


def test_a_hidden_tab_makes_no_rows_and_shows_the_newest_frame_when_chosen(recorded_snapshot):
    """On a small screen one pane shows at a time: the others make their rows only when
    chosen (rows nobody sees were most of a refresh's work), then from the newest frame."""
    from ktop.panes.processes.widget import ProcessesPane

    source = SwitchableSource(recorded_snapshot)
    made = {"processes": 0}
    real = ProcessesPane.rows

    def counted(self, snapshot, display):
        made["processes"] += 1
        return real(self, snapshot, display)

    changed = replace(recorded_snapshot, processes=recorded_snapshot.processes[:3])
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.pause()
        seen["before"] = made["processes"]
        source.current = changed
        await next_frames(pilot, source, 3)
        seen["hidden"] = made["processes"]
        await pilot.press("4")
        await pilot.pause()
        seen["rows"] = app.main_screen.pane("processes").table.row_count
        seen["text"] = screen_text(app)
        await next_frames(pilot, source)
        seen["shown"] = made["processes"]

    ProcessesPane.rows = counted
    try:
        run_app(build_app(source, interval_s=INTERVAL), scenario, size=(80, 24))
    finally:
        ProcessesPane.rows = real
    assert seen["hidden"] == seen["before"], "a hidden pane made rows"
    assert seen["rows"] == 3, "the chosen tab shows the newest frame at once"
    assert "PID" in seen["text"]
    assert seen["shown"] > seen["hidden"] + 1  # once chosen, and each frame after


def test_space_pauses_the_screen(recorded_snapshot):
    source = SwitchableSource(recorded_snapshot)
    changed = replace(recorded_snapshot, processes=recorded_snapshot.processes[:3])
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("space")
        source.current = changed
        await next_frames(pilot, source)
        seen["paused_header"] = screen_text(app).splitlines()[0]
        seen["paused_rows"] = app.main_screen.pane("processes").table.row_count
        await pilot.press("space")
        await next_frames(pilot, source)
        seen["resumed_header"] = screen_text(app).splitlines()[0]
        seen["resumed_rows"] = app.main_screen.pane("processes").table.row_count

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert "PAUSED" in seen["paused_header"]
    assert seen["paused_rows"] == len(recorded_snapshot.processes)
    assert "PAUSED" not in seen["resumed_header"]
    assert seen["resumed_rows"] == 3


def test_c_switches_between_window_and_cumulative(recorded_snapshot):
    source = SwitchableSource(recorded_snapshot)
    seen = []

    async def scenario(pilot):
        for _ in range(2):
            await pilot.press("c")
            await pilot.pause(0.1)
            seen.append((source.cumulative, toasts(screen_text(pilot.app))))

    run_app(build_app(source, interval_s=INTERVAL), scenario, notifications=True)
    (on, on_toast), (off, off_toast) = seen
    assert on and not off
    assert "cumulative since start" in on_toast
    assert "window of the last seconds" in off_toast


def test_c_on_recorded_data_says_the_window_is_fixed(recorded_snapshot):
    source = RecordedSource([recorded_snapshot])
    seen = {}

    async def scenario(pilot):
        await pilot.press("c")
        await pilot.pause(0.1)
        seen["toast"] = toasts(screen_text(pilot.app))

    run_app(build_app(source, interval_s=INTERVAL), scenario, notifications=True)
    assert not source.cumulative
    assert "recorded data" in seen["toast"]


def toasts(screen: str) -> str:
    """The text of the notifications on the screen (Textual draws them with a left bar)."""
    return " ".join(
        line.split("\u258c", 1)[1].split("\u2502")[0].strip()  # up to the pane border behind
        for line in screen.splitlines()
        if "\u258c" in line
    )


def test_s_saves_an_svg_and_says_where(recorded_snapshot, tmp_path):
    seen = {}

    async def scenario(pilot):
        await pilot.press("s")
        await pilot.pause(0.2)
        seen["toast"] = toasts(screen_text(pilot.app))

    app = build_app(RecordedSource([recorded_snapshot]), interval_s=INTERVAL, save_dir=str(tmp_path))
    run_app(app, scenario, notifications=True)
    (saved,) = list(tmp_path.iterdir())
    assert saved.suffix == ".svg"
    words = " ".join("".join(ET.parse(saved).getroot().itertext()).replace("\xa0", " ").split())
    assert "Hot kernel functions" in words
    assert f"saved{saved}" in seen["toast"].replace(" ", "")


def test_q_quits(recorded_snapshot):
    app = app_for(recorded_snapshot)

    async def scenario(pilot):
        await pilot.press("q")
        await pilot.pause()

    run_app(app, scenario)
    assert not app.is_running
    assert app.return_code == 0


@pytest.mark.parametrize("size", [(80, 24), (40, 10)])
def test_small_terminals_do_not_crash(recorded_snapshot, size):
    seen = {}

    async def scenario(pilot):
        await pilot.press("tab", "z", "i", "v")
        await pilot.pause()
        seen["text"] = screen_text(pilot.app)

    run_app(app_for(recorded_snapshot), scenario, size=size)
    assert len(seen["text"].splitlines()) == size[1]


class LateSource:
    """One frame at once, then frames that arrive just as the app is shutting down (as they
    do under `--snapshot`, whose collect loop keeps running while run_test tears down)."""

    live = True
    started_at = 0.0  # as RecordedSource: the first frame at once
    timeline = None  # live: nothing to move through

    def __init__(self, snapshot) -> None:
        self.snapshot = snapshot
        self.cumulative = False
        self.app = None
        self.calls = 0

    def start(self, wait: bool = True, patient: bool = False) -> None:
        pass

    def hurry_loading(self) -> None:
        pass

    def collect(self):
        self.calls += 1
        while self.calls > 1 and self.app.is_running:
            time.sleep(0.0005)
        return self.snapshot

    def close(self) -> None:
        pass


def test_a_frame_arriving_during_shutdown_does_not_crash(recorded_snapshot):
    """Before the fix this failed 20 runs in 20 (NoMatches HeaderBar): the --snapshot path
    tears the app down under a live collect loop and crashed about one run in three."""
    for _ in range(2):
        source = LateSource(recorded_snapshot)
        app = build_app(source, interval_s=0.001)
        source.app = app

        async def main(app=app):
            async with app.run_test(size=SCREEN_SIZE) as pilot:
                await wait_for_data(pilot)

        asyncio.run(main())


def test_rows_showing_the_same_figure_keep_their_places(recorded_snapshot):
    """0.12% and 0.11% both read 0.1: their swapping every second would be noise (and two
    repainted lines); a figure that really changed still moves its row."""
    first, second = recorded_snapshot.processes[:2]
    rest = recorded_snapshot.processes[2:]

    def with_cpu(a: float, b: float):
        return replace(recorded_snapshot, processes=(
            replace(first, cpu_percent=a), replace(second, cpu_percent=b), *rest))

    source = SwitchableSource(with_cpu(99.12, 99.11))
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await next_frames(pilot, source)
        seen["before"] = column(app, "processes", "pid")[:2]
        source.current = with_cpu(99.11, 99.14)  # both still read 99.1
        await next_frames(pilot, source)
        seen["same figure"] = column(app, "processes", "pid")[:2]
        source.current = with_cpu(99.11, 99.34)  # 99.3 beats 99.1
        await next_frames(pilot, source)
        seen["moved"] = column(app, "processes", "pid")[:2]

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    order = [str(first.pid), str(second.pid)]
    assert seen["before"] == order
    assert seen["same figure"] == order
    assert seen["moved"] == order[::-1]


def many_processes(snapshot, count: int):
    """The snapshot with `count` processes of distinct CPU figures (pids 10000...)."""
    template = snapshot.processes[0]
    return replace(snapshot, processes=tuple(
        replace(template, pid=10_000 + i, cpu_percent=round(50 - i * 0.1, 1)) for i in range(count)))


def test_the_scrollbar_follows_the_row_count_without_a_full_repaint(recorded_snapshot):
    """A table's scrollbar repaints only the lines where its thumb changed; the screen must
    then look exactly as it does after repainting the whole scrollbar."""
    def with_processes(count: int):
        return many_processes(recorded_snapshot, count)

    source = SwitchableSource(with_processes(300))
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await next_frames(pilot, source)
        seen["300 rows"] = app.export_screenshot()
        for count in (120, 60):
            source.current = with_processes(count)
            await next_frames(pilot, source)
        seen["60 rows"] = app.export_screenshot()
        app.main_screen.pane("processes").table.vertical_scrollbar.refresh()
        await pilot.pause()
        seen["repainted"] = app.export_screenshot()

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    # Compared as booleans: pytest's diff of two whole-screen SVGs takes minutes.
    thumb_grew = seen["60 rows"] != seen["300 rows"]
    no_stale_line = seen["60 rows"] == seen["repainted"]
    assert thumb_grew
    assert no_stale_line, "the scrollbar kept lines of the old thumb"


class StartedSource(SwitchableSource):
    """A live source the CLI started before Textual loaded (its first interval is ready)."""

    def __init__(self, snapshot) -> None:
        super().__init__(snapshot)
        self.started_at = time.monotonic() - 0.5
        self.collected_at: list[float] = []

    def collect(self):
        self.collected_at.append(time.monotonic())
        return super().collect()


def test_a_source_started_before_the_screen_fills_its_first_frame(recorded_snapshot):
    """The first frame the terminal is sent shows the processes, not empty panes with the
    data a frame later; the next collect comes a whole interval after, not a moment later
    (a CPU% over a few ms)."""
    from painted import PaintedScreen

    source = StartedSource(recorded_snapshot)
    top = max(recorded_snapshot.processes, key=lambda p: p.cpu_percent)
    seen = {}

    async def main():
        app = build_app(source, interval_s=1.0)
        painted = PaintedScreen(app, SCREEN_SIZE)
        apply = painted._apply

        def first_frame_kept(update) -> None:
            apply(update)
            seen.setdefault("first frame", "\n".join(painted.lines()))

        painted._apply = first_frame_kept
        async with app.run_test(size=SCREEN_SIZE) as pilot:
            await pilot.pause(1.4)
            seen["collected at"] = list(source.collected_at)
            await pilot.exit(None)

    asyncio.run(main())
    assert f"{top.pid} " in seen["first frame"] and top.comm[:8] in seen["first frame"]
    assert "starting collectors" not in seen["first frame"]
    first, second = seen["collected at"][:2]
    assert second - first == pytest.approx(1.0, abs=0.15)


def test_a_table_that_scrolled_keeps_its_scrollbar_when_its_rows_fit_again(recorded_snapshot):
    """A row count going to and fro across the table's height must not show and hide the
    scrollbar each second (each time a layout pass of the whole screen, and a blink)."""
    def with_processes(count: int):
        return many_processes(recorded_snapshot, count)

    source = SwitchableSource(with_processes(300))
    seen = {}

    async def scenario(pilot):
        table = pilot.app.main_screen.pane("processes").table
        await next_frames(pilot, source)
        seen["scrollbar with 300"] = table.show_vertical_scrollbar
        source.current = with_processes(5)
        await next_frames(pilot, source)
        seen["scrollbar with 5"] = table.show_vertical_scrollbar
        seen["pids with 5"] = column(pilot.app, "processes", "pid")
        seen["scroll range"] = table.max_scroll_y

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert seen["scrollbar with 300"] and seen["scrollbar with 5"]
    assert seen["pids with 5"] == [str(10_000 + i) for i in range(5)]
    assert seen["scroll range"] == 1  # one blank line, no more
