"""Drill-down on the live kernel (issue 5): real stacks, real user frames."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import live_source, running

from ktop.engine import RecordedSource
from ktop.model import PANE_BLOCKIO, PANE_FUNCTIONS, PANE_LOCKS
from ktop.stackmerge import merge_lock_stacks
from ktop.stacktree import callers_tree, function_name
from ktop.ui.headless import render_screen

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]

URANDOM = ("chacha_permute", "chacha_block_generic", "_copy_to_iter", "get_random_bytes_user")


def _profile_while(workload: list[str], seconds: float = 2.5):
    with live_source(hz=199, panes=frozenset({PANE_FUNCTIONS}), cumulative=True) as source, \
            running(workload) as busy:
        time.sleep(seconds)
        snapshot = source.collect()
    assert not snapshot.unavailable, snapshot.unavailable
    return snapshot, busy.pid


def test_callers_of_the_hottest_urandom_function_reach_the_read_system_call():
    snapshot, _ = _profile_while(["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M"])
    hottest = next(f for f in snapshot.cpu.functions if f.symbol in URANDOM)
    root = callers_tree(hottest.symbol, snapshot.cpu.stacks)
    names = set()
    todo = [root]
    while todo:
        node = todo.pop()
        names.add(node.name)
        todo.extend(node.children.values())
    assert {"vfs_read", "ksys_read"} <= names, f"{hottest.symbol}'s callers: {sorted(names)}"


SPINNER = textwrap.dedent(
    """
    #include <unistd.h>
    __attribute__((noinline)) void ktop_spin_in_user(volatile unsigned long *n) {
        for (;;) { (*n)++; if ((*n & 0xffff) == 0) getppid(); }
    }
    int main(void) { volatile unsigned long n = 0; ktop_spin_in_user(&n); return 0; }
    """
)


def test_a_user_frame_of_a_frame_pointer_program_is_named(tmp_path):
    source = tmp_path / "spin.c"
    source.write_text(SPINNER)
    binary = tmp_path / "spin"
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", binary, source],
                   check=True)
    snapshot, pid = _profile_while([str(binary)])
    user_frames = [
        frame.symbol
        for stack in snapshot.cpu.stacks
        if stack.pid == pid
        for frame in stack.user_frames
    ]
    assert user_frames, "no user frames were collected for the spinner"
    assert any(f.startswith("ktop_spin_in_user+0x") for f in user_frames), user_frames[:10]


LOCKS_WORKLOAD = os.path.join(os.path.dirname(__file__), "fixtures", "locks_workload.py")
SCRATCH_PARENT = "/var/tmp"  # on a real disk here (ext4 on vda), unlike /tmp


def test_drill_pictures_of_real_lock_and_block_stacks_read_one_frame_a_line():
    """Issue 12: file churn in one directory and 1 MiB direct writes, then --drill pictures
    of what ktop saw: each frame a line of its own (no literal \\x0a), a lock caller named
    without its offset, the writer's average request size and its own requests."""
    with live_source(panes=frozenset({PANE_LOCKS, PANE_BLOCKIO}), cumulative=True) as source:
        with tempfile.TemporaryDirectory(dir=SCRATCH_PARENT, prefix="ktop-drill-") as scratch:
            churn = subprocess.Popen([sys.executable, LOCKS_WORKLOAD, "--seconds", "3",
                                      "--processes", "6", "--mmap-threads", "0"],
                                     stdout=subprocess.DEVNULL)
            dd = subprocess.Popen(["dd", "if=/dev/zero", f"of={scratch}/direct", "bs=1M",
                                   "count=32", "oflag=direct"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert dd.wait(timeout=60) == 0 and churn.wait(timeout=60) == 0
        time.sleep(0.3)  # the last completions reach the ring buffer
        snapshot = source.collect()
    assert not snapshot.unavailable, snapshot.unavailable

    callers = [c for c in snapshot.locks.callers if any(len(s.frames) >= 3 for s in c.stacks)]
    assert callers, "the file churn made no lock contention ktop saw"
    unlink = [c for c in callers if function_name(c.caller) == "do_unlinkat"]
    caller = unlink[0] if unlink else callers[0]
    name = "do_unlinkat" if unlink else caller.caller  # bare: the caller with the most wait
    text = asyncio.run(render_screen(RecordedSource([snapshot]), (80, 24), ".txt",
                                     drill=f"locks:{name}"))
    lines = [line.strip("│ ▁▂▃▄▅▆▇█▏") for line in text.splitlines()]
    assert "\\x0a" not in text
    assert f"lock waits at {caller.caller}" in text
    top = merge_lock_stacks(caller.stacks)[0][0].frames
    start = lines.index(top[0])
    shown = lines[start : start + len(top)]
    assert shown == list(top[: len(shown)]) and len(shown) >= 3

    writes = [p for p in snapshot.blockio.processes if p.pid == dd.pid and p.rw == "W"]
    assert writes, [(p.pid, p.comm) for p in snapshot.blockio.processes]
    text = asyncio.run(render_screen(RecordedSource([snapshot]), (180, 50), ".txt",
                                     drill=f"blockio:{dd.pid}"))
    lines = [line.strip("│ ▁▂▃▄▅▆▇█▏") for line in text.splitlines()]
    assert "\\x0a" not in text
    # 32 MiB in 1 MiB writes: requests of at most the disk's largest size, never 4 KiB ones
    avg = writes[0].bytes / writes[0].requests
    assert avg >= 128 << 10, avg
    assert "avg size " in text and "recent requests of this process" in text
    assert text.startswith(f"block I/O of {dd.pid} dd")
    requests = [line for line in lines if line.split()[1:3] == [writes[0].disk, "W"]
                if len(line.split()) == 7]
    assert requests, "the writer's drill-down lists none of its requests"
    stack = next(s for s in writes[0].stacks if len(s.frames) >= 3).frames
    assert any(frame in lines for frame in stack)  # a frame alone on its line
