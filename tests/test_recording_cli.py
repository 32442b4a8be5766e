"""`ktop --replay RECORDING` from the command line: pictures at a time, dumps for scripts,
and every bad file answered in one line. Recordings are made here from the recorded
fixture (hostile process names included), one record a second."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from conftest import as_nobody, check_contract

from ktop.model import CpuTimes, Snapshot, StackSample
from ktop.record.fileformat import Recording, RecordWriter
from ktop.stacktree import hot_functions

START = 1767268245.0  # 2026-01-01 11:50:45 UTC (the tests run with TZ=UTC)
SPIKE = 100  # the record where the kernel's CPU and I/O latency peak


def ktop(*args: str, prefix: tuple[str, ...] = (), timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "ktop", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd="/",
                          env={**os.environ, "TZ": "UTC"})


SPIKE_FUNCTION = "spike_only_function"  # sampled in the SPIKE record alone


def interval_of(snapshot: Snapshot, i: int) -> Snapshot:
    """Record i: one second, the kernel busier and the disk slower at SPIKE, where a function
    shows up that no other record has."""
    cpu = snapshot.cpu
    kernel = 90.0 if i == SPIKE else 10.0 + i % 7
    stacks = cpu.stacks
    if i == SPIKE:
        stacks += (StackSample(pid=8072, comm="dd", samples=5,
                               frames=(f"{SPIKE_FUNCTION}+0x10", "do_syscall_64+0x71"),
                               modules=("[kernel.kallsyms]",) * 2),)
    cpu = dataclasses.replace(
        cpu, window_s=1.0, stacks=stacks, functions=hot_functions(stacks, 99 * 1.0 * 2),
        times=CpuTimes(user=5.0, kernel=kernel, idle=95.0 - kernel, ticks=200))
    io = snapshot.blockio
    disks = tuple(dataclasses.replace(d, avg_lat_ms=40.0 if i == SPIKE else 0.5) for d in io.disks)
    return dataclasses.replace(
        snapshot, cpu=cpu, blockio=dataclasses.replace(io, disks=disks, window_s=1.0),
        locks=dataclasses.replace(snapshot.locks, window_s=1.0), taken_at=START + i,
        duration_s=1.0)


def make_recording(path, snapshot: Snapshot, count: int = 180) -> str:
    writer = RecordWriter(str(path))
    for i in range(count):
        writer.append(interval_of(snapshot, i))
    writer.close()
    return str(path)


@pytest.fixture
def recording(tmp_path, recorded_snapshot) -> str:
    return make_recording(tmp_path / "session.krec", recorded_snapshot)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ktop: "), lines
    assert "Traceback" not in result.stderr and "\x1b" not in result.stderr
    return lines[0]


def test_a_moment_pictured_without_privileges(shared_dir, recorded_snapshot):
    path = make_recording(os.path.join(shared_dir, "session.krec"), recorded_snapshot)
    os.chmod(path, 0o644)  # a copy handed to someone else
    out = os.path.join(shared_dir, "at.txt")
    prefix = tuple(as_nobody(shared_dir)) if os.geteuid() == 0 else ()
    result = ktop("--replay", path, "--snapshot", out, "--at", "11:52:25", "-w", "1", prefix=prefix)
    assert result.returncode == 0, result.stderr
    with open(out) as f:
        screen = f.read()
    assert "replay of " in screen and "session.krec" in screen
    assert "2026-01-01 11:52:25" in screen and "record 101/180" in screen  # the spike
    assert "window 1 record (1.0s)" in screen
    assert "kernel  90.0%" in screen  # the header's CPU split of that very record
    assert "\\x1b[2J evil" in screen and "\x1b" not in screen


def test_the_window_sums_the_records_before_the_moment(recording, tmp_path):
    out = tmp_path / "w.json"
    result = ktop("--replay", recording, "--snapshot", str(out), "--at", "11:52:25", "-w", "10")
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    check_contract(data)
    assert data["cpu"]["window_s"] == 10.0
    one = Recording(recording).snapshot(SPIKE)
    assert data["cpu"]["total_samples"] == 10 * one.cpu.total_samples
    assert data["cpu"]["times"]["kernel"] == pytest.approx((90 + sum(10 + i % 7 for i in range(91, 100))) / 10, abs=0.01)


@pytest.mark.parametrize("at", ["12:00:00", "25:00", "11:52", "yesterday"])
def test_a_time_outside_the_recording_is_one_line(recording, tmp_path, at):
    result = ktop("--replay", recording, "--snapshot", str(tmp_path / "x.svg"), "--at", at)
    if at == "11:52":  # 11:52:00 is inside: the record holding it
        assert result.returncode == 0, result.stderr
        return
    line = one_error_line(result)
    assert f"--at {at}" in line
    assert ("runs from 2026-01-01 11:50:44 to 2026-01-01 11:53:44" in line) or "expected" in line \
        or "no such time" in line
    assert not (tmp_path / "x.svg").exists()


def test_dump_jsonl_is_one_snapshot_per_line(recording):
    result = ktop("--replay", recording, "--dump", "jsonl")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 180
    for line in (lines[0], lines[SPIKE]):
        data = json.loads(line)
        check_contract(data)
    spike = json.loads(lines[SPIKE])
    assert spike["taken_at"] == START + SPIKE and spike["cpu"]["times"]["kernel"] == 90.0
    assert "\x1b" not in result.stdout  # JSON escapes it: inert in a terminal


def test_dump_csv_is_a_header_and_one_row_per_interval(recording):
    result = ktop("--replay", recording, "--dump", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 180
    spike = rows[SPIKE]
    assert spike["time"] == "2026-01-01T11:52:25" and float(spike["cpu_kernel_pct"]) == 90.0
    assert spike["top_function"] == "chacha_permute"
    assert float(spike["io_avg_latency_ms"]) == 40.0
    assert "\x1b" not in result.stdout and "\\x1b[2J evil" in result.stdout  # escaped


def test_dump_into_a_closed_pipe_is_quiet(recording):
    result = subprocess.run(f"{sys.executable} -m ktop --replay {recording} --dump jsonl | head -1",
                            shell=True, capture_output=True, text=True, timeout=60)
    assert result.stdout.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_recording_cut_off_replays_its_whole_records_and_says_so(recording, tmp_path):
    data = open(recording, "rb").read()
    with open(recording, "wb") as f:
        f.write(data[:-100])  # kill -9 in the middle of the last record
    result = ktop("--replay", recording, "--dump", "csv")
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 1 + 179
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cut off" in lines[0] and "179 whole records" in lines[0]


def test_corruption_in_the_middle_shows_nothing(recording, tmp_path):
    data = bytearray(open(recording, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(recording, "wb") as f:
        f.write(bytes(data))
    out = tmp_path / "out.svg"
    for mode in (["--snapshot", str(out)], ["--dump", "jsonl"]):
        result = ktop("--replay", recording, *mode)
        assert "damaged" in one_error_line(result)
        assert result.stdout == ""
    assert not out.exists()


def test_a_newer_format_is_one_line(recording):
    data = bytearray(open(recording, "rb").read())
    import struct
    import zlib

    head = struct.pack("<8sHH", b"KTOPREC\x00", 99, 0)
    data[:16] = head + struct.pack("<I", zlib.crc32(head))
    with open(recording, "wb") as f:
        f.write(bytes(data))
    line = one_error_line(ktop("--replay", recording, "--dump", "csv"))
    assert "format 99" in line and "newer ktop" in line


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--max-size", "10"], "--max-size goes with --record"),
        (["--dump", "csv"], "--at and --dump go with --replay"),
        (["--record", "x", "--replay", "y"], "--record runs on its own"),
        (["--record", "x", "--max-size", "0.5"], "must be from 1 to"),
    ],
)
def test_options_that_do_not_fit_are_usage_errors(args, complaint):
    result = ktop(*args)
    assert result.returncode == 2 and complaint in result.stderr


def test_dump_and_at_need_a_recording_not_a_snapshot(tmp_path):
    from conftest import FIXTURES

    result = ktop("--replay", str(FIXTURES / "recorded.json"), "--dump", "csv")
    assert result.returncode == 2 and "need a recording" in result.stderr


def test_record_refuses_a_symlink_and_a_file_of_another_kind(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link.krec").symlink_to(victim)
    assert "symlink" in one_error_line(ktop("--record", str(tmp_path / "link.krec")))
    assert "not a ktop recording" in one_error_line(ktop("--record", str(victim)))
    assert victim.read_text() == "keep\n"


def record_until_signalled(directory: str, name: str, interval: str,
                           started: Callable[[str], bool], after_s: float,
                           sig: signal.Signals) -> tuple[str, int, str]:
    """`ktop --record DIRECTORY/NAME -d INTERVAL` without root (as nobody when root), sent
    `sig` `after_s` seconds once `started(path)` holds (30 s at most): (path, exit, stderr)."""
    path = os.path.join(directory, name)
    prefix = as_nobody(directory) if os.geteuid() == 0 else []
    process = subprocess.Popen([*prefix, sys.executable, "-m", "ktop", "--record", path,
                                "-d", interval], stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        deadline = time.monotonic() + 30
        while not started(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(after_s)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return path, process.returncode, stderr


def test_record_until_sigterm_without_root_keeps_the_processes(shared_dir):
    """Without root the BPF panes say why; the recording goes on with the processes pane,
    and SIGTERM (systemctl stop) ends it cleanly, exit 0."""
    def records_written(path: str) -> bool:
        return os.path.exists(path) and os.path.getsize(path) > 2000

    path, code, stderr = record_until_signalled(shared_dir, "p.krec", "0.5", records_written,
                                                1.2, signal.SIGTERM)
    assert code == 0, stderr
    assert "recorded " in stderr and "Traceback" not in stderr
    assert os.stat(path).st_mode & 0o777 == 0o600
    recording = Recording(path)
    assert len(recording) >= 2 and recording.dropped == ""
    last = recording.snapshot(len(recording) - 1)
    assert last.processes and "functions" in last.unavailable
    # Each record spans its interval; the last, written on SIGTERM, the part it covered.
    assert recording.records[-2].duration_s == pytest.approx(0.5, abs=0.2)
    assert 0 < recording.records[-1].duration_s <= 0.7
    # Without a sampler the CPU split is /proc/stat's: the CSV has it (its columns were empty).
    rows = list(csv.DictReader(io.StringIO(ktop("--replay", path, "--dump", "csv").stdout)))
    assert len(rows) == len(recording)
    for row in rows:
        # A VM's stolen time is a part too: one tick of it in a short record is 2%.
        split = [float(row[f"cpu_{part}_pct"])
                 for part in ("kernel", "user", "idle", "iowait", "steal")]
        assert sum(split) == pytest.approx(100.0, abs=1.0), row
        assert row["samples"] == "" and row["top_function"] == ""


def test_sigint_within_the_first_interval_records_it(shared_dir):
    """`ktop --record a.krec -d 10`, SIGINT at 9 s said "recorded 0 intervals"."""
    path, code, stderr = record_until_signalled(shared_dir, "a.krec", "10", os.path.exists,
                                                2.0, signal.SIGINT)
    assert code == 0, stderr
    assert f"recorded 1 intervals to {path} (" in stderr, stderr
    records = Recording(path).records
    assert len(records) == 1 and 0.5 <= records[0].duration_s <= 2.5  # what it covered, not -d


def in_cgroups(snapshot: Snapshot) -> Snapshot:
    """The processes 4242 and 8072 in a cgroup of their own, every other one elsewhere: their
    block I/O rows and lock waits carry it, as the collectors' do."""
    def placed(row):
        cgroup = "/ktop.slice/dd.scope" if row.pid in (4242, 8072) else "/other.slice"
        return dataclasses.replace(row, cgroup=cgroup)

    io, locks = snapshot.blockio, snapshot.locks
    return dataclasses.replace(
        snapshot,
        blockio=dataclasses.replace(io, processes=tuple(map(placed, io.processes))),
        locks=dataclasses.replace(locks, tasks=tuple(map(placed, locks.tasks)), callers=tuple(
            dataclasses.replace(c, tasks=tuple(map(placed, c.tasks))) for c in locks.callers)))


