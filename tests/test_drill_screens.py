"""Drill-down screens as a user reads them (issue 12, items 1, 6 and 7): stacks one frame a
line and merged by call path at 80x24 and 180x50, live like the panes, keys that work."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import pytest
from conftest import run_app

from ktop.engine import RecordedSource
from ktop.model import (
    Bucket,
    IoProcess,
    IoRequest,
    IoSubmitStack,
    LockCaller,
    LockStack,
    LockTask,
    StackSample,
)
from ktop.ui.app import build_app
from ktop.ui.headless import render_screen, screen_text
from ktop.ui.screens.details import LockCallerScreen

SIZES = [(80, 24), (180, 50)]
INTERVAL = 0.1
MS = 1_000_000

UNLINK = ("down_write+0x66", "do_unlinkat+0x160", "__x64_sys_unlink+0x3b", "do_syscall_64+0x71",
          "entry_SYSCALL_64_after_hwframe+0x76")
# Two stacks of one call path that differ in the innermost offset alone, and one other path.
UNLINK_A = ("rwsem_down_write_slowpath+0x3cc", *UNLINK)
UNLINK_B = ("rwsem_down_write_slowpath+0x37f", *UNLINK)
RENAME = ("rwsem_down_write_slowpath+0x3cc", "down_write+0x66", "lock_rename+0x2f",
          "do_renameat2+0x1c4")


def unlink_caller(contended: int = 8) -> LockCaller:
    return LockCaller(
        caller="do_unlinkat+0x160", type="rwsem:W", contended=contended + 1,
        total_wait_ns=900 * MS, max_wait_ns=40 * MS, min_wait_ns=1000,
        stacks=(LockStack(UNLINK_A, contended - 3, 500 * MS, 40 * MS),
                LockStack(UNLINK_B, 3, 300 * MS, 30 * MS),
                LockStack(RENAME, 1, 100 * MS, 100 * MS)),
        hist_ns=(Bucket(1024, 2047, 3), Bucket(2048, 4095, 5)),
        tasks=(LockTask(77, "unlinker", contended + 1, 900 * MS),),
    )


def with_caller(snapshot, caller: LockCaller):
    """The recorded snapshot with `caller` as the lock pane's top row."""
    return replace(snapshot, locks=replace(snapshot.locks, callers=(caller, *snapshot.locks.callers)))


SUBMIT = ("__submit_bio+0x9c", "submit_bio_noacct_nocheck+0x1a0", "iomap_dio_bio_iter+0x2f1",
          "__iomap_dio_rw+0x3e2", "ext4_dio_write_iter+0x2cd", "vfs_write+0x27c")
IO_A = ("blk_mq_submit_bio+0x5a3", *SUBMIT)
IO_B = ("blk_mq_submit_bio+0x1d2", *SUBMIT)


def direct_writer(snapshot):
    """A process doing 1 MiB direct writes, seen as pairs of 512 KiB requests, on top."""
    writer = IoProcess(
        pid=9001, comm="dd", disk="vda", major=254, minor=0, rw="W", requests=128,
        bytes=64 << 20, avg_lat_ms=0.8, avg_queue_ms=0.05,
        stacks=(IoSubmitStack(IO_A, 80), IoSubmitStack(IO_B, 48)),
        hist_us=(Bucket(64, 127, 3), Bucket(128, 255, 0), Bucket(256, 511, 5)),
    )
    requests = tuple(
        IoRequest(2.5 - i / 100, "dd", 9001, "vda", "W", 4096 * i, 512 << 10, 0.05, 0.8)
        for i in range(3)
    )
    block = snapshot.blockio
    return replace(snapshot, blockio=replace(
        block, processes=(writer, *block.processes), requests=(*requests, *block.requests)))


def frame_lines(text: str) -> list[str]:
    """Each screen line without the box around it: what one line of the page says."""
    return [re.sub(r"^[│┃\s]+|[│┃▁▂▃▄▅▆▇█▏\s]+$", "", line) for line in text.splitlines()]


