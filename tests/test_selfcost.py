"""What ktop shows of its own cost."""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import root_only

from ktop.collectors.selfcost import SelfCost, parse_run_time_ns
from ktop.engine import LiveSource, Options
from ktop.model import PANE_FUNCTIONS
from ktop.widgets.header import header_text

FDINFO = """pos:\t0
flags:\t02000002
prog_type:\t7
prog_id:\t263
run_time_ns:\t123456789
run_cnt:\t4242
recursion_misses:\t0
"""


def test_run_time_is_read_from_a_programs_fdinfo():
    assert parse_run_time_ns(FDINFO) == 123456789
    assert parse_run_time_ns("pos:\t0\nflags:\t02\n") is None  # not a BPF program


def test_own_cpu_counts_every_thread_in_nanoseconds():
    cost = SelfCost()
    cost.start()
    spin_until = time.process_time() + 0.05
    while time.process_time() < spin_until:
        pass
    measured = cost.measure()
    cost.close()
    assert measured is not None and measured.cpu_percent > 10  # it was spinning


@pytest.mark.live
@root_only
def test_the_header_shows_ktops_cpu_and_its_bpf_programs_time():
    """The BPF programs' time is charged to the tasks they interrupt; the header adds it
    back so the observer's cost is in plain sight."""
    source = LiveSource(Options(hz=999, panes=frozenset({PANE_FUNCTIONS})))
    dd = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M"],
                          stderr=subprocess.DEVNULL)
    try:
        source.start()
        source.collect()
        time.sleep(1.5)
        snapshot = source.collect()
    finally:
        dd.kill()
        dd.wait()
        source.close()
    cost = snapshot.cost
    assert cost is not None and cost.bpf_percent is not None
    assert 0 < cost.bpf_percent < 50  # ~2000 samples/s of a few microseconds each
    assert 0 < cost.cpu_percent < 100
    header = header_text(snapshot).plain
    assert f"ktop CPU {cost.cpu_percent:.1f}%  BPF {cost.bpf_percent:.1f}%" in header
