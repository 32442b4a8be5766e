"""Drill-down (issue 5): from a row to the stacks behind it, and back to where the user was."""

from __future__ import annotations

import asyncio

import pytest
from conftest import run_app

from ktop.engine import RecordedSource
from ktop.model import StackSample, UserFrame
from ktop.panes.blockio.screens import IoProcessScreen
from ktop.stacktree import callees_tree, callers_tree, processes_hitting, unique_stacks
from ktop.ui.app import build_app
from ktop.ui.headless import SnapshotError, render_screen, screen_text
from ktop.ui.screens.details import LockCallerScreen
from ktop.ui.screens.function import FunctionScreen

# ---- trees from stacks ---------------------------------------------------------------------

READ = ("vfs_read+0x23a", "ksys_read+0x66", "do_syscall_64+0x71")
STACKS = (
    StackSample(10, "dd", 60, ("chacha_permute+0xda", "chacha_block_generic+0x73", *READ),
                user_frames=(UserFrame("read+0x12", "/usr/lib/libc.so.6"),)),
    StackSample(11, "cat", 30, ("chacha_permute+0xda", "get_random_bytes_user+0x74", *READ)),
    StackSample(10, "dd", 10, ("_copy_to_iter+0x1", "get_random_bytes_user+0x74", *READ)),
    StackSample(12, "x", 5, ("chacha_permute+0x1", "chacha_block_generic+0x7"), truncated=True),
)


def test_callers_tree_puts_the_function_at_the_root_and_its_callers_below_with_shares():
    root = callers_tree("chacha_permute", STACKS)
    assert root.samples == 95
    level1 = {n.name: n.samples for n in root.sorted_children()}
    assert level1 == {"chacha_block_generic": 65, "get_random_bytes_user": 30}
    block = root.sorted_children()[0]
    assert [n.name for n in block.sorted_children()] == ["vfs_read", "[truncated: deeper than the collected depth]"]
    # down to the system call, then the user frame below the kernel frames
    node = block.sorted_children()[0]
    chain = [node.name]
    while node.children:
        node = node.sorted_children()[0]
        chain.append(node.name)
    assert chain == ["vfs_read", "ksys_read", "do_syscall_64", "read"]
    assert node.user
    assert root.to_json(root.samples)["children"][0]["percent"] == pytest.approx(68.42, abs=0.01)


def test_callees_tree_follows_what_the_function_called_down_to_the_leaf():
    root = callees_tree("get_random_bytes_user", STACKS)
    assert root.samples == 40
    assert {n.name: n.samples for n in root.sorted_children()} == {
        "chacha_permute": 30, "_copy_to_iter": 10,
    }


def test_processes_and_whole_stacks_of_a_function():
    assert processes_hitting("chacha_permute", STACKS) == [(10, "dd", 60), (11, "cat", 30), (12, "x", 5)]
    assert [s.samples for s in unique_stacks("chacha_permute", STACKS)] == [60, 30, 5]


# ---- on recorded data, by keyboard -----------------------------------------------------------


def _app(recorded_snapshot, **kwargs):
    return build_app(RecordedSource([recorded_snapshot]), interval_s=0.05, **kwargs)


