"""/proc files kept open: read whole however the kernel cuts its reads, their descriptors
kept above select()'s range and all of them within one budget under the descriptor limit."""

from __future__ import annotations

import os
import resource
import select
import subprocess
import sys
import textwrap

import pytest

from ktop.collectors.diskstats import DiskStatsReader
from ktop.collectors.procfiles import SELECT_LIMIT, KeptFds, pread_record, pread_to_eof
from ktop.panes.processes.collector import ProcessCollector

PAGE = 4096


def seq_file_reads(monkeypatch, page: int = PAGE) -> list[int]:
    """os.pread as a multi-record seq_file answers it: whole lines, at most a page a read,
    whatever the size asked. Returns the offsets read at."""
    real = os.pread
    offsets: list[int] = []

    def pread(fd: int, size: int, offset: int) -> bytes:
        offsets.append(offset)
        data = real(fd, min(size, page), offset)
        if len(data) == page and b"\n" in data:  # no line cut in two, as seq_file keeps them
            data = data[:data.rindex(b"\n") + 1]
        return data

    monkeypatch.setattr(os, "pread", pread)
    return offsets


def diskstats(disks: int, reads: int) -> bytes:
    return b"".join(f"   7 {n:7d} loop{n} {reads} 0 {8 * reads} 1 0 0 0 0 0 1 1 0 0 0 0 0 0\n"
                    .encode() for n in range(disks))


def test_every_disk_of_a_diskstats_longer_than_a_page_is_read(tmp_path, monkeypatch):
    """200 loop devices: /proc/diskstats is 20 KB, a read gives one page of it; the short
    read was taken as its end, and the disks view showed 69 of 203 disks."""
    for n in range(203):
        (tmp_path / "block" / f"loop{n}").mkdir(parents=True)
    path = tmp_path / "diskstats"
    path.write_bytes(diskstats(203, reads=1))
    assert len(path.read_bytes()) > 2 * PAGE
    offsets = seq_file_reads(monkeypatch)
    reader = DiskStatsReader(str(path), str(tmp_path), names=lambda dev: f"dev{dev}")
    assert reader.read() is None
    path.write_bytes(diskstats(203, reads=5))
    profile = reader.read()
    assert len(profile.disks) == 203
    assert all(d.reads == 4 for d in profile.disks)
    assert len(offsets) > 2 and offsets[0] == 0 and offsets[1] > 0  # read on to the end
    reader.close()


def test_a_one_record_file_longer_than_its_buffer_is_read_whole(tmp_path, monkeypatch):
    """/proc/PID/cgroup on a hybrid machine with deep v1 paths outgrows 4 KB; its v2 line
    comes last, and a cut read lost the process's cgroup."""
    from test_processes_collector import FakeProc  # noqa: PLC0415

    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "app", b"app\0")
    v1 = "".join(f"{n}:ctl{n}:/kubepods/" + "p" * 400 + "\n" for n in range(12, 0, -1))
    (tmp_path / "100" / "cgroup").write_bytes((v1 + "0::/kubepods/pod1/app\n").encode())
    collector = ProcessCollector(str(tmp_path))
    (row,) = collector.collect()
    assert row.cgroup == "/kubepods/pod1/app"
    collector.close()


def test_reads_of_one_record_stop_at_a_short_read_and_of_many_at_the_end(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_record(fd, 128) == b"x" * 10000  # filled the buffer: read on
        assert pread_to_eof(fd, 3000) == b"x" * 10000
        path.write_bytes(b"short\n")
        assert pread_record(fd, 128) == b"short\n"
    finally:
        os.close(fd)


def test_kept_descriptors_live_above_selects_range_and_within_their_room():
    kept = KeptFds(limit=SELECT_LIMIT + 200)
    assert kept.floor == SELECT_LIMIT and 0 < kept.room < 200
    fds = []
    for _ in range(kept.room + 5):
        fd = kept.keep(os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC))
        if fd is not None:
            fds.append(fd)
    try:
        assert len(fds) == kept.room  # the rest closed: opened again at each read
        assert min(fds) >= SELECT_LIMIT
        low = os.open("/dev/null", os.O_RDONLY)
        assert low < SELECT_LIMIT  # what others open next can be watched by select()
        select.select([low], [], [], 0)
        os.close(low)
    finally:
        for fd in fds:
            kept.release(fd)
    assert kept.kept == 0
    # no room above 1024: the kept share the low range, leaving a reserve to the rest
    low = KeptFds(limit=1024)
    assert low.floor == 0 and low.room <= 512


SCAN = textwrap.dedent("""
    import os, resource, select, subprocess, sys
    soft, hard, count = map(int, sys.argv[1:])
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(count)]
    from ktop.panes.processes.collector import ProcessCollector
    try:
        collector = ProcessCollector()
        for _ in range(3):
            rows = collector.collect()
        pids = {row.pid for row in rows}
        missing = [p.pid for p in sleepers if p.pid not in pids]
        spare = []  # what the rest of ktop (BPF maps, perf events, pipes) can still open
        try:
            for _ in range(200):
                spare.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as e:
            print("EMFILE after", len(spare))
        pipe = os.pipe()  # the terminal driver's wake pipe, watched by select()
        select.select([pipe[0]], [], [], 0)
        print("missing", len(missing), "spare", len(spare), "highest", max(pipe))
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
""")


def test_a_scan_of_many_processes_under_a_low_descriptor_limit_leaves_room_for_the_rest():
    """ulimit -n 1024 and ~770 processes: four tables of descriptors, each capped at
    limit - 256, took every descriptor (EMFILE in the BPF loader and the snapshot writer);
    processes whose files could not be opened were silently left out. One budget for all,
    short of the limit; the processes past it are read by opening again."""
    out = subprocess.run([sys.executable, "-c", SCAN, "1024", "1024", "400"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "EMFILE" not in out, out
    missing, spare, highest = out.split()[1::2]
    assert (missing, spare) == ("0", "200"), out
    assert int(highest) < SELECT_LIMIT


def test_kept_descriptors_of_many_processes_leave_select_working():
    """~330 processes kept ~4 descriptors each: a pipe opened after the scan got a number
    past 1024 and Textual's select() refused it (ValueError: filedescriptor out of range),
    so the TUI did not start. Kept descriptors live above select()'s range."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < 4096:
        pytest.skip(f"the hard descriptor limit ({hard}) leaves no room above select()'s")
    out = subprocess.run([sys.executable, "-c", SCAN, "4096", "4096", "400"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    missing, spare, highest = out.split()[1::2]
    assert (missing, spare) == ("0", "200"), out
    assert int(highest) < SELECT_LIMIT
