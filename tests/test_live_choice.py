"""A pane not shown costs nothing, on the real kernel (root): ktop loads the BPF programs of
the panes chosen only; key p in a real terminal attaches a pane added and unloads the
programs of one removed; a headless run collects what --panes names, nothing else."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

import psutil
import pytest
from conftest import (
    HeldPrograms,
    bpf_programs_of,
    first_in_line,
    loaded_bpf_programs,
    root_only,
    wait_until_unloaded,
)
from test_live_tmux import Tmux

from ktop import config
from ktop.registry import bpf_panes

pytestmark = [pytest.mark.live, root_only]


def panes_of(names: set[str]) -> set[str]:
    """The panes whose programs these are, by the names the registry gives them."""
    return {spec.name for name in names for spec in bpf_panes()
            if name.startswith(spec.bpf_programs)}


def held_by(pid: int) -> dict[int, str]:
    """{id: name} of the BPF programs the process holds open."""
    loaded = loaded_bpf_programs()
    return {i: loaded[i] for i in bpf_programs_of(pid) if i in loaded}


def wait_for_panes(pid: int, panes: set[str], seconds: float = 90) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while True:
        held = held_by(pid)
        if panes_of(set(held.values())) == panes or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


@pytest.fixture
def terminal():
    tmux = Tmux()
    try:
        with first_in_line():
            yield tmux
    finally:
        tmux.close()


def test_key_p_loads_a_pane_added_and_unloads_one_removed(terminal, tmp_path):
    command = (f"XDG_CONFIG_HOME={shlex.quote(str(tmp_path))} "
               f"{shlex.quote(sys.executable)} -m ktop --panes functions; "
               "printf 'KTOP_%s=%s\\n' EXIT $?")
    terminal.run(command)
    terminal.wait_for("samples ")
    shell = psutil.Process(int(terminal.display("#{pane_pid}")))
    ktop = next(p for p in shell.children() if "ktop" in " ".join(p.cmdline()))
    held = wait_for_panes(ktop.pid, {"functions"})
    assert panes_of(set(held.values())) == {"functions"}, held  # the others: not loaded
    screen = terminal.screen()
    assert "1 Hot kernel functions" in screen and "Lock contention" not in screen

    terminal.send("p")
    terminal.wait_for("panes shown")
    terminal.send("Down", "Space", "Escape")  # locks ticked
    terminal.wait_for("2 Lock contention")
    with_locks = wait_for_panes(ktop.pid, {"functions", "locks"})
    assert panes_of(set(with_locks.values())) == {"functions", "locks"}, with_locks
    lock_ids = {i for i, name in with_locks.items() if panes_of({name}) == {"locks"}}
    assert (tmp_path / "ktop" / "ktop.conf").read_text().splitlines()[-1] == \
        "panes = functions,locks"

    terminal.send("p")
    terminal.wait_for("panes shown")
    terminal.send("Down", "Space", "Escape")  # locks unticked
    deadline = time.monotonic() + 30
    while "Lock contention" in terminal.screen() and time.monotonic() < deadline:
        time.sleep(0.2)
    after = wait_for_panes(ktop.pid, {"functions"}, seconds=30)
    assert panes_of(set(after.values())) == {"functions"}, after
    assert not wait_until_unloaded(lock_ids), "the lock pane's programs stayed loaded"
    assert set(held) <= set(after), "the pane kept was not reloaded"
    terminal.send("q")
    assert terminal.wait_for_line("KTOP_EXIT=", timeout=30) == "0"
    # The next start shows what was kept.
    assert config.read_config(str(tmp_path / "ktop" / "ktop.conf")) == (("functions",), "")


def test_a_headless_record_loads_the_panes_named_only(tmp_path):
    record = tmp_path / "choice.krec"
    with first_in_line():
        ktop = subprocess.Popen([sys.executable, "-m", "ktop", "--record", str(record),
                                 "--panes", "processes,locks", "--duration", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        held = HeldPrograms(ktop.pid)
        names: set[str] = set()
        deadline = time.monotonic() + 120
        while ktop.poll() is None and time.monotonic() < deadline:
            ids = held.poll()
            loaded = loaded_bpf_programs()
            names |= {loaded[i] for i in ids if i in loaded}
            time.sleep(0.1)
        _, err = ktop.communicate(timeout=30)
    assert ktop.returncode == 0, err
    assert panes_of(names) == {"locks"}, names
    assert held.left_behind() == ([], set())