def test_enter_on_a_hot_function_shows_its_callers_and_esc_returns_to_the_same_row(recorded_snapshot):
    app = _app(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        await pilot.press("1", "down")  # second row: _copy_to_iter
        table = app.main_screen.pane("functions").table
        seen["row_before"] = table.cursor_row
        seen["key_before"] = table.selected_key
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert isinstance(app.screen, FunctionScreen)
        seen["function"] = app.screen.function
        seen["tree"] = screen_text(app)
        await pilot.press("v")  # callees
        await pilot.pause(0.1)
        seen["callees_header"] = screen_text(app).splitlines()[0]
        await pilot.press("v")  # whole stacks
        await pilot.pause(0.1)
        seen["stacks"] = screen_text(app)
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["back_on_main"] = app.screen is app.main_screen
        seen["row_after"] = table.cursor_row
        seen["key_after"] = table.selected_key

    run_app(app, scenario)
    assert seen["function"] == "_copy_to_iter"
    tree = seen["tree"]
    for caller in ("get_random_bytes_user", "vfs_read", "ksys_read", "do_syscall_64"):
        assert caller in tree
    assert tree.index("get_random_bytes_user") < tree.index("vfs_read") < tree.index("ksys_read")
    assert seen["callees_header"].startswith("callees of _copy_to_iter")
    assert "samples  pid" in seen["stacks"]
    assert seen["back_on_main"]
    assert (seen["row_after"], seen["key_after"]) == (seen["row_before"], seen["key_before"])


def test_enter_on_a_process_filters_every_pane_to_it_and_esc_shows_all(recorded_snapshot):
    app = _app(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        await pilot.press("4")
        await pilot.press("enter")
        await pilot.pause(0.1)
        seen["pid"] = app.main_screen.display_settings.pid
        seen["rows"] = app.main_screen.pane("processes").table.row_count
        seen["header"] = screen_text(app).splitlines()[0]
        await pilot.press("escape")
        await pilot.pause(0.1)
        seen["after"] = app.main_screen.display_settings.pid
        seen["rows_after"] = app.main_screen.pane("processes").table.row_count

    run_app(app, scenario)
    assert seen["pid"] == recorded_snapshot.processes[0].pid
    assert seen["rows"] == 1
    assert f"pid {seen['pid']} only" in seen["header"]
    assert seen["after"] is None and seen["rows_after"] > 1


def test_enter_on_a_lock_caller_and_on_an_io_process_open_their_stacks(recorded_snapshot):
    app = _app(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        await pilot.press("2", "enter")
        await pilot.pause(0.2)
        seen["lock_screen"] = type(app.screen)
        seen["lock_text"] = screen_text(app)
        await pilot.press("escape", "3", "enter")
        await pilot.pause(0.2)
        seen["io_screen"] = type(app.screen)
        seen["io_text"] = screen_text(app)

    run_app(app, scenario)
    top_lock = max(recorded_snapshot.locks.callers, key=lambda c: c.total_wait_ns)
    assert seen["lock_screen"] is LockCallerScreen
    assert f"lock waits at {top_lock.caller}" in seen["lock_text"]
    assert "stacks that contended here" in seen["lock_text"]
    assert top_lock.stacks[0].frames[0] in seen["lock_text"]
    assert seen["io_screen"] is IoProcessScreen
    assert "kernel stacks that submitted the I/O" in seen["io_text"]
    assert "\\x1b[2J evil" in seen["io_text"]  # the hostile name, escaped, in the drill-down too


def test_refresh_keeps_a_vanished_row_and_marks_it_stale(recorded_snapshot):
    from dataclasses import replace

    gone = replace(recorded_snapshot, cpu=replace(recorded_snapshot.cpu, stacks=()))
    app = build_app(RecordedSource([recorded_snapshot]), interval_s=0.05)
    seen = {}

    async def scenario(pilot):
        await pilot.press("1", "enter")
        await pilot.pause(0.2)
        await pilot.press("space")  # paused: the drill-down no longer follows the data...
        app.latest = gone  # ...when the window moved on and the function left it
        await pilot.press("r")  # r takes the latest all the same
        for _ in range(50):  # redrawn within 0.1 s alone; two suites on two CPUs, later
            await pilot.pause(0.1)
            seen["text"] = screen_text(app)
            if "STALE" in seen["text"]:
                break

    run_app(app, scenario)
    assert "STALE" in seen["text"]
    assert "chacha_block_generic" in seen["text"]  # still the data it had


def test_drill_to_a_row_that_is_not_there_is_a_clear_error(recorded_snapshot):
    source = RecordedSource([recorded_snapshot])
    with pytest.raises(SnapshotError, match="no such row"):
        asyncio.run(render_screen(source, (160, 50), ".txt", drill="functions:not_a_function"))


def test_drill_picture_of_a_function(recorded_snapshot):
    text = asyncio.run(
        render_screen(RecordedSource([recorded_snapshot]), (160, 50), ".txt",
                      drill="functions:chacha_permute")
    )
    assert text.startswith("callers of chacha_permute")
    assert "get_random_bytes_user" in text


@pytest.mark.parametrize(
    ("drill", "says"),
    [
        ("locks:d_alloc_parallel+0x5a", "lock waits at d_alloc_parallel+0x5a"),
        ("blockio:311", "kernel stacks that submitted the I/O"),
        ("processes:4242", "pid 4242 only"),
    ],
)
def test_drill_pictures_of_the_other_panes(recorded_snapshot, drill, says):
    text = asyncio.run(
        render_screen(RecordedSource([recorded_snapshot]), (160, 50), ".txt", drill=drill)
    )
    assert says in text


def test_enter_in_the_other_views_of_locks_and_block_io(recorded_snapshot):
    app = _app(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        await pilot.press("2", "v", "enter")  # a lock address: what it is, its owners
        await pilot.pause(0.1)
        seen["address_opens"] = type(app.screen).__name__
        seen["address_says"] = screen_text(app)
        await pilot.press("escape", "v", "enter")  # lock tasks: every pane shows that process
        await pilot.pause(0.1)
        seen["task_pid"] = app.main_screen.display_settings.pid
        await pilot.press("escape", "3", "v", "enter")  # the newest request: its process
        await pilot.pause(0.2)
        seen["request_opens"] = getattr(app.screen, "process", None)
        await pilot.press("escape", "end", "enter")  # pid 4244 did no I/O of its own here
        await pilot.pause(0.1)
        seen["orphan_stays"] = app.screen is app.main_screen

    run_app(app, scenario, notifications=True)
    assert seen["address_opens"] == "LockAddressScreen"
    # the recording predates owners: the mutex's drill-down says none were recorded
    assert "none recorded for these waits" in seen["address_says"]
    assert seen["task_pid"] == max(recorded_snapshot.locks.tasks, key=lambda t: t.total_wait_ns).pid
    assert seen["request_opens"].pid == 4242
    assert seen["orphan_stays"]


def test_kernel_frames_get_file_and_line_from_a_line_table(kallsyms, addr):
    from cpu_drains import StackCount, cpu_drain

    from ktop.aggregate.cpu import CpuAggregator

    leaf, caller = addr("chacha_permute") + 0x10, addr("get_random_bytes_user") + 0x40
    asked = []

    def source_line(address):
        asked.append(address)
        return {leaf: "lib/crypto/chacha.c:42", caller - 1: "fs/read_write.c:482"}.get(address)

    aggregate = CpuAggregator(kallsyms, hz=99, cpus=2, source_line=source_line, line_info="x")
    aggregate.add(cpu_drain(0.0, 1.0, (StackCount(7, "dd", 3, (leaf, caller), (), False),), {}))
    stack = aggregate.profile().stacks[0]
    # the innermost frame is where the sample hit; a caller's return address is one past
    # its call instruction, so the line looked up is that of address - 1
    assert asked == [leaf, caller - 1]
    assert stack.sources == ("lib/crypto/chacha.c:42", "fs/read_write.c:482")
    assert aggregate.profile().line_info == "x"


def test_a_click_selects_a_row_and_a_second_click_opens_it(recorded_snapshot):
    app = _app(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        table = app.main_screen.pane("functions").table
        await pilot.click(table, offset=(20, 3))  # header line, then rows 0, 1, 2
        await pilot.pause(0.1)
        seen["cursor"] = table.cursor_row
        seen["key"] = table.selected_key
        seen["still_main"] = app.screen is app.main_screen
        await pilot.click(table, offset=(20, 3))
        await pilot.pause(0.2)
        seen["opened"] = getattr(app.screen, "function", None)

    run_app(app, scenario)
    assert seen["cursor"] == 2 and seen["still_main"]
    assert seen["opened"] == seen["key"].rsplit(" ", 1)[0]


def test_help_documents_drilling_down_and_coming_back(recorded_snapshot):
    from ktop.ui.screens.help import HelpScreen

    app = _app(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        seen["main"] = screen_text(app) if isinstance(app.screen, HelpScreen) else ""
        await pilot.press("escape", "1", "enter")
        await pilot.pause(0.2)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        seen["drill"] = screen_text(app) if isinstance(app.screen, HelpScreen) else ""

    run_app(app, scenario)
    assert "Enter" in seen["main"] and "drill down" in seen["main"]
    assert "Esc Backspace" in seen["main"]
    for key, what in (("E", "Expand all"), ("C", "Collapse all"), ("r", "Refresh"), ("Esc", "Back")):
        assert what in seen["drill"], f"{key} ({what}) missing from the drill-down help"


def test_lock_waiters_user_stacks_are_named_and_shown(kallsyms, addr, recorded_snapshot):
    from dataclasses import replace

    from ktop.aggregate.locks import LockAggregator
    from ktop.collectors.locks import HIST_SLOTS, LockDrain, StackWaits, TaskWaits

    kernel = (addr("_raw_spin_lock_irqsave") + 0x20, addr("get_random_bytes_user") + 0x10)
    resolved = []

    def resolve_user(pid, addresses):
        resolved.append((pid, tuple(addresses)))
        return [UserFrame("worker_loop+0x1c", "/usr/bin/app"), UserFrame("main+0x9", "/usr/bin/app")]

    aggregate = LockAggregator(kallsyms, resolve_user=resolve_user)
    hist = tuple([0] * HIST_SLOTS)
    aggregate.add(LockDrain(
        0.0, 1.0,
        (StackWaits(1, kernel, 0, 3, 3000, 2000, 500, hist),),
        (),
        (TaskWaits(101, 100, "app", 1, kernel, 0, (0x401000, 0x402000), 0, 3, 3000, 2000, 500),),
        {},
    ))
    caller = aggregate.profile().callers[0]
    assert resolved == [(100, (0x401000, 0x402000))]  # the process (tgid), not the thread
    stack = caller.user_stacks[0]
    frames, contended, total = stack.frames, stack.contended, stack.total_wait_ns
    assert [f.symbol for f in frames] == ["worker_loop+0x1c", "main+0x9"]
    assert (contended, total) == (3, 3000)

    snapshot = replace(recorded_snapshot, locks=replace(aggregate.profile(), window_s=1.0))
    app = _app(snapshot)
    seen = {}

    async def scenario(pilot):
        await pilot.press("2", "enter")
        await pilot.pause(0.2)
        seen["text"] = screen_text(app)

    run_app(app, scenario)
    assert "user-space stacks of the waiters" in seen["text"]
    assert "[user] worker_loop+0x1c" in seen["text"]
