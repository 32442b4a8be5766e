"""`ktop --record` on the real kernel (root): a dd workload recorded, then found in the
replay at the time it ran; and a disk that fills up under the recorder."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import root_only
from test_recording_cli import ktop

from ktop.panes.blockio.collector import SWEEP_EVERY_S
from ktop.record.fileformat import Recording
from ktop.record.replay import find_time

pytestmark = [pytest.mark.live, root_only]

SCRATCH_PARENT = "/var/tmp"  # on a real disk here (ext4 on vda), unlike /tmp
BLOCK = 64 * 1024
# s: a record is stamped as its CPU interval ends; its other panes' intervals end a moment
# later on a loaded machine (the waits pane settles every thread).
LAG = 0.5
# A request whose completion the kernel's tracepoint never showed is counted lost when its
# address is reused (at once while dd runs) or, on a quiet disk, by the collector's sweep of
# requests older than a sweep: up to two sweeps after dd's last write. Recorded until then,
# every write dd made is in the recording or counted lost.
LOSSES_PROVEN_S = 2 * SWEEP_EVERY_S + 1.0


def records_so_far(path: str) -> int:
    try:
        return len(Recording(path))
    except Exception:  # not even one whole record yet
        return 0


def test_dd_is_found_in_the_replay_at_the_time_it_ran(tmp_path):
    """Record; 2 records in, dd writes with O_DIRECT for about 3 s; the recording goes on
    until ktop can have counted every write it lost. The records holding dd's writes are
    those whose intervals overlap its run, they add up to what dd wrote, and the replay
    pictured at that moment shows dd in the Block I/O pane."""
    path = str(tmp_path / "dd.krec")
    recorder = subprocess.Popen([sys.executable, "-m", "ktop", "--record", path, "-d", "1",
                                 "--duration", "120"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while records_so_far(path) < 2:
            assert time.monotonic() < deadline and recorder.poll() is None, recorder.stderr.read()
            time.sleep(0.2)
        with tempfile.TemporaryDirectory(dir=SCRATCH_PARENT, prefix="ktop-record-") as scratch:
            began = time.time()
            dd = subprocess.Popen(["dd", "if=/dev/zero", f"of={scratch}/out", f"bs={BLOCK}",
                                   "count=100000", "oflag=direct"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(3)
            dd.terminate()
            dd_stderr = dd.communicate(timeout=10)[1]
            ended = time.time()
            written = os.path.getsize(f"{scratch}/out")
        # Once 1 in ~1,000 runs, with --duration 12 (dd ending 5-7 s before the recording):
        # 4 writes missing, 2 counted lost; the other 2, at dd's very end, were counted by
        # the sweep after the recording had stopped.
        time.sleep(max(0.0, ended + LOSSES_PROVEN_S - time.time()))
        recorder.send_signal(signal.SIGINT)  # the interval in progress is recorded too
        _, stderr = recorder.communicate(timeout=60)
    finally:
        if recorder.poll() is None:
            recorder.kill()
    assert recorder.returncode == 0, stderr
    assert written >= 10 * BLOCK, dd_stderr

    recording = Recording(path)
    assert recording.dropped == ""
    with_dd = []
    for index, info in enumerate(recording.records):
        snapshot = recording.snapshot(index)
        dd_writes = [p for p in snapshot.blockio.processes if p.pid == dd.pid and p.rw == "W"]
        if dd_writes:
            with_dd.append((info, sum(p.bytes for p in dd_writes), index))
            assert all(p.comm == "dd" for p in dd_writes)
    assert len(with_dd) >= 2
    # At the right time: each interval overlaps dd's run. A record is stamped once the
    # processes are read too, a moment after the drain (more on a loaded machine, niced).
    for info, _, _ in with_dd:
        assert info.taken_at - info.duration_s <= ended + LAG and info.taken_at >= began
    # Each record counts its own interval: together, what dd wrote, no more, and less only
    # by what ktop says it lost (each record the losses of its own interval).
    losses = [{k: v for k, v in s.blockio.lost.items() if v} for s in recording.snapshots()]
    lost = sum(sum(each.values()) for each in losses)
    recorded = sum(n for _, n, _ in with_dd)
    assert written - lost * BLOCK <= recorded <= written, (
        f"written {written // BLOCK} blocks, recorded {recorded / BLOCK:.2f}, lost {lost}",
        [(round(info.taken_at - ended, 1), each) for info, each in zip(recording.records, losses)])
    busiest, _, _ = max(with_dd, key=lambda row: row[1])
    assert busiest.io_latency_ms > 0

    # A second typed names the first record that holds it, and records share their boundary
    # seconds (a record cut short by a late refresh may hold no second of its own): type a
    # second of dd's run that names a record holding dd's writes.
    dd_records = {index for _, _, index in with_dd}
    seconds = sorted({time.strftime("%H:%M:%S", time.localtime(second))
                      for info, _, _ in with_dd
                      for second in range(int(info.taken_at - info.duration_s),
                                          int(info.taken_at) + 1)})
    at = next((s for s in seconds if find_time(recording.records, s) in dd_records), None)
    assert at is not None, (seconds, [(i.taken_at, i.duration_s) for i in recording.records])
    out = tmp_path / "at.txt"
    result = ktop("--replay", path, "--snapshot", str(out), "--at", at, "-w", "1")
    assert result.returncode == 0, result.stderr
    screen = out.read_text()
    block_io = [line for line in screen.splitlines() if f" {dd.pid} " in line and " dd " in line]
    assert block_io, screen  # dd's row, in the pane of that moment

    rows = list(csv.DictReader(io.StringIO(ktop("--replay", path, "--dump", "csv").stdout)))
    assert len(rows) == len(recording)
    assert sum(1 for row in rows if row["top_io_comm"] == "dd") >= len(with_dd) - 1


def test_a_full_disk_stops_ktop_record_with_one_line(tmp_path):
    """A 64 KiB tmpfs fills after a few records: one line, exit 1, the file whole."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
                   check=True)
    try:
        result = ktop("--record", str(mount / "r.krec"), "-d", "0.2", "--duration", "60")
        assert result.returncode == 1, result.stderr
        full = [line for line in result.stderr.splitlines() if "No space left" in line]
        assert len(full) == 1 and "keeps its" in full[0], result.stderr
        assert "Traceback" not in result.stderr
        recording = Recording(str(mount / "r.krec"))
        assert len(recording) >= 1 and recording.dropped == ""
        assert recording.snapshot(len(recording) - 1).processes
        recording.close()
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_r_records_the_live_screen_and_the_replay_steps_through_it(tmp_path):
    """In a real terminal: R starts recording (the header says so), R stops; each record
    holds one interval (not the screen's 5 s window); the replay's keys move through it."""
    from test_live_tmux import Tmux

    tmux = Tmux()
    try:
        os.chmod(tmp_path, 0o700)
        tmux.run(f"cd {tmp_path} && {sys.executable} -m ktop; printf 'KTOP_%s=%s\\n' EXIT $?")
        tmux.wait_for("samples ")
        deadline = time.monotonic() + 60  # every pane attached: refreshes 1 s apart from here
        while any(loading in tmux.screen() for loading in (
                "compiling", "loading its BPF", "reading the kernel's symbols",
                "waiting for a BPF compiler")):
            assert time.monotonic() < deadline, tmux.screen()
            time.sleep(0.2)
        tmux.send("R")
        tmux.wait_for("● REC ktop-")
        time.sleep(4.5)
        tmux.send("R")
        tmux.wait_for("recording stopped")
        assert "● REC" not in tmux.screen().splitlines()[0]
        tmux.send("q")
        assert tmux.wait_for_line("KTOP_EXIT=", timeout=30) == "0"
        (name,) = [n for n in os.listdir(tmp_path) if n.endswith(".krec")]
        path = str(tmp_path / name)
        assert os.stat(path).st_mode & 0o777 == 0o600
        recording = Recording(path)
        assert 3 <= len(recording) <= 7
        windows = []
        for index, info in enumerate(recording.records):
            snapshot = recording.snapshot(index)
            # One interval each, not the screen's 5 s window. An interval can be short: on a
            # loaded machine a collect that ran late leaves the next one less time.
            assert 0 < snapshot.cpu.window_s <= 1.3
            windows.append(snapshot.cpu.window_s)
            assert snapshot.locks is not None and snapshot.blockio is not None
            assert info.kernel_percent == pytest.approx(snapshot.cpu.times.kernel, abs=1e-3)
        # The intervals follow each other: together they cover the time the records span.
        records = recording.records
        span = records[-1].taken_at - records[0].taken_at + windows[0]
        assert sum(windows) == pytest.approx(span, abs=0.3)
        recording.close()

        tmux.run(f"{sys.executable} -m ktop --replay {name}; printf 'REPLAY_%s=%s\\n' EXIT $?")
        tmux.wait_for(f"record {len(recording)}/{len(recording)}")
        tmux.send("Home")
        tmux.wait_for(f"record 1/{len(recording)}")
        tmux.send("Right")
        tmux.wait_for(f"record 2/{len(recording)}")
        tmux.send("q")
        assert tmux.wait_for_line("REPLAY_EXIT=", timeout=30) == "0"
    finally:
        tmux.close()
