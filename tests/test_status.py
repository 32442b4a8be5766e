"""What the screen says about itself: filters and modes on the header's top line at any width,
losses folded with L to list them, counts that agree with the rows, one window label, and a
layout of one pane at a time (with tabs) where four panes cannot be read."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from conftest import PANE_TITLES, run_app
from painted import PaintedScreen
from test_ui import INTERVAL, SwitchableSource, app_for, next_frames, toasts

from ktop.engine import RecordedSource
from ktop.model import CpuTimes
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text

SIZES = [(80, 24), (180, 50)]
REPLAY_NOTE = "replay of /var/tmp/recordings/a-long-directory-name/ktop-20260101-115045.json"


def header(app) -> list[str]:
    return screen_text(app).splitlines()[:3]


def pane_box(app, name: str) -> list[str]:
    """The lines of one pane's box on the screen, border included."""
    region = app.main_screen.pane(name).region
    lines = screen_text(app).splitlines()[region.y:region.bottom]
    return [line[region.x:region.right] for line in lines]


def subtitle(app, name: str) -> str:
    return pane_box(app, name)[-1].strip("─━╰╯┗┛ ")


# ---- item 2: filters and modes where no width cuts them ------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_a_pid_filter_is_said_first_on_the_top_line_uncut(recorded_snapshot, size):
    """Enter on a process: the notice was the end of line 3, after the losses and the headers
    (cut at 80 and at 180 columns behind a replay's path)."""
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("4", "enter")
        await pilot.pause(0.1)
        seen["pid"] = app.main_screen.display_settings.pid
        seen["header"] = header(app)

    app = build_app(RecordedSource([recorded_snapshot]), interval_s=INTERVAL,
                    source_note=REPLAY_NOTE)
    run_app(app, scenario, size=size)
    top = seen["header"][0]
    assert f"pid {seen['pid']} only (Esc: all)" in top
    assert "replay of ktop-20260101-115045.json" in top
    assert len(top.rstrip()) <= size[0]


class RecordableSource(SwitchableSource):
    """A live source `R` can record: each interval is the snapshot itself."""

    def interval_snapshot(self, shown):
        return shown


@pytest.mark.parametrize("size", SIZES)
def test_recording_pause_cgroup_and_a_typed_filter_are_on_the_top_line(
        recorded_snapshot, size, tmp_path):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("R", "4", "slash", *"nobody", "enter", "space")
        await pilot.pause(0.1)
        seen["top"] = header(app)[0]
        await pilot.press("R")

    app = build_app(RecordableSource(recorded_snapshot), interval_s=INTERVAL, cgroup="/",
                    save_dir=str(tmp_path))
    run_app(app, scenario, size=size)
    top = " ".join(seen["top"].split())
    # What is not live or not everything, first; the recording's long file name last.
    assert top.startswith("ktop cgroup / only (Esc: all) 4: /nobody PAUSED ● REC ktop-"), top