def drill_text(snapshot, keys: tuple[str, ...], size, then: tuple[str, ...] = ()) -> dict[str, str]:
    """The screen after `keys` (which open a drill-down), and again after `then`."""
    app = build_app(RecordedSource([snapshot]), interval_s=INTERVAL)
    seen = {}

    async def scenario(pilot):
        await pilot.press(*keys)
        await pilot.pause(0.2)
        seen["screen"] = type(app.screen).__name__
        seen["text"] = screen_text(app)
        if then:
            await pilot.press(*then)
            await pilot.pause(0.2)
            seen["then"] = screen_text(app)

    run_app(app, scenario, size=size)
    return seen


# ---- item 1: one frame a line, merged by call path -------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_lock_drill_shows_one_frame_a_line_and_merges_offsets(recorded_snapshot, size):
    seen = drill_text(with_caller(recorded_snapshot, unlink_caller()), ("2", "enter"), size,
                      then=("o",))
    assert seen["screen"] == "LockCallerScreen"
    text, lines = seen["text"], frame_lines(seen["text"])
    assert "\\x0a" not in text and "…" not in "".join(lines[3:12])
    # merged: the innermost frame, the only one that differs, reads without its offset
    merged = lines.index("rwsem_down_write_slowpath")
    assert lines[merged - 1].startswith("8 waits, total 800.00 ms")
    assert "(2 stacks, offsets merged)" in lines[merged - 1]
    assert lines[merged + 1 : merged + 3] == ["down_write+0x66", "do_unlinkat+0x160"]
    assert "rwsem_down_write_slowpath+0x37f" not in lines
    # o: every offset its own stack again
    split = frame_lines(seen["then"])
    assert "rwsem_down_write_slowpath+0x3cc" in split and "rwsem_down_write_slowpath+0x37f" in split
    assert any(line.startswith("5 waits, total 500.00 ms") for line in split)
    assert "rwsem_down_write_slowpath" not in split


@pytest.mark.parametrize("size", SIZES)
def test_block_io_drill_shows_one_frame_a_line_and_merges_offsets(recorded_snapshot, size):
    seen = drill_text(direct_writer(recorded_snapshot), ("3", "enter"), size, then=("o",))
    assert seen["screen"] == "IoProcessScreen"
    lines = frame_lines(seen["text"])
    assert "\\x0a" not in seen["text"]
    merged = lines.index("blk_mq_submit_bio")
    assert lines[merged - 1] == "128 requests  (2 stacks, offsets merged)"
    assert lines[merged + 1 : merged + 3] == ["__submit_bio+0x9c", "submit_bio_noacct_nocheck+0x1a0"]
    split = frame_lines(seen["then"])
    assert {"blk_mq_submit_bio+0x5a3", "blk_mq_submit_bio+0x1d2", "80 requests", "48 requests"} <= set(split)


@pytest.mark.parametrize("size", SIZES)
def test_cpu_stacks_view_merges_stacks_that_differ_in_offsets(recorded_snapshot, size):
    read = ("chacha_block_generic+0x73", "get_random_bytes_user+0x74", "vfs_read+0x23a")
    stacks = (StackSample(10, "dd", 1, ("chacha_permute+0x190", *read)),
              StackSample(10, "dd", 1, ("chacha_permute+0xda", *read)))
    snapshot = replace(recorded_snapshot, cpu=replace(recorded_snapshot.cpu, stacks=stacks))
    seen = drill_text(snapshot, ("1", "enter", "v", "v"), size, then=("o",))
    assert seen["screen"] == "FunctionScreen"
    lines = frame_lines(seen["text"])
    head = next(line for line in lines if line.startswith("2 samples  pid 10 dd"))
    assert "(2 stacks, offsets merged)" in head
    assert "chacha_permute  [kernel.kallsyms]" in lines or "chacha_permute" in lines
    split = frame_lines(seen["then"])
    assert sum(line.startswith("1 sample  pid 10 dd") for line in split) == 2
    if size[0] > 100:  # the stacks view's footer: o, and none of the trees' keys
        footer = seen["text"].splitlines()[-1]
        assert "o Offsets" in footer and "Expand" not in footer


