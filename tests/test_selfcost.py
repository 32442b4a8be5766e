"""What ktop shows of its own cost."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from conftest import root_only

from ktop.collectors.bpfsys import program_info
from ktop.collectors.selfcost import SelfCost, bpf_programs, bpf_run_time_ns
from ktop.engine import LiveSource, Options
from ktop.model import PANE_FUNCTIONS
from ktop.ui.widgets.header import header_text


def test_a_descriptor_that_is_no_bpf_program_has_no_run_time():
    """A program's descriptor closed and reused for a file: the sum says so (None), and
    SelfCost lists the programs again instead of adding a wrong figure."""
    read_end, write_end = os.pipe()
    try:
        assert program_info(read_end) is None
        assert bpf_run_time_ns({read_end: 7}) is None
    finally:
        os.close(read_end)
        os.close(write_end)


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
        held = bpf_programs()
        (sampler, _aggregator), = source._running.values()
        loaded = sampler._program.program
        program_ids = {fd: held.get(fd) for fd in loaded.programs.values()}
        map_fds = {m.fd for m in loaded.maps.values()}
        # The same system call answers for a map's descriptor, with a shorter struct.
        map_read_as_program = program_info(loaded.maps["generation"].fd)
    finally:
        dd.kill()
        dd.wait()
        source.close()
    # Every program the sampler loaded is counted, and none of its maps.
    assert program_ids and None not in program_ids.values()
    assert not held.keys() & map_fds
    assert map_read_as_program is None
    cost = snapshot.cost
    assert cost is not None and cost.bpf_percent is not None
    assert 0 < cost.bpf_percent < 50  # ~2000 samples/s of a few microseconds each
    assert 0 < cost.cpu_percent < 100
    header = header_text(snapshot).plain
    assert f"ktop CPU {cost.cpu_percent:.1f}%  BPF {cost.bpf_percent:.1f}%" in header
