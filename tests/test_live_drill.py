"""Drill-down on the live kernel (issue 5): real stacks, real user frames."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import pytest

from ktop.engine import LiveSource, Options
from ktop.model import PANE_FUNCTIONS
from ktop.stacktree import callers_tree

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]

URANDOM = ("chacha_permute", "chacha_block_generic", "_copy_to_iter", "get_random_bytes_user")


def _profile_while(workload: list[str], seconds: float = 2.5):
    source = LiveSource(Options(hz=199, panes=frozenset({PANE_FUNCTIONS})))
    source.cumulative = True
    source.start()
    busy = subprocess.Popen(workload, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(seconds)
        snapshot = source.collect()
    finally:
        busy.kill()
        busy.wait()
        source.close()
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
