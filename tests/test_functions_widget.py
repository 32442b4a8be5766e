"""The hot-functions pane as perf top -g shows it: Children beside Self, user-space
functions and functions by command (v), at the default terminal size and a large one."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import run_app
from test_ui import app_for, column, rows

from ktop.model import NOT_CODE, StackSample, UserFrame
from ktop.stacktree import hot_functions
from ktop.ui.headless import screen_text

PYTHON = "/usr/bin/python3.11"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
SIZES = [(80, 24), (180, 50)]


def _with_python_stacks(snapshot):
    """The recorded snapshot and a python3.11 busy in its interpreter loop, as ktop samples
    it: user-mode samples (no kernel frames), a frame-pointer walk that ends in data, and
    a read() from the loop that entered the kernel."""
    eval_loop = UserFrame("_PyEval_EvalFrameDefault+0x7de", PYTHON)
    caller = UserFrame("PyEval_EvalCode+0x97", PYTHON)
    astray = UserFrame("[not code 0x950020]", NOT_CODE)
    read = UserFrame("read+0x12", LIBC)
    stacks = (
        StackSample(pid=900, comm="python3", samples=300, frames=(),
                    user_frames=(eval_loop, caller, astray)),
        StackSample(pid=900, comm="python3", samples=100, frames=(),
                    user_frames=(eval_loop, astray)),
        StackSample(pid=900, comm="python3", samples=40,
                    frames=("ksys_read+0x5", "do_syscall_64+0x71"),
                    modules=("[kernel.kallsyms]",) * 2,
                    user_frames=(read, eval_loop, caller)),
    )
    cpu = snapshot.cpu
    return replace(snapshot, cpu=replace(cpu, stacks=(*cpu.stacks, *stacks)))


def _percent(text: str) -> float:
    return float(text.rstrip("%"))


@pytest.mark.parametrize("size", SIZES)
def test_children_is_shown_beside_self_and_never_below_it(recorded_snapshot, size):
    seen = {}

    async def scenario(pilot):
        seen["screen"] = screen_text(pilot.app)
        seen["children"] = column(pilot.app, "functions", "children")
        seen["self"] = column(pilot.app, "functions", "overhead")
        seen["symbols"] = column(pilot.app, "functions", "symbol")

    run_app(app_for(recorded_snapshot), scenario, size=size)
    assert "Children" in seen["screen"] and "Self" in seen["screen"]
    assert len(seen["children"]) > 10
    assert all(_percent(c) >= _percent(s) for c, s in zip(seen["children"], seen["self"]))
    # A caller no sample landed in is listed, with Self 0 and what passed through it.
    callers = [name for name, own in zip(seen["symbols"], seen["self"]) if _percent(own) == 0]
    assert "entry_SYSCALL_64_after_hwframe" in callers
    entry = seen["symbols"].index("entry_SYSCALL_64_after_hwframe")
    assert _percent(seen["children"][entry]) >= max(map(_percent, seen["self"]))


@pytest.mark.parametrize("size", SIZES)
def test_v_shows_hot_user_functions_then_functions_by_command(recorded_snapshot, size):
    snapshot = _with_python_stacks(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        app.main_screen.pane("functions").table.focus()
        await pilot.press("v")
        await pilot.pause()
        seen["user_title"] = str(app.main_screen.pane("functions").border_title)
        seen["user"] = {r[3]: r for r in rows(app, "functions")}
        seen["user_screen"] = screen_text(app)
        await pilot.press("enter")  # no callers tree from user space: says so, stays
        await pilot.pause()
        seen["still_main"] = app.screen is app.main_screen
        await pilot.press("v")
        await pilot.pause()
        seen["comm_title"] = str(app.main_screen.pane("functions").border_title)
        seen["comm"] = rows(app, "functions")
        seen["comm_columns"] = [c.key for c in app.main_screen.pane("functions").table.table_columns]
        table = app.main_screen.pane("functions").table
        for _ in range(3):  # Self -> (Samples, in wide panes) -> Command
            await pilot.press("greater_than_sign")
            await pilot.pause()
            if table.sort_column == "comm":
                break
        seen["sorted_by"] = table.sort_column
        seen["by_comm"] = column(app, "functions", "comm")
        await pilot.press("v")
        await pilot.pause()
        seen["back"] = str(app.main_screen.pane("functions").border_title)

    run_app(app_for(snapshot), scenario, size=size)
    assert seen["user_title"] == "1 Hot user functions"
    user = seen["user"]
    assert not any(NOT_CODE in name for name in user)  # a walk gone astray is no function
    expected = snapshot.cpu.sample_hz * snapshot.cpu.window_s * snapshot.cpu.cpus
    # Self: the 400 user-mode samples in the loop; Children: the read() from it too.
    loop = user["_PyEval_EvalFrameDefault"]
    assert _percent(loop[1]) == pytest.approx(100 * 400 / expected, abs=0.01)
    assert _percent(loop[0]) == pytest.approx(100 * 440 / expected, abs=0.01)
    assert loop[4] == "python3.11"  # the file's name, as perf shows the DSO
    caller = user["PyEval_EvalCode"]
    assert (_percent(caller[1]), _percent(caller[0])) == pytest.approx(
        (0.0, 100 * 340 / expected), abs=0.01)
    assert _percent(user["read"][0]) == pytest.approx(100 * 40 / expected, abs=0.01)
    assert seen["still_main"]
    assert seen["comm_title"] == "1 Hot functions by command"
    assert "comm" in seen["comm_columns"]
    python_rows = [r for r in seen["comm"] if "python3" in r]
    assert any("_PyEval_EvalFrameDefault" in r for r in python_rows)
    assert any("ksys_read" in r for r in python_rows)
    assert seen["sorted_by"] == "comm"
    assert seen["by_comm"] == sorted(seen["by_comm"], key=str.lower)
    assert seen["back"] == "1 Hot kernel functions"


def _with_idle_task(snapshot):
    """The recorded snapshot with an idle task of a cpuidle driver (names the recording lacks):
    400 samples idling, and 4 in an interrupt it took while idle (not idling: work the CPU
    did)."""
    kernel = "[kernel.kallsyms]"
    idle_loop = ("cpuidle_enter_state+0x8c", "call_cpuidle+0x1e", "secondary_startup_64+0x16")
    stacks = (
        StackSample(pid=0, comm="swapper/0", samples=400, idle=True,
                    frames=("intel_idle+0x2f", "cpuidle_enter+0x2d", *idle_loop),
                    modules=(kernel,) * 5),
        StackSample(pid=0, comm="swapper/0", samples=4,
                    frames=("handle_edge_irq+0x8a", "common_interrupt+0x81", *idle_loop),
                    modules=(kernel,) * 5),
    )
    cpu = snapshot.cpu
    stacks = (*cpu.stacks, *stacks)
    expected = cpu.sample_hz * cpu.window_s * cpu.cpus
    return replace(snapshot, cpu=replace(cpu, stacks=stacks,
                                         functions=hot_functions(stacks, expected)))


@pytest.mark.parametrize("size", SIZES)
def test_idle_hidden_leaves_the_idling_out_of_its_callers_children(recorded_snapshot, size):
    snapshot = _with_idle_task(recorded_snapshot)
    cpu = snapshot.cpu
    share = 100.0 / (cpu.sample_hz * cpu.window_s * cpu.cpus)
    seen = {}

    def children(app) -> dict[str, float]:
        names = column(app, "functions", "symbol")
        return dict(zip(names, map(_percent, column(app, "functions", "children"))))

    async def scenario(pilot):
        seen["hidden"] = children(pilot.app)
        await pilot.press("i")
        await pilot.pause()
        seen["shown"] = children(pilot.app)

    run_app(app_for(snapshot), scenario, size=size)
    # Hidden: the idling is nowhere, and the interrupt it took is still under its callers.
    assert "intel_idle" not in seen["hidden"]
    assert "cpuidle_enter" not in seen["hidden"]
    for caller in ("cpuidle_enter_state", "call_cpuidle", "secondary_startup_64"):
        assert seen["hidden"][caller] == pytest.approx(4 * share, abs=0.006)
    # Shown (i): the idling counts under its callers too, as perf top -g has it.
    assert seen["shown"]["intel_idle"] == pytest.approx(400 * share, abs=0.006)
    assert seen["shown"]["cpuidle_enter"] == pytest.approx(400 * share, abs=0.006)
    for caller in ("cpuidle_enter_state", "call_cpuidle", "secondary_startup_64"):
        assert seen["shown"][caller] == pytest.approx(404 * share, abs=0.006)
