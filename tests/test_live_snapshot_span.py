"""A headless snapshot on the real kernel (root): every pane covers the same seconds, and
the compiler is not niced behind a first frame no one will see (issue 26)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import root_only

from ktop.collectors import loader
from ktop.engine import LiveSource, Options
from ktop.model import PANE_FUNCTIONS

pytestmark = [pytest.mark.live, root_only]


def test_every_pane_of_a_snapshot_covers_the_same_seconds(tmp_path):
    # The panes attach one after the other (CPU first, block I/O last): each counted from its
    # own attach, a one-second snapshot's panes covered 3.06, 2.42 and 1.15 s.
    path = tmp_path / "ktop.json"
    began = time.time()
    subprocess.run([sys.executable, "-m", "ktop", "--snapshot", str(path), "--duration", "1"],
                   stdin=subprocess.DEVNULL, check=True, timeout=180)
    ended = time.time()
    data = json.loads(path.read_text())
    spans = {pane: data[pane]["window_s"] for pane in ("cpu", "locks", "blockio", "waits")}
    assert all(abs(span - data["duration_s"]) <= 0.05 for span in spans.values()), spans
    assert data["duration_s"] == pytest.approx(1.0, abs=0.1)
    # The seconds they cover are wall-clock seconds of this run, its last ones.
    assert began < data["taken_at"] - data["duration_s"] and data["taken_at"] <= ended


def compiler_nice(source: LiveSource, patient: bool) -> int:
    source.start(wait=False, patient=patient)
    deadline = time.monotonic() + 10
    while not loader.compiler_pid() and time.monotonic() < deadline:
        time.sleep(0.01)
    pid = loader.compiler_pid()
    assert pid, "no compiler process started"
    time.sleep(0.05)  # niced right after its start
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_a_headless_run_compiles_at_ktops_own_priority(monkeypatch, tmp_path):
    """Niced, the compile waited behind a saturated machine's every task (14 s of a headless
    `--snapshot --duration 5` that took 23-30 s); only the screen's start is patient."""
    def nothing_compiled(name: str) -> None:  # so that the start compiles
        empty = tmp_path / name
        empty.mkdir(mode=0o700)
        monkeypatch.setenv("KTOP_BPF_CACHE", str(empty))

    options = Options(panes=frozenset({PANE_FUNCTIONS}))
    headless, screen = LiveSource(options), LiveSource(options)
    try:
        nothing_compiled("headless")
        assert compiler_nice(headless, patient=False) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        headless.close()
    try:
        nothing_compiled("screen")
        assert compiler_nice(screen, patient=True) > os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        screen.close()
