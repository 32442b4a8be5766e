"""Live: a workload in a transient cgroup found and named in the panes, and a buffered writer
shown with its write rate while writeback threads send its bytes (root, real BPF)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid

import pytest
from conftest import live_source, root_only, running

from ktop.cgroups import cgroup2_mount, short_name
from ktop.cli import _check_cgroup, parse_args
from ktop.engine import RecordedSource
from ktop.model import PANE_BLOCKIO, PANE_FUNCTIONS
from ktop.panes.blockio.widget import WRITEBACK_COMMS, writeback_share
from ktop.ui.headless import render_screen

pytestmark = root_only


@pytest.fixture
def transient_cgroup():
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    relative = f"/ktop-test-{uuid.uuid4().hex[:8]}"
    path = mount + relative
    os.mkdir(path)
    try:
        yield relative, path
    finally:
        for _ in range(50):  # its last task may take a moment to leave
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)
        assert not os.path.exists(path)


def test_a_workload_in_a_transient_cgroup_is_filtered_and_named(transient_cgroup):
    relative, path = transient_cgroup
    with running(["nice", "-n", "19", "dd", "if=/dev/urandom", "of=/dev/null",
                  "bs=64k"]) as workload:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(workload.pid))
        with live_source(panes=frozenset({PANE_FUNCTIONS}), cumulative=True) as source:
            time.sleep(2.5)
            snapshot = source.collect()
    assert [p.cgroup for p in snapshot.processes if p.pid == workload.pid] == [relative]
    ours = [s for s in snapshot.cpu.stacks if s.cgroup == relative]
    assert ours and {s.pid for s in ours} == {workload.pid}
    text = asyncio.run(render_screen(RecordedSource([snapshot]), (200, 50), "txt",
                                     cgroup=relative))
    assert f"cgroup {relative} only (Esc: all)" in text.splitlines()[0]
    assert "get_random" in text or "chacha" in text  # urandom's kernel functions, its own
    assert f"ktop-test-{relative[-8:]}" in text  # the CGROUP column of its process
    assert "swapper" not in text and "kworker" not in text


def test_a_buffered_writer_is_shown_with_its_write_rate(tmp_path):
    target = tmp_path / "out"
    # dd bs=1M count=64, fed a MiB every 20 ms so it lives through several refreshes.
    feeder = ("for i in $(seq 64); do head -c 1048576 /dev/zero; sleep 0.02; done | "
              f"dd bs=1M count=64 iflag=fullblock of={target} 2>/dev/null; sync")
    with live_source(interval_s=0.3, panes=frozenset({PANE_BLOCKIO})) as source:
        writer = subprocess.Popen(["nice", "-n", "19", "sh", "-c", feeder])
        rates = []
        while writer.poll() is None:
            time.sleep(0.3)
            snapshot = source.collect()
            rates += [p.disk_write_bps for p in snapshot.processes
                      if p.comm == "dd" and p.disk_write_bps]
        source.cumulative = True
        time.sleep(1.0)
        final = source.collect()
    assert rates and max(rates) > 4 * 2**20  # MiB/s: the writer, not the kworker
    assert target.stat().st_size == 64 << 20
    written = sum(p.bytes for p in final.blockio.processes if p.rw == "W")
    assert written >= 48 << 20
    # dd's pages went to the disk through the writeback threads: most of its 64 MiB.
    by_writeback = sum(p.bytes for p in final.blockio.processes
                       if p.rw == "W" and p.comm.startswith(WRITEBACK_COMMS))
    assert by_writeback >= 32 << 20
    text = asyncio.run(render_screen(RecordedSource([final]), (160, 50), "txt"))
    # The note says so, and where the writer shows, when they sent most of the machine's
    # bytes: other writers on a busy machine (other tests' direct writes) may send more.
    note = "sent by writeback threads (kworker)" in text and "DISK W/s" in text
    assert note == (by_writeback * 2 > written) == (writeback_share(final.blockio) is not None)


def test_the_cli_takes_a_container_cgroup_by_the_name_ktop_shows_it_by():
    """A hand-made podman cgroup (containers cannot run here): `--cgroup` takes the name the
    CGROUP column shows, and the full path under the mount."""
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    container_id = uuid.uuid4().hex * 2
    relative = f"/ktop-test-{container_id[:8]}/libpod-{container_id}.scope"
    os.makedirs(mount + relative)
    try:
        shown = short_name(relative)
        assert shown == f"podman:{container_id[:12]}"
        for given in (shown, mount + relative, relative):
            args = parse_args(["--cgroup", given, "--snapshot", "/tmp/x.txt"])
            assert _check_cgroup(args) == "" and args.cgroup == relative
    finally:
        os.rmdir(mount + relative)
        os.rmdir(os.path.dirname(mount + relative))


def test_a_new_cgroup_is_named_without_walking_the_hierarchy(transient_cgroup):
    """10,000 cgroups and a new one five times a second: each unknown id walked the whole
    hierarchy (0.39 s), and `ktop --record` went from 2% to 36% of a CPU. The one id is
    opened by handle instead; one removed before it is named is no walk either."""
    from ktop.cgroups import CgroupNames  # noqa: PLC0415

    relative, path = transient_cgroup
    names = CgroupNames()
    assert names.name(os.stat(cgroup2_mount()).st_ino) == "/"
    for child in ("new", "gone"):
        os.mkdir(f"{path}/{child}")
    try:
        new, gone = os.stat(f"{path}/new").st_ino, os.stat(f"{path}/gone").st_ino
        os.rmdir(f"{path}/gone")
        assert names.name(new) == f"{relative}/new"
        assert names.name(gone) == f"[cgroup {gone}]"
        assert names.scans == 0
    finally:
        os.rmdir(f"{path}/new")
