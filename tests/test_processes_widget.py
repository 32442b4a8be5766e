"""The processes pane tells the truth: exited children, USR%, the kernel's task counts, and
every pane's group-by-command view (v), on recorded data."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import run_app

from ktop.engine import RecordedSource
from ktop.model import EXITED_PID, IoProcess, LockTask, ProcessRow, TaskCounts
from ktop.panes.blockio.widget import io_by_command
from ktop.panes.processes.widget import by_command
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.widgets.locks import waits_by_command

SIZES = [(80, 24), (180, 50)]


def process(pid, comm, cpu, usr, sys, cmdline="", **kwargs) -> ProcessRow:
    return ProcessRow(pid=pid, comm=comm, user="root", state=kwargs.pop("state", "S"),
                      cpu_percent=cpu, sys_percent=sys, user_percent=usr,
                      threads=kwargs.pop("threads", 1), rss_bytes=kwargs.pop("rss", 4 << 20),
                      cmdline=cmdline or comm, **kwargs)


CHURN = (
    process(5000, "bash", 11.0, 1.0, 10.0, "bash churn.sh"),
    # what the shell's children burnt and exited in the interval (its cutime/cstime grew)
    process(EXITED_PID, "bash", 88.0, 30.0, 58.0, "bash churn.sh", parent=5000, state="X",
            threads=0, rss=0),
    process(6001, "python3", 40.0, 39.0, 1.0, "python3 a.py", threads=3),
    process(6002, "python3", 20.0, 15.0, 5.0, "python3 b.py", threads=2),
    process(1, "systemd", 0.5, 0.1, 0.4, "/sbin/init"),
)


def churn_snapshot(recorded_snapshot):
    return replace(recorded_snapshot, processes=CHURN,
                   tasks=TaskCounts(running=2, blocked=0, forks_per_s=2950.0))


def rows(app, pane: str) -> list[list[str]]:
    table = app.main_screen.pane(pane).table
    return [[cell.text for cell in table.get_row_at(i)] for i in range(table.row_count)]


def by_key(app, pane: str) -> dict[str, dict[str, str]]:
    """Each shown row as {column key: text}, keyed by the text of its last column."""
    keys = [c.key for c in app.main_screen.pane(pane).table.table_columns]
    return {row[-1]: dict(zip(keys, row)) for row in rows(app, pane)}


@pytest.mark.parametrize("size", SIZES)
def test_exited_children_show_as_a_row_of_their_parent(recorded_snapshot, size):
    """Under fork churn the CPU went to children no refresh ever listed: a row says so,
    named by the shell that ran them, and the pane counts agree with a busy machine."""
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("4", "z")  # at 80 columns the command shows zoomed
        await pilot.pause()
        seen["rows"] = by_key(app, "processes")
        seen["order"] = [row[0] for row in rows(app, "processes")]
        seen["subtitle"] = str(app.main_screen.pane("processes").border_subtitle)
        seen["screen"] = screen_text(app)
        table = app.main_screen.pane("processes").table
        table.move_cursor(seen["order"].index("exited"))
        await pilot.press("enter")  # its parent, in every pane
        await pilot.pause()
        seen["pid"] = app.main_screen.display_settings.pid

    run_app(build_app(RecordedSource([churn_snapshot(recorded_snapshot)]), interval_s=0.2),
            scenario, size=size)
    row = seen["rows"]["<children of 5000> bash churn.sh"]
    assert (row["pid"], row["state"], row["cpu"], row["usr"], row["sys"]) == (
        "exited", "X", "88.0", "30.0", "58.0")
    assert seen["order"][0] == "exited"  # the busiest row
    assert "<children of 5000> bash" in seen["screen"]
    # four processes (the exited row is none), the kernel's runnable count, the churn rate
    assert seen["subtitle"] == "4 tasks, 7 thr; 2 running, 2950 started/s"
    assert seen["subtitle"] in seen["screen"]
    assert seen["pid"] == 5000


@pytest.mark.parametrize("size", SIZES)
def test_usr_column_beside_sys(recorded_snapshot, size):
    """USR% is given, not left to subtract; a recording without it shows CPU% - SYS%."""
    old = replace(CHURN[0], pid=7000, comm="old", cmdline="old", user_percent=None)
    snapshot = replace(churn_snapshot(recorded_snapshot), processes=(*CHURN, old))
    seen = {}

    async def scenario(pilot):
        await pilot.press("4", "z")
        await pilot.pause()
        seen["rows"] = by_key(pilot.app, "processes")
        seen["header"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2), scenario, size=size)
    shown = seen["rows"]
    assert {name: (r["cpu"], r["usr"], r["sys"]) for name, r in shown.items()} == {
        "bash churn.sh": ("11.0", "1.0", "10.0"),
        "<children of 5000> bash churn.sh": ("88.0", "30.0", "58.0"),
        "python3 a.py": ("40.0", "39.0", "1.0"),
        "python3 b.py": ("20.0", "15.0", "5.0"),
        "/sbin/init": ("0.5", "0.1", "0.4"),
        "old": ("11.0", "1.0", "10.0"),
    }
    assert "USR%" in seen["header"] and "SYS%" in seen["header"]


def test_group_by_command_sums_each_program_and_keeps_exited_apart():
    groups = {c.command: c for c in by_command(CHURN)}
    python = groups["python3"]
    assert (python.tasks, python.threads, python.cpu_percent, python.user_percent,
            python.sys_percent, python.rss_bytes) == (2, 5, 60.0, 54.0, 6.0, 8 << 20)
    exited = groups["<children of bash>"]
    assert (exited.tasks, exited.cpu_percent, exited.exited) == (0, 88.0, True)
    assert groups["bash"].tasks == 1 and groups["bash"].cpu_percent == 11.0
    assert [c.command for c in by_command(CHURN)][:2] == ["<children of bash>", "python3"]


@pytest.mark.parametrize("size", SIZES)
def test_v_groups_processes_by_command(recorded_snapshot, size):
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("4", "z", "v", "v")  # per process, per cgroup, per command
        await pilot.pause()
        seen["view"] = app.main_screen.pane("processes").view
        seen["rows"] = by_key(app, "processes")
        seen["subtitle"] = str(app.main_screen.pane("processes").border_subtitle)

    run_app(build_app(RecordedSource([churn_snapshot(recorded_snapshot)]), interval_s=0.2),
            scenario, size=size)
    assert seen["view"] == "commands"
    python = seen["rows"]["python3"]
    assert (python["tasks"], python["cpu"], python["usr"], python["sys"]) == (
        "2", "60.0", "54.0", "6.0")
    assert seen["rows"]["<children of bash>"]["tasks"] == "-"
    assert seen["subtitle"].startswith("by command (v)")


TASKS = (
    LockTask(10, "postgres", 100, 5_000_000, 900_000),
    LockTask(11, "postgres", 50, 3_000_000, 1_200_000),
    LockTask(EXITED_PID, "rm", 7, 70_000, 20_000),  # the totals fold exited tasks by command
    LockTask(12, "rm", 3, 30_000, 15_000),
)


def test_lock_waits_by_command():
    groups = waits_by_command(TASKS)
    assert [(g.comm, g.tasks, g.contended, g.total_wait_ns, g.max_wait_ns) for g in groups] == [
        ("postgres", 2, 150, 8_000_000, 1_200_000),
        ("rm", 2, 10, 100_000, 20_000),
    ]


IO = (
    IoProcess(20, "dd", "vda", 254, 0, "W", 10, 10 << 20, 2.0, 0.5),
    IoProcess(21, "dd", "vdb", 254, 16, "W", 30, 30 << 20, 4.0, 0.1),
    IoProcess(21, "dd", "vdb", 254, 16, "R", 5, 1 << 20, 1.0, 0.0),
    IoProcess(22, "cp", "vda", 254, 0, "W", 4, 1 << 20, 1.0, 0.0),
)


def test_block_io_by_command_weighs_latency_by_requests():
    groups = io_by_command(IO)
    assert [(g.comm, g.rw, g.tasks, g.requests, g.bytes) for g in groups] == [
        ("dd", "W", 2, 40, 40 << 20), ("dd", "R", 1, 5, 1 << 20), ("cp", "W", 1, 4, 1 << 20)]
    assert groups[0].avg_lat_ms == pytest.approx((10 * 2.0 + 30 * 4.0) / 40)
    assert groups[0].avg_queue_ms == pytest.approx((10 * 0.5 + 30 * 0.1) / 40)


@pytest.mark.parametrize("size", SIZES)
def test_v_groups_lock_tasks_and_block_io_by_command(recorded_snapshot, size):
    locks = replace(recorded_snapshot.locks, tasks=TASKS)
    block = replace(recorded_snapshot.blockio, processes=IO)
    snapshot = replace(recorded_snapshot, locks=locks, blockio=block)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("2", "z", "v", "v", "v")  # callers, addresses, tasks, commands
        await pilot.pause()
        seen["locks"] = (app.main_screen.pane("locks").view, by_key(app, "locks"))
        await pilot.press("z", "3", "z", "v", "v", "v")  # processes, requests, histogram, commands
        await pilot.pause()
        seen["blockio"] = (app.main_screen.pane("blockio").view, rows(app, "blockio"))

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2), scenario, size=size)
    view, shown = seen["locks"]
    assert view == "commands"
    assert (shown["postgres"]["contended"], shown["postgres"]["tasks"]) == ("150", "2")
    assert (shown["rm"]["contended"], shown["rm"]["tasks"]) == ("10", "2")
    view, shown = seen["blockio"]
    assert view == "commands"
    assert [(r[0], r[1], r[2], r[3], r[-1]) for r in shown] == [
        ("2", "W", "40", str(40 << 10), "dd"), ("1", "R", "5", "1024", "dd"),
        ("1", "W", "4", "1024", "cp")]
