"""Live: under --cgroup the header shows the cgroup's own PSI (its cpu/io/memory.pressure)
beside the machine's (root: it makes a cgroup v2 and moves processes into it)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from conftest import live_source, root_only

from ktop.cgroups import cgroup2_mount
from ktop.cli import _check_cgroup, _options, parse_args
from ktop.collectors.pressure import parse_pressure
from ktop.engine import RecordedSource
from ktop.ui.headless import render_screen

pytestmark = root_only

SPIN = "import os\nos.sched_setaffinity(0, {1})\nwhile True: pass\n"


@pytest.fixture
def crowded_cgroup() -> Iterator[tuple[str, str]]:
    """A new cgroup v2 holding two spinners pinned to one CPU: each waits for the CPU
    half of the time, so the cgroup's own cpu pressure rises."""
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    relative = f"/ktop-psi-{uuid.uuid4().hex[:8]}"
    path = mount + relative
    os.mkdir(path)
    spinners = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", SPIN])
                for _ in range(2)]
    try:
        for spinner in spinners:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(spinner.pid))
        yield relative, path
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        for _ in range(50):  # its last task may take a moment to leave
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def test_the_header_shows_the_cgroups_own_pressure(crowded_cgroup) -> None:
    relative, path = crowded_cgroup
    args = parse_args(["--cgroup", relative.lstrip("/")])  # as a user names it
    assert _check_cgroup(args) == ""
    with live_source(panes=frozenset(), cgroup=_options(args).cgroup) as source:
        time.sleep(4.5)  # avg10 is updated every 2 s
        snapshot = source.collect()
        with open(os.path.join(path, "cpu.pressure"), "rb") as f:
            own_cpu, _ = parse_pressure(f.read())
    pressure = snapshot.cgroup_pressure
    assert pressure is not None and snapshot.cgroup_pressure_of == relative, snapshot
    assert pressure.cpu_some > 5, pressure
    assert abs(pressure.cpu_some - own_cpu) <= 5, (pressure, own_cpu)
    assert snapshot.pressure is not None  # the machine's too
    text = asyncio.run(render_screen(RecordedSource([snapshot]), (200, 50), "txt",
                                     cgroup=relative))
    header = "\n".join(text.splitlines()[:3])
    assert f"PSI of {relative} cpu {pressure.cpu_some:.1f}" in header, header
