"""The live tests' scheduling helper must work wherever CI starts pytest: inside a session's
autogroup (a terminal, tmux) or in none (a runner started by init reads an empty
/proc/self/autogroup). It once raised IndexError there and failed every live test."""

from __future__ import annotations

import os

from conftest import first_in_line, root_only


@root_only
def test_outside_any_autogroup_nice_decides_and_is_put_back(tmp_path):
    empty = tmp_path / "autogroup"
    empty.write_text("")  # what a task in the root task group reads
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with first_in_line(str(empty)):
        assert os.getpriority(os.PRIO_PROCESS, 0) == -20
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert empty.read_text() == ""  # never written as if it were an autogroup


@root_only
def test_inside_an_autogroup_its_nice_is_raised_and_put_back(tmp_path):
    fake = tmp_path / "autogroup"
    fake.write_text("/autogroup-9 nice 3\n")
    with first_in_line(str(fake)):
        assert fake.read_text() == "-20"
    assert fake.read_text() == "3"