def test_drill_picture_shows_one_frame_a_line_and_finds_a_caller_without_its_offset(
    recorded_snapshot,
):
    source = RecordedSource([with_caller(recorded_snapshot, unlink_caller())])
    text = asyncio.run(render_screen(source, (80, 24), ".txt", drill="locks:do_unlinkat"))
    lines = frame_lines(text)
    assert text.startswith("lock waits at do_unlinkat+0x160")
    assert "\\x0a" not in text
    start = lines.index("rwsem_down_write_slowpath")
    assert lines[start : start + 6] == ["rwsem_down_write_slowpath", *UNLINK]


# ---- item 6: live like the pane, space freezes, c applies ---------------------------------


class FollowedSource:
    """A live-like source: hands over `current`, or `since_start` once `c` asked for it."""

    live = True
    started_at = 0.0
    timeline = None  # live: nothing to move through

    def __init__(self, current, since_start=None) -> None:
        self.current = current
        self.since_start = since_start
        self.cumulative = False
        self.frames = 0
        self.on_attached = None

    def start(self, wait: bool = True, patient: bool = False) -> None:
        pass

    def hurry_loading(self) -> None:
        pass

    def collect(self):
        self.frames += 1
        return self.since_start if self.cumulative and self.since_start else self.current

    def close(self) -> None:
        pass


async def frames(pilot, source: FollowedSource, count: int = 3) -> None:
    target = source.frames + count
    for _ in range(500):
        if source.frames >= target:
            break
        await pilot.pause(0.01)
    await pilot.pause(0.05)


def header(app) -> str:
    return " ".join(screen_text(app).splitlines()[:3])


def test_a_drill_down_follows_the_data_freezes_on_space_and_marks_a_gone_row_stale(
    recorded_snapshot,
):
    source = FollowedSource(with_caller(recorded_snapshot, unlink_caller(8)))
    app = build_app(source, interval_s=INTERVAL)
    seen = {}

    async def scenario(pilot):
        await pilot.press("2", "enter")
        await frames(pilot, source)
        seen["first"] = header(app)
        source.current = with_caller(recorded_snapshot, unlink_caller(40))
        await frames(pilot, source)
        seen["followed"] = header(app)
        await pilot.press("space")
        source.current = with_caller(recorded_snapshot, unlink_caller(70))
        await frames(pilot, source)
        seen["paused"] = header(app)
        await pilot.press("space")
        await frames(pilot, source)
        seen["resumed"] = header(app)
        source.current = recorded_snapshot  # the caller has left the window
        await frames(pilot, source)
        seen["gone"] = header(app)
        seen["screen"] = app.screen

    run_app(app, scenario, size=(180, 50))
    assert isinstance(seen["screen"], LockCallerScreen)
    assert "9 waits" in seen["first"]
    assert "41 waits" in seen["followed"]  # no r pressed
    assert "41 waits" in seen["paused"] and "PAUSED" in seen["paused"]
    assert "71 waits" in seen["resumed"] and "PAUSED" not in seen["resumed"]
    assert "71 waits" in seen["gone"] and "STALE" in seen["gone"]


def test_c_in_a_drill_down_shows_the_totals_since_start(recorded_snapshot):
    source = FollowedSource(with_caller(recorded_snapshot, unlink_caller(8)),
                            since_start=with_caller(recorded_snapshot, unlink_caller(500)))
    app = build_app(source, interval_s=INTERVAL)
    seen = {}

    async def scenario(pilot):
        await pilot.press("2", "enter")
        await frames(pilot, source)
        seen["window"] = header(app)
        await pilot.press("c")
        await frames(pilot, source)
        seen["cumulative"] = header(app)

    run_app(app, scenario, size=(180, 50))
    assert "9 waits in the last" in seen["window"]
    assert "501 waits since start" in seen["cumulative"]


