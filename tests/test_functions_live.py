"""Hot functions on the real kernel beside perf: Children as `perf record -g` + `perf report
--children` counts them, and a busy Debian python3.11 named in its user stacks (root).

ktop and `perf record -a -g` sample the same seconds at the same rate while the test's own
workloads run (`dd if=/dev/urandom`: the read system call; a Python busy loop: user time).
Other tests may run beside: both tools see the same machine, so they are compared with each
other, not with a quiet machine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import first_in_line, root_only

from ktop.engine import LiveSource, Options
from ktop.model import NOT_CODE, PANE_FUNCTIONS
from ktop.stacktree import user_functions

pytestmark = [pytest.mark.live, root_only]

HZ = 499
SECONDS = 3.0
PYTHON = "/usr/bin/python3.11"
# Children from two samplings of a few thousand samples each differ by a few points.
TOLERANCE = 5.0  # percentage points


def start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    if not shutil.which("perf") or not Path(PYTHON).exists():
        pytest.skip("needs perf and Debian's python3.11")
    data = tmp_path_factory.mktemp("perf") / "perf.data"
    with first_in_line():
        source = LiveSource(Options(hz=HZ, interval_s=1.0, window_s=SECONDS, cumulative=False,
                                    panes=frozenset({PANE_FUNCTIONS})))
        workloads = []
        try:
            source.start()
            assert PANE_FUNCTIONS not in source.unavailable, source.unavailable
            workloads = [start("dd", "if=/dev/urandom", "of=/dev/null", "bs=1M"),
                         start(PYTHON, "-c", "while True: pass")]
            time.sleep(0.5)
            source.collect()  # the window starts here, as perf does
            perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", str(HZ), "-o", str(data),
                                     "--", "sleep", str(SECONDS)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(SECONDS)
            snapshot = source.collect()
            perf.wait(timeout=30)
        finally:
            source.close()
            for process in workloads:
                process.kill()
                process.wait()
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--children", "--stdio", "--sort", "sym", "-g", "none",
         "--percent-limit", "1"], capture_output=True, text=True, check=True).stdout
    return snapshot, perf_children(report), workloads[1].pid


def perf_children(report: str) -> dict[str, tuple[float, float]]:
    """{kernel function: (children %, self %)} from `perf report --children --sort sym`."""
    rows = {}
    for line in report.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+\[k\]\s+(\S+)", line)
        if match:
            rows[match.group(3)] = (float(match.group(1)), float(match.group(2)))
    return rows


def test_children_agree_with_perf_report_children(sampled):
    snapshot, perf, _ = sampled
    cpu = snapshot.cpu
    taken = cpu.total_samples  # perf's shares are of the samples taken
    ours = {f.symbol: f for f in cpu.functions}
    compared = {name: figures for name, figures in perf.items() if figures[0] >= 10.0}
    # The urandom read path, from the system call entry down.
    assert {"get_random_bytes_user", "do_syscall_64"} <= compared.keys(), perf
    for name, (children, _) in compared.items():
        assert name in ours, (name, perf)
        share = 100.0 * ours[name].children / taken
        assert share == pytest.approx(children, abs=TOLERANCE), (name, share, children)
    assert all(f.children >= f.samples for f in cpu.functions)


def test_a_busy_debian_python_is_named_in_its_user_stacks(sampled):
    """python3.11 is stripped: .dynsym names its interpreter loop, as perf does; the frames a
    frame-pointer walk reads from its data after it end as one [not code] marker."""
    snapshot, _, python = sampled
    stacks = [s for s in snapshot.cpu.stacks if s.pid == python]
    samples = sum(s.samples for s in stacks)
    assert samples > 0.1 * HZ * SECONDS  # a shared machine: at least a tenth of a CPU
    named = [s for s in stacks if s.user_frames
             and s.user_frames[0].symbol.startswith("_PyEval_EvalFrameDefault+")]
    assert sum(s.samples for s in named) > 0.5 * samples
    assert {s.user_frames[0].module for s in named} == {PYTHON}
    for stack in stacks:
        markers = [i for i, f in enumerate(stack.user_frames) if f.module == NOT_CODE]
        assert markers in ([], [len(stack.user_frames) - 1]), stack.user_frames
    hot = user_functions(stacks, HZ * snapshot.cpu.window_s * snapshot.cpu.cpus)
    assert hot[0].symbol == "_PyEval_EvalFrameDefault" and hot[0].module == PYTHON