def test_the_header_says_its_figures_are_the_machines_while_panes_are_filtered(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        seen["line"] = header(pilot.app)[1]

    run_app(app_for(recorded_snapshot, pid=4243), scenario)
    assert seen["line"].lstrip().startswith("machine kernel")


def test_losses_fold_into_one_total_and_L_lists_each_with_why(recorded_snapshot):
    cpu = replace(recorded_snapshot.cpu, lost={"kstack_collision": 1, "counts_map_full": 2})
    locks = replace(recorded_snapshot.locks, lost={"unpaired_end": 4})
    snapshot = replace(recorded_snapshot, cpu=cpu, locks=locks)
    seen = {}

    async def scenario(pilot):
        seen["header"] = header(pilot.app)
        await pilot.press("L")
        await pilot.pause(0.1)
        box = pilot.app.screen.query_one("#losses-box").region
        seen["list"] = " ".join(line[box.x + 1:box.right - 1] for line in
                                screen_text(pilot.app).splitlines()[box.y:box.bottom])
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["after"] = screen_text(pilot.app)

    run_app(app_for(snapshot), scenario, size=(80, 24))
    assert seen["header"][2].startswith(" lost 7 (L lists)")
    listing = " ".join(seen["list"].split())
    assert "1 kstack_collision in 1 Hot kernel functions a kernel stack's bucket" in listing
    assert ("2 counts_map_full in 1 Hot kernel functions the counts map was full: "
            "the sample is not counted at all") in listing
    assert "4 unpaired_end in 2 Lock contention a lock wait ended whose start was not" in listing
    assert "kstack_collision" not in seen["after"]


def test_pane_counts_add_up_to_the_rows_under_a_pid_filter(recorded_snapshot):
    """pid 4243 waited 500 times at pipe_read+0x4d, where dd waited 312 more: the row and the
    title count the 500, and say the machine's 1489 beside them."""
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        table = app.main_screen.pane("locks").table
        seen["contended"] = [table.get_row_at(i)[0].text for i in range(table.row_count)]
        seen["locks"] = subtitle(app, "locks")
        seen["processes"] = subtitle(app, "processes")

    run_app(app_for(recorded_snapshot, pid=4243), scenario, size=(180, 50))
    assert seen["contended"] == ["500"]
    assert "500 waits of 1489, cumulative 3s" in seen["locks"]
    assert seen["processes"] == "1 of 44 tasks, 1 thr; 1 running"


def test_unfiltered_counts_are_the_rows_too(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        seen["locks"] = subtitle(pilot.app, "locks")
        seen["processes"] = subtitle(pilot.app, "processes")

    run_app(app_for(recorded_snapshot), scenario, size=(180, 50))
    assert seen["locks"].endswith("1489 waits, cumulative 3s")  # the rows add up to all of them
    assert seen["processes"] == "44 tasks, 8 running"


# ---- item 8: a small terminal --------------------------------------------------------------


def column_width(app, pane: str, key: str) -> int | None:
    table = app.main_screen.pane(pane).table
    widths = table._widths(table.size.width)
    return widths[[c.key for c in table.table_columns].index(key)]


def test_80x24_shows_one_pane_at_a_time_under_tabs_and_every_pane_is_reachable(recorded_snapshot):
    seen = []

    async def scenario(pilot):
        app = pilot.app
        for keys in ((), ("2",), ("tab",), ("tab",), ("tab",), ("tab",), ("tab",), ("tab",),
                     ("shift+tab",)):
            await pilot.press(*keys)
            await pilot.pause(0.1)
            text = screen_text(app)
            seen.append((
                [t for t in PANE_TITLES if t in text.split("\n", 4)[4]],
                text.splitlines()[3],
                {name: column_width(app, name, key) for name, key in
                 (("functions", "symbol"), ("locks", "caller"), ("processes", "command"))},
                text,
            ))

    run_app(app_for(recorded_snapshot), scenario, size=(80, 24))
    shown = [titles for titles, *_ in seen]
    assert shown == [["Hot kernel functions"], ["Lock contention"], ["Block I/O"],
                     ["Processes"], ["Waits (off-CPU)"], ["Endings (signals, exits)"], [],
                     ["Hot kernel functions"], []]  # (the syscalls pane: not in PANE_TITLES)
    tabs = seen[0][1]
    # Full labels, or the short ones where they do not fit in 80 columns.
    assert ("1 Hot functions" in tabs or "1 Functions" in tabs) and "5 Waits" in tabs, tabs
    _, _, widths, functions_screen = seen[0]
    assert widths["functions"] >= 20
    assert "_raw_spin_unlock_irqresto" in functions_screen  # 7 characters before
    _, _, widths, locks_screen = seen[1]
    assert widths["locks"] >= 20
    assert "d_alloc_parallel+0x5a" in locks_screen  # the caller column was gone
    assert seen[3][2]["processes"] >= 20


@pytest.mark.parametrize("size", [(100, 30), (160, 50), (180, 50)])
def test_wider_terminals_keep_four_panes_with_readable_names(recorded_snapshot, size):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        seen["text"] = screen_text(app)
        seen["widths"] = [column_width(app, "functions", "symbol"),
                          column_width(app, "locks", "caller"),
                          column_width(app, "processes", "command")]
        seen["cpu"] = column_width(app, "processes", "cpu")

    run_app(app_for(recorded_snapshot), scenario, size=size)
    for title in PANE_TITLES:
        assert title in seen["text"]
    assert "Tab/1-4" not in seen["text"]
    assert min(seen["widths"]) >= 20
    assert "d_alloc_parallel+0x5a" in seen["text"]
    assert seen["cpu"]  # the sort column stays


def test_a_narrow_table_drops_its_least_useful_columns_first(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        seen["labels"] = pane_box(pilot.app, "processes")[1]

    run_app(app_for(recorded_snapshot), scenario, size=(100, 30))
    labels = seen["labels"].split()
    assert labels[:2] == ["│", "PID"] and "CPU%▼" in labels and "COMMAND" in labels
    assert "USER" not in labels and "RES" not in labels  # htop's least read, gone first


def test_growing_the_terminal_goes_back_to_four_panes(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("3")
        seen["small"] = [app.main_screen.pane(n).display for n in ("functions", "locks", "blockio", "processes")]
        await pilot.resize_terminal(160, 50)
        await pilot.pause(0.1)
        seen["large"] = [app.main_screen.pane(n).display for n in ("functions", "locks", "blockio", "processes")]
        seen["tabs"] = app.main_screen.query_one("#tabs").display

    run_app(app_for(recorded_snapshot), scenario, size=(80, 24))
    assert seen["small"] == [False, False, True, False]
    assert seen["large"] == [True] * 4 and not seen["tabs"]


# ---- item 7: header and table --------------------------------------------------------------


def test_the_sort_arrow_moves_in_the_same_frame_as_the_rows(recorded_snapshot):
    """What the terminal was sent, not a fresh render: the header line was not repainted."""
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        painted = PaintedScreen(app, (160, 50))
        app.refresh(layout=True)
        await pilot.press("4")
        await pilot.pause(0.2)
        await pilot.press("greater_than_sign")
        await pilot.pause(0.3)
        box = app.main_screen.pane("processes").region
        seen["painted"] = painted.lines()[box.y + 1][box.x:box.right]
        seen["first"] = app.main_screen.pane("processes").table.get_row_at(0)[0].text
        seen["painted_first"] = painted.lines()[box.y + 2][box.x:box.right]

    run_app(app_for(recorded_snapshot), scenario)
    assert "USR%▼" in seen["painted"] and "CPU%▼" not in seen["painted"]
    assert seen["painted_first"].split()[1] == seen["first"]


def test_a_filter_puts_the_first_match_on_the_top_line(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        table = app.main_screen.pane("processes").table
        await pilot.press("4", "end")
        await pilot.pause(0.1)
        seen["scrolled"] = table.scroll_offset.y
        await pilot.press("slash", "0")
        await pilot.pause(0.1)
        seen["offset"] = table.scroll_offset.y
        seen["first"] = table.get_row_at(0)[0].text
        seen["top_line"] = pane_box(app, "processes")[2]

    run_app(app_for(recorded_snapshot), scenario, size=(160, 50))
    assert seen["scrolled"] > 0
    assert seen["offset"] == 0
    assert seen["top_line"].split()[1] == seen["first"]


def test_one_window_label_in_the_header_panes_and_the_saved_picture(recorded_snapshot, tmp_path):
    """Each collector measures its own window: 5.45 s and 5.55 s read 5s and 6s."""
    snapshot = replace(
        recorded_snapshot,
        duration_s=5.45,
        cpu=replace(recorded_snapshot.cpu, window_s=5.45),
        locks=replace(recorded_snapshot.locks, window_s=5.55),
        blockio=replace(recorded_snapshot.blockio, window_s=5.6),
    )
    seen = {}

    async def scenario(pilot):
        seen["screen"] = screen_text(pilot.app)
        await pilot.press("s")
        await pilot.pause(0.2)

    app = build_app(RecordedSource([snapshot]), interval_s=INTERVAL, save_dir=str(tmp_path))
    run_app(app, scenario, size=(180, 50))
    (saved,) = list(tmp_path.iterdir())
    picture = "".join(ET.parse(saved).getroot().itertext()).replace("\xa0", " ")
    labels = re.findall(r"(?:in|last|cumulative) (\d+s)", seen["screen"])
    assert len(labels) >= 4 and set(labels) == {"5s"}
    assert set(re.findall(r"(?:in|last|cumulative) (\d+s)", picture)) == {"5s"}


async def toast_saying(pilot, words: str, seconds: float = 5.0) -> str:
    """The toasts on the screen once one says `words` (a loaded machine draws late)."""
    for _ in range(int(seconds / 0.05)):
        shown = toasts(screen_text(pilot.app))
        if words in shown:
            break
        await pilot.pause(0.05)
    return shown


def test_v_says_what_each_view_shows(recorded_snapshot):
    seen = []

    async def scenario(pilot):
        await pilot.press("4", "v")
        seen.append(await toast_saying(pilot, "Processes: grouped by cgroup"))
        await pilot.press("v")
        seen.append(await toast_saying(pilot, "Processes: grouped by command"))
        await pilot.press("v")
        seen.append(await toast_saying(pilot, "Processes: one row per process"))
        await pilot.press("1", "v")
        seen.append(await toast_saying(pilot, "Hot functions: user-space functions"))

    run_app(app_for(recorded_snapshot), scenario, size=(180, 50), notifications=True)
    assert "Processes: grouped by cgroup" in seen[0]
    assert "Processes: grouped by command" in seen[1]
    assert "Processes: one row per process" in seen[2]
    assert "Processes: processes" not in " ".join(seen)
    assert "Hot functions: user-space functions" in seen[3]


def test_idle_task_samples_cannot_be_read_as_the_idle_share(recorded_snapshot):
    """"idle 47.0%" beside "idle 0" samples read as a contradiction: the cpu-clock event
    seldom fires on a tickless idle CPU."""
    cpu = replace(recorded_snapshot.cpu, idle_samples=0,
                  times=CpuTimes(user=20.0, kernel=33.0, idle=47.0))
    seen = {}

    async def scenario(pilot):
        seen["line"] = header(pilot.app)[1]

    run_app(app_for(replace(recorded_snapshot, cpu=cpu)), scenario, size=(180, 50))
    line = seen["line"]
    assert "idle  47.0%" in line
    assert "idle-task 0 hidden (i)" in line
    assert not re.search(r"\bidle \d+(?![.\d]*%)", line)


def test_without_cpu_sampling_the_header_keeps_the_proc_stat_split(recorded_snapshot):
    snapshot = replace(recorded_snapshot, cpu=None,
                       unavailable={"functions": "needs root: run sudo ktop"},
                       cpu_times=CpuTimes(user=12.5, kernel=7.5, idle=80.0))
    seen = {}

    async def scenario(pilot):
        seen["line"] = header(pilot.app)[1]

    run_app(app_for(snapshot), scenario, size=(180, 50))
    assert "CPU kernel   7.5%  user  12.5%  idle  80.0%" in seen["line"]
    assert "CPU sampling unavailable" in seen["line"]


def test_a_replay_window_without_cpu_samples_splits_the_cpu_over_all_its_records(
        recorded_snapshot):
    from ktop.aggregate.merge import merge_snapshots as merge

    records = [
        replace(recorded_snapshot, cpu=None, duration_s=1.0,
                cpu_times=CpuTimes(user=10.0, kernel=10.0, idle=80.0, ticks=200)),
        replace(recorded_snapshot, cpu=None, duration_s=1.0,
                cpu_times=CpuTimes(user=30.0, kernel=50.0, idle=20.0, ticks=200)),
    ]
    times = merge(records).cpu_times
    assert (times.user, times.kernel, times.idle) == (20.0, 30.0, 50.0)


def test_the_loss_list_follows_the_header_while_open(recorded_snapshot):
    source = SwitchableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("L")
        await pilot.pause(0.1)
        seen["before"] = " ".join(screen_text(app).split())
        source.current = replace(
            recorded_snapshot, cpu=replace(recorded_snapshot.cpu, lost={"kstack_collision": 9}))
        await next_frames(pilot, source)
        await pilot.pause(0.3)
        seen["header"] = header(app)[2]
        seen["after"] = " ".join(screen_text(app).split())

        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["closed"] = header(app)[2]

    run_app(build_app(source, interval_s=INTERVAL), scenario, size=(180, 50))
    assert "1 kstack_collision" in seen["before"]
    assert "9 kstack_collision" in seen["after"]  # the list follows the data while open
    # The header under it is drawn again when the list changes (not at every refresh: that
    # would repaint both screens each time), so the two never disagree: it read "lost 1"
    # beside a list of 9 before.
    assert seen["header"].startswith(" lost 9 (L lists)")
    assert seen["closed"].startswith(" lost 9 (L lists)")


def test_a_sampler_attached_but_not_yet_drained_is_not_called_unavailable(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        seen["line"] = header(pilot.app)[1]

    run_app(app_for(replace(recorded_snapshot, cpu=None)), scenario, size=(180, 50))
    assert "CPU sampling: waiting for the first samples" in seen["line"]
    assert "unavailable" not in seen["line"]


def test_a_click_on_a_tab_shows_its_pane(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        tabs = app.main_screen.query_one("#tabs")
        text = tabs.tabs_text().plain
        column = text.index("3 Block I/O" if "3 Block I/O" in text else "3 I/O") + 1  # padding
        await pilot.click("#tabs", offset=(column + 2, 0))
        await pilot.pause(0.1)
        seen["shown"] = [n for n in ("functions", "locks", "blockio", "processes", "waits")
                         if app.main_screen.pane(n).display]
        seen["focus"] = app.main_screen.focused_pane().PANE

    run_app(app_for(recorded_snapshot), scenario, size=(80, 24))
    assert seen["shown"] == ["blockio"] and seen["focus"] == "blockio"