def test_a_live_callers_tree_keeps_the_branch_the_user_closed(recorded_snapshot):
    more = replace(recorded_snapshot, cpu=replace(
        recorded_snapshot.cpu,
        stacks=tuple(replace(s, samples=s.samples * 2) for s in recorded_snapshot.cpu.stacks)))
    source = FollowedSource(recorded_snapshot)
    app = build_app(source, interval_s=INTERVAL)
    seen = {}

    async def scenario(pilot):
        await pilot.press("1", "enter")
        await frames(pilot, source)
        tree = app.screen.query_one("Tree")
        await pilot.press("down", "minus")  # the hottest caller, closed
        await pilot.pause(0.1)
        seen["closed"] = tree.cursor_node.data.name
        source.current = more
        await frames(pilot, source)
        node = tree.cursor_node
        seen["after"] = (node.data.name, node.is_expanded, node.data.samples)

    run_app(app, scenario, size=(180, 50))
    name, expanded, samples = seen["after"]
    assert name == seen["closed"] and not expanded
    hits = sum(s.samples for s in recorded_snapshot.cpu.stacks
               if s.frames and s.frames[0].startswith("chacha_permute+")
               and s.frames[1].startswith(name + "+"))
    assert samples == 2 * hits  # the new figures, in the branch as the user left it


# ---- item 7: keys that work, human titles and units, AVG SIZE, recent requests -------------


@pytest.mark.parametrize("keys", [("2", "enter"), ("3", "enter")])
def test_lock_and_block_drill_footers_offer_only_keys_that_work(recorded_snapshot, keys):
    seen = drill_text(direct_writer(recorded_snapshot), keys, (180, 50), then=("question_mark",))
    footer = seen["text"].splitlines()[-1]
    for works in ("esc Back", "o Offsets", "space Pause", "c Cumulative", "? Help"):
        assert works in footer
    for idle in ("v View", "z Zoom", "i Idle rows", "/ Filter"):
        assert idle not in footer
    help_text = seen["then"]
    assert "Screen" not in help_text  # no class names
    title = "Lock caller: stacks, waits, tasks" if keys[0] == "2" else "Block I/O of a process"
    assert title in help_text
    assert re.search(r"\bo\s+merge stacks that differ only in offsets", help_text)
    assert re.search(r"space\s+Pause", help_text) and re.search(r"\bc\s+Cumulative", help_text)
    assert not re.search(r"\bz\s+Zoom", help_text)


def test_histograms_are_in_human_units_alike(recorded_snapshot):
    snapshot = with_caller(direct_writer(recorded_snapshot), unlink_caller())
    locks = drill_text(snapshot, ("2", "enter"), (180, 50))["text"]
    block = drill_text(snapshot, ("3", "enter"), (180, 50), then=("escape", "v", "v"))
    assert "1.02 us -> 2.05 us" in locks and "1024 -> 2047" not in locks
    assert "latency distribution of this process" in block["text"]
    assert "64 us -> 127 us" in block["text"] and "256 us -> 511 us" in block["text"]
    assert "64 us -> 127 us" in block["then"]  # the pane's per-disk histogram view too


def test_block_views_show_the_average_request_size(recorded_snapshot):
    seen = drill_text(direct_writer(recorded_snapshot), ("3",), (180, 50), then=("enter",))
    lines = seen["text"].splitlines()
    head = next(line for line in lines if "AVG SIZE" in line)
    row = next(line for line in lines if " 9001 " in line)
    size_at = head.index("AVG SIZE") + len("AVG SIZE")
    assert row[:size_at].rstrip().endswith("512.0K")
    assert "avg size 512.0KB" in seen["then"]


def test_block_drill_lists_the_requests_of_its_own_process(recorded_snapshot):
    seen = drill_text(direct_writer(recorded_snapshot), ("3", "enter"), (180, 50))
    text = seen["text"]
    assert "recent requests of this process" in text
    rows = [line for line in frame_lines(text) if re.match(r"2\.\d{6}\s+vda\s+W", line)]
    assert len(rows) == 3 and all("524288" in row for row in rows)