def test_the_cgroup_filter_keeps_its_rows_over_a_window_of_records(tmp_path, recorded_snapshot):
    """Issue 27: the replay's own merge dropped the cgroup of every block I/O process and lock
    task, so a window of more than one record, filtered, showed neither."""
    path = make_recording(tmp_path / "cg.krec", in_cgroups(recorded_snapshot), count=8)
    out = tmp_path / "cg.txt"
    result = ktop("--replay", path, "-w", "6", "--cgroup", "/ktop.slice", "--snapshot", str(out))
    assert result.returncode == 0, result.stderr
    screen = out.read_text()
    assert "window 6 records (6s)" in screen
    io = [line for line in screen.splitlines() if "  vda  " in line]
    assert len(io) == 1 and "4242  \\x1b[2J evil" in io[0]  # dd's, the other cgroup's not
    assert "pipe_read+0x4d" in screen  # 8072 waited there; no task of /ktop.slice elsewhere
    assert "d_alloc_parallel" in screen  # 4242 did
    assert "unmap_region" not in screen  # only 4244, of /other.slice


def test_serving_a_bad_recording_is_one_line(tmp_path):
    """One error type for a bad snapshot or recording file: --serve caught only the JSON
    snapshot's, and a recording cut off in its header ended in a traceback."""
    path = tmp_path / "cut.krec"
    path.write_bytes(b"KTOPREC")
    line = one_error_line(ktop("--replay", str(path), "--serve", "127.0.0.1:39973"))
    assert "cut off in its header" in line


def test_ctrl_c_during_a_dump_is_one_line_and_exit_130(tmp_path):
    """Issue 44: Ctrl-C while `--dump jsonl` wrote printed a KeyboardInterrupt traceback."""
    from compare_data import RECORDS, make_compare_recording

    recording = make_compare_recording(tmp_path / "r.krec")  # 670 KB of JSON lines
    process = subprocess.Popen([sys.executable, "-m", "ktop", "--replay", recording,
                                "--dump", "jsonl"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()  # dumping: soon held up by the pipe, full
    process.send_signal(signal.SIGINT)
    rest, said = process.communicate(timeout=30)
    assert json.loads(first)["duration_s"] == 1.0
    assert len((first + rest).splitlines()) < RECORDS  # stopped on the way
    assert (process.returncode, said) == (130, "ktop: interrupted\n")
