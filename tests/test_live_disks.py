"""The block pane's disks view on the real kernel, while dd writes: its iostat figures are the
ones /proc/diskstats gives over the same seconds, and the header's iowait is /proc/stat's."""

from __future__ import annotations

import mmap
import os
import subprocess
import tempfile
import time

import pytest
from conftest import live_source, run_app, running

from ktop.collectors.disks import DiskNames, kernel_dev
from ktop.engine import LiveSource, Options, RecordedSource
from ktop.ui.app import build_app

pytestmark = pytest.mark.live

SCRATCH_PARENT = "/var/tmp"  # on a real disk here (ext4 on vda), unlike /tmp


def kernel_counters(name: str) -> list[int]:
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if fields[2] == name:
                return [int(v) for v in fields[3:]]
    raise LookupError(name)


def disks_view(snapshot) -> dict[str, dict[str, str]]:
    """The disks view as shown (3, then v to it): per device, each column's text."""
    shown: dict[str, dict[str, str]] = {}

    async def scenario(pilot):
        await pilot.press("3")
        pane = pilot.app.main_screen.pane("blockio")
        while pane.view != "disks":
            await pilot.press("v")
        await pilot.pause()
        table = pane.table
        labels = [c.label for c in table.table_columns]
        for i in range(table.row_count):
            cells = [cell.text for cell in table.get_row_at(i)]
            shown[cells[0]] = dict(zip(labels, cells))

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2), scenario, size=(200, 50))
    return shown


def test_the_disks_view_shows_what_proc_diskstats_counted_while_dd_wrote():
    with tempfile.TemporaryDirectory(dir=SCRATCH_PARENT, prefix="ktop-live-") as path:
        st_dev = os.stat(path).st_dev
        major, minor = os.major(st_dev), os.minor(st_dev)
        disk = DiskNames()(kernel_dev(major, minor))
        if not os.path.isdir(f"/sys/block/{disk}"):
            pytest.skip(f"{SCRATCH_PARENT} is on {disk}, a partition or no whole disk")
        # A long window: the view's figures cover every second since the source started.
        # Built before the first read (not live_source()): building it took 0.57 s under
        # load, seconds the test's reads counted and the source's window did not.
        source = LiveSource(Options(panes=frozenset(), window_s=600))
        with running(["dd", "if=/dev/zero", f"of={path}/direct", "bs=64k", "count=1000000",
                      "oflag=direct"]):
            time.sleep(0.3)  # dd is writing
            before, started = kernel_counters(disk), time.monotonic()
            source.start()
            try:
                time.sleep(3)
                snapshot = source.collect()
                after, ended = kernel_counters(disk), time.monotonic()
            finally:
                source.close()
    grown = [a - b for a, b in zip(after, before)]
    seconds = ended - started
    reads, writes, write_sectors, write_ms, busy_ms = (grown[0], grown[4], grown[6], grown[7],
                                                       grown[9])
    print(f"{disk} over {seconds:.3f} s: {writes} writes, {write_sectors} sectors, "
          f"{write_ms} ms, busy {busy_ms} ms; shown {snapshot.iostat}")
    assert writes >= 100, "dd wrote too little to compare"
    row = disks_view(snapshot)[disk]
    # Both sides count the same seconds but for the few milliseconds between the test's
    # reads and the source's: what dd (and the machine's other writers) did meanwhile.
    assert float(row["w/s"]) == pytest.approx(writes / seconds, rel=0.05)
    assert float(row["wMB/s"]) == pytest.approx(write_sectors * 512 / 2**20 / seconds, rel=0.05)
    assert float(row["r/s"]) == pytest.approx(reads / seconds, rel=0.3, abs=3)
    assert float(row["w_await"]) == pytest.approx(write_ms / writes, rel=0.1, abs=0.02)
    assert float(row["%util"]) == pytest.approx(min(100.0, busy_ms / seconds / 10), abs=5)
    assert float(row["aqu-sz"]) == pytest.approx(grown[10] / seconds / 1000, rel=0.1, abs=0.02)


def test_the_header_shows_iowait_as_proc_stat_counts_it():
    def cpu_line() -> list[int]:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:9]]

    with tempfile.TemporaryDirectory(dir=SCRATCH_PARENT, prefix="ktop-live-") as path, \
            running(["dd", "if=/dev/zero", f"of={path}/sync", "bs=4k", "count=1000000",
                     "oflag=dsync"]), live_source(panes=frozenset()) as source:
        # Synchronous writes leave the CPUs idle waiting for the disk: iowait.
        before = cpu_line()
        time.sleep(2)
        snapshot = source.collect()
        after = cpu_line()
    grown = [a - b for a, b in zip(after, before)]
    iowait = 100 * grown[4] / sum(grown)
    times = snapshot.cpu_times
    print(f"/proc/stat iowait {iowait:.1f}%, shown {times}")
    assert times.iowait == pytest.approx(iowait, abs=3)
    assert times.idle == pytest.approx(100 * grown[3] / sum(grown), abs=3)

    text = {}

    async def scenario(pilot):
        await pilot.pause()
        text["header"] = "\n".join(line.plain for line in pilot.app.main_screen.header_bar()._lines)

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2), scenario, size=(200, 50))
    assert f"iowait {times.iowait:4.1f}%" in text["header"]


def test_two_hundred_loop_devices_are_all_read_from_proc_diskstats(tmp_path):
    """/proc/diskstats gives a page of disks a read: with 200 loop devices the short read was
    taken as its end, and the disks view showed 69 of 203 disks."""
    from ktop.collectors.diskstats import DiskStatsReader  # noqa: PLC0415

    if os.geteuid() != 0:
        pytest.skip("losetup needs root")
    devices = []
    try:
        for n in range(200):
            backing = tmp_path / f"disk{n}"
            backing.write_bytes(b"\0" * 65536)
            devices.append(subprocess.run(["losetup", "--find", "--show", str(backing)],
                                          capture_output=True, text=True,
                                          check=True).stdout.strip())
        for device in devices:  # each does I/O: iostat lists no disk unused since boot
            fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
            try:
                os.preadv(fd, [mmap.mmap(-1, 4096)], 0)
            finally:
                os.close(fd)
        with open("/proc/diskstats", "rb") as f:
            whole = f.read()
            assert len(os.pread(f.fileno(), 1 << 16, 0)) < len(whole)  # a page a read
        reader = DiskStatsReader()
        reader.read()
        profile = reader.read()
        shown = {disk.disk for disk in profile.disks}
        assert {os.path.basename(d) for d in devices} <= shown
        reader.close()
    finally:
        for device in devices:
            subprocess.run(["losetup", "--detach", device], capture_output=True)
