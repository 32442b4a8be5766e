"""`--baseline` from the command line (issue 31, part 1): a time of the replayed recording,
another recording or a JSON snapshot, compared in a picture, in JSON (both figures and the
change) and in differential folded stacks; bad input in one line, exit 2. No root."""

from __future__ import annotations

import dataclasses
import json
import re
import time
import zlib

import pytest
from compare_data import BUSY, make_compare_recording
from test_recording_cli import ktop

from ktop.compare import GONE, NEW


@pytest.fixture
def recording(tmp_path) -> str:
    return make_compare_recording(tmp_path / "calm-then-busy.krec")


def rows_of(data: dict, pane: str) -> list[tuple]:
    return [(r["name"], r["now"], r["baseline"], r["change"], r["status"])
            for r in data["compare"][pane]["rows"]]


def written(result, path) -> str:
    assert result.returncode == 0, result.stderr
    return path.read_text()


def test_a_time_of_the_same_recording_in_json(recording, tmp_path):
    out = tmp_path / "c.json"
    result = ktop("--replay", recording, "--at", "11:52:44", "-w", "5", "--baseline", "11:51:14",
                  "--snapshot", str(out))
    data = json.loads(written(result, out))
    assert data["baseline"]["label"] == "11:51:09-11:51:14, 5s"
    assert data["baseline"]["duration_s"] == 5.0 and data["duration_s"] == 5.0
    assert data["compare"]["functions"]["figure"] == "CPU%"
    assert rows_of(data, "functions") == [
        ("spike_func", 40.0, None, 40.0, NEW),
        ("calm_func", None, 10.0, -10.0, GONE),
        ("steady_func", 20.0, 20.0, 0.0, ""),
    ]
    assert rows_of(data, "locks") == [
        ("hot_lock+0x10 rwsem", 5.0, None, 5.0, NEW),
        ("steady_lock+0x10 spinlock", 3.0, 1.0, 2.0, ""),
        ("calm_lock+0x10 mutex", None, 2.0, -2.0, GONE),
    ]
    assert rows_of(data, "blockio") == [
        ("100 dd sda W", 4 << 20, 1 << 20, 3 << 20, ""),
        ("200 tar sda R", 2 << 20, None, 2 << 20, NEW),
    ]
    assert rows_of(data, "processes")[2] == ("300 calmd", None, 5.0, -5.0, GONE)
    assert rows_of(data, "waits") == [("100 dd", 50.0, 10.0, 40.0, ""),
                                      ("200 tar", 10.0, None, 10.0, NEW)]
    assert data["cpu"]["window_s"] == 5.0  # the current window's own snapshot, as ever


def test_a_picture_at_80x24_says_what_is_compared(recording, tmp_path):
    out = tmp_path / "c.txt"
    result = ktop("--replay", recording, "--at", "11:52:44", "-w", "5", "--baseline", "11:51:14",
                  "--snapshot", str(out), "--size", "80x24")
    screen = written(result, out)
    assert "vs baseline 11:51:09-11:51:14, 5s" in screen.splitlines()[0]
    assert "spike_func" in screen and "+40.00" in screen and "new" in screen


def test_the_drill_down_pictured(recording, tmp_path):
    out = tmp_path / "d.txt"
    result = ktop("--replay", recording, "--baseline", "11:51:14", "--snapshot", str(out),
                  "--drill", "locks:steady_lock")
    screen = written(result, out)
    assert "Lock contention: steady_lock+0x10 spinlock" in screen
    assert "wait ms/s now 3.00ms/s, baseline 1.00ms/s, change +2.00ms/s" in screen


def test_differential_folded_is_two_counts_a_stack(recording, tmp_path):
    """difffolded.pl's format: `stack count_baseline count_now`; the baseline (10 s) scaled
    to the current window's 5 s, so equal rates read equal counts."""
    out = tmp_path / "c.folded"
    result = ktop("--replay", recording, "--at", "11:52:44", "-w", "5", "--baseline", "11:51:14",
                  "--snapshot", str(out))
    assert written(result, out).splitlines() == [
        "dd;do_syscall_64;vfs_write;spike_func 0 150",
        "calmd;do_syscall_64;vfs_read;calm_func 50 0",
        "tar;do_syscall_64;vfs_read;spike_func 0 50",
        "dd;do_syscall_64;vfs_write;steady_func 100 100",
    ]
    out = tmp_path / "locks.folded"
    result = ktop("--replay", recording, "--at", "11:52:44", "-w", "5", "--baseline", "11:51:14",
                  "--snapshot", str(out), "--folded-of", "locks")
    assert written(result, out).splitlines() == [
        "tar;do_syscall_64;hot_lock 0 25000",  # 5 ms a record, in us
        "calmd;do_syscall_64;calm_lock 10000 0",
        "dd;do_syscall_64;steady_lock 5000 15000",
    ]


def test_windows_of_different_lengths_compare_a_second_of_each(recording, tmp_path):
    """Five busy seconds against a whole calm minute: the figures are a second, and the
    baseline's folded counts are scaled to the current window's 5 s."""
    before = make_compare_recording(tmp_path / "before.krec", range(BUSY))
    out = tmp_path / "c.json"
    result = ktop("--replay", recording, "-w", "5", "--baseline", before, "--snapshot", str(out))
    data = json.loads(written(result, out))
    assert (data["duration_s"], data["baseline"]["duration_s"]) == (5.0, 60.0)
    assert rows_of(data, "processes")[0] == ("100 dd", 50.0, 10.0, 40.0, "")
    assert rows_of(data, "waits")[0] == ("100 dd", 50.0, 10.0, 40.0, "")
    out = tmp_path / "c.folded"
    result = ktop("--replay", recording, "-w", "5", "--baseline", before, "--snapshot", str(out))
    assert written(result, out).splitlines() == [
        "dd;do_syscall_64;vfs_write;spike_func 0 150",
        "calmd;do_syscall_64;vfs_read;calm_func 50 0",  # 600 samples in 60 s: 50 in 5 s
        "tar;do_syscall_64;vfs_read;spike_func 0 50",
        "dd;do_syscall_64;vfs_write;steady_func 100 100",
    ]


def test_another_recording_is_the_baseline_whole(recording, tmp_path):
    before = make_compare_recording(tmp_path / "before.krec", range(BUSY))
    out = tmp_path / "c.json"
    result = ktop("--replay", recording, "-w", "5", "--baseline", before, "--snapshot", str(out))
    data = json.loads(written(result, out))
    assert data["baseline"]["label"] == "11:50:44-11:51:44, 60s of before.krec"
    assert data["baseline"]["duration_s"] == 60.0
    assert rows_of(data, "functions")[:2] == [("spike_func", 40.0, None, 40.0, NEW),
                                              ("calm_func", None, 10.0, -10.0, GONE)]
    by_command = [(r["name"], r["now"], r["baseline"], r["status"])
                  for r in data["compare"]["processes"]["rows_by_command"]]
    assert by_command == [("dd", 50.0, 10.0, ""), ("tar", 20.0, None, NEW),
                          ("calmd", None, 5.0, GONE)]
    assert "rows_by_command" not in data["compare"]["functions"]


def test_a_json_snapshot_is_the_baseline(recording, tmp_path):
    before = make_compare_recording(tmp_path / "before.krec", range(BUSY))
    snapshot = tmp_path / "before.json"
    written(ktop("--replay", before, "-w", "10", "--snapshot", str(snapshot)), snapshot)
    out = tmp_path / "c.json"
    result = ktop("--replay", recording, "-w", "5", "--baseline", str(snapshot),
                  "--snapshot", str(out))
    data = json.loads(written(result, out))
    assert data["baseline"]["label"] == "11:51:34-11:51:44, 10s of before.json"
    assert rows_of(data, "locks") == [
        ("hot_lock+0x10 rwsem", 5.0, None, 5.0, NEW),
        ("steady_lock+0x10 spinlock", 3.0, 1.0, 2.0, ""),
        ("calm_lock+0x10 mutex", None, 2.0, -2.0, GONE),
    ]


def one_line_exit_2(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and "\x1b" not in result.stderr
    return lines[-1]


@pytest.mark.parametrize(("args", "complaint"), [
    (["--baseline", "11:51:14"], "a time needs --replay of a recording"),
    (["--replay", "{recording}", "--baseline", "12:30:00"],
     "--baseline 12:30:00: 12:30:00 is not in the recording, which runs from "
     "2026-01-01 11:50:44 to 2026-01-01 11:52:44"),
    (["--replay", "{recording}", "--baseline", "{text}"], "is not JSON"),
    (["--replay", "{recording}", "--baseline", "{dir}"], "not a regular file"),
    (["--replay", "{recording}", "--baseline", "no-such.krec"], "no such file, nor a time"),
    (["--replay", "{recording}", "--baseline", "{text}/inside"], "cannot read it: Not a directory"),
    (["--replay", "{snapshot}", "--baseline", "11:51:14"], "a time needs --replay of a recording"),
])
def test_bad_baselines_are_one_line_and_exit_2(recording, tmp_path, args, complaint):
    text = tmp_path / "notes.txt"
    text.write_text("not a ktop file\n")
    snapshot = tmp_path / "s.json"
    written(ktop("--replay", recording, "--snapshot", str(snapshot)), snapshot)
    (tmp_path / "adir").mkdir()
    names = {"recording": recording, "text": str(text), "dir": str(tmp_path / "adir"),
             "snapshot": str(snapshot)}
    out = tmp_path / "out.txt"
    result = ktop(*(a.format(**names) for a in args), "--snapshot", str(out))
    line = one_line_exit_2(result)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert line.startswith("ktop: --baseline") and complaint in line, line
    assert not out.exists()


@pytest.mark.parametrize(("args", "complaint"), [
    (["--record", "x.krec", "--baseline", "x.json"], "not with --record, --serve or --dump"),
    (["--replay", "x.krec", "--dump", "csv", "--baseline", "11:00"], "not with --record"),
    (["--snapshot", "x.prom", "--baseline", "x.json"], "not pprof or Prometheus text"),
    (["--snapshot", "x.txt", "--baseline", ""], "--baseline needs a time HH:MM:SS or a file"),
])
def test_baselines_with_what_cannot_compare_are_usage_errors(tmp_path, args, complaint):
    result = ktop(*args)
    line = one_line_exit_2(result)
    assert line.startswith("ktop: error: ") and complaint in line, result.stderr



def test_a_baseline_file_without_a_pane_says_so_in_json(recording, tmp_path):
    snapshot = tmp_path / "old.json"
    written(ktop("--replay", recording, "--at", "11:51:14", "--snapshot", str(snapshot)), snapshot)
    data = json.loads(snapshot.read_text())
    del data["waits"]  # as ktop wrote it before the waits pane
    snapshot.write_text(json.dumps(data))
    out = tmp_path / "c.json"
    result = ktop("--replay", recording, "--baseline", str(snapshot), "--snapshot", str(out))
    compared = json.loads(written(result, out))["compare"]
    assert compared["waits"]["rows"] == []
    assert compared["waits"]["missing"] == "no waits data in the baseline"
    assert [r["status"] for r in compared["locks"]["rows"]] == [NEW, "", GONE]


def test_the_screen_opens_compared_in_a_terminal(recording):
    """`ktop --replay FILE --baseline T` in a real terminal (tmux): compared from the first
    frame; B gives the panes' own views back; q leaves."""
    import shlex  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from test_live_tmux import Tmux  # noqa: PLC0415

    tmux = Tmux()
    try:
        tmux.run(f"cd / && TZ=UTC {shlex.quote(sys.executable)} -m ktop --replay "
                 f"{shlex.quote(recording)} -w 5 --baseline 11:51:14")
        screen = tmux.wait_for("vs baseline 11:51:09-11:51:14, 5s (B clears)")
        assert any(re.search(r"40\.00\s+new\s+\+40\.00\s+spike_func", line)
                   for line in screen.splitlines()), screen
        tmux.send("B")
        screen = tmux.wait_for("Children")
        assert "vs baseline" not in screen
        tmux.send("q")
        for _ in range(100):  # the shell's screen again
            if "Children" not in tmux.screen():
                break
            time.sleep(0.2)
        assert "Children" not in tmux.screen() and tmux.display("#{alternate_on}") == "0"
    finally:
        tmux.close()


def test_a_baseline_recording_cut_off_is_compared_with_what_is_whole(recording, tmp_path):
    before = tmp_path / "before.krec"
    make_compare_recording(before, range(BUSY))
    before.write_bytes(before.read_bytes()[:-10])  # kill -9 mid-record
    out = tmp_path / "c.json"
    result = ktop("--replay", recording, "-w", "5", "--baseline", str(before),
                  "--snapshot", str(out))
    data = json.loads(written(result, out))
    assert data["baseline"]["duration_s"] == BUSY - 1.0  # the last record torn
    said = result.stderr.splitlines()[0]
    assert said.startswith("ktop: --baseline before.krec: ") and "cut off" in said
    assert "comparing with the 59 whole records before it" in said


def many_stacks(records: int, stacks: int, distinct: bool) -> list:
    """Intervals of `stacks` CPU stacks each: the same ones each time, or new ones."""
    from test_export import full_snapshot

    base = full_snapshot()
    stack = base.cpu.stacks[0]
    return [dataclasses.replace(base, taken_at=base.taken_at + r, cpu=dataclasses.replace(
        base.cpu, cumulative=False, stacks=tuple(
            dataclasses.replace(stack, pid=1000 + i + (r * stacks if distinct else 0))
            for i in range(stacks)))) for r in range(records)]


def recorded(path, snapshots) -> str:
    from ktop.record.fileformat import RecordWriter

    writer = RecordWriter(str(path))
    for snapshot in snapshots:
        writer.append(snapshot)
    writer.close()
    return str(path)


def test_a_long_baseline_recording_is_merged_in_bounded_memory(tmp_path, monkeypatch):
    """--baseline FILE merged every record of the file in one pass: a forged 8.6 MB file of
    100 records took 1.4 GB. Merged a batch at a time, memory holds the sum and one batch:
    here batches of two records' JSON, against a file of 30."""
    import tracemalloc

    from ktop.compare import load_baseline
    from ktop.record import fileformat, replay

    path = recorded(tmp_path / "long.krec", many_stacks(30, 1500, distinct=False))
    recording = fileformat.Recording(path)
    first = recording.records[0]
    with open(path, "rb") as f:
        f.seek(first.offset + fileformat.FRAME_SIZE)
        json_bytes = len(zlib.decompress(f.read(first.length)))
    tracemalloc.start()
    recording.snapshot(0)
    one_record = tracemalloc.get_traced_memory()[1]  # its peak: decoding one record
    del recording
    monkeypatch.setattr(fileformat, "CACHE_BYTES", 4 * json_bytes)
    monkeypatch.setattr(replay, "MERGE_BATCH_BYTES", 2 * json_bytes, raising=False)
    tracemalloc.reset_peak()
    baseline = load_baseline(path, None, 5.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert baseline.snapshot.cpu.total_samples == 30 * 1500 * 7  # every record counted
    assert len(baseline.snapshot.cpu.stacks) == 1500  # the same stacks, summed
    # A batch, the sum and the cache: 3 records' decoding here; the file at once took 10.8.
    assert peak < 5 * one_record, (peak, one_record)


def test_a_baseline_recording_with_more_rows_than_ktop_compares_is_refused(tmp_path, monkeypatch):
    """New stacks in every record: the merged baseline would grow with the file. Past the
    rows a record may hold (MAX_ROWS, lowered here to keep the file small) it is refused
    in one line that names the limit and what to do."""
    from ktop import codec
    from ktop.compare import BaselineError, load_baseline

    monkeypatch.setattr(codec, "MAX_ROWS", 1000)
    path = recorded(tmp_path / "churn.krec", many_stacks(3, 600, distinct=True))
    with pytest.raises(BaselineError) as error:
        load_baseline(path, None, 5.0)
    line = str(error.value)
    assert "\n" not in line
    assert line.startswith("--baseline churn.krec: its records together hold more than 1000 "
                           "rows of functions stacks"), line
    assert "record a shorter baseline (--duration)" in line


def test_a_long_baseline_recording_is_sampled_in_bounded_time_and_says_so(tmp_path, monkeypatch):
    """Issue 44: --baseline BIG.krec merged every record, with no word: 3,000 records of a
    busy server took 5 min 15 s. Past BASELINE_JSON_BYTES of JSON (lowered here to ten
    records') it merges one record in k, spread over the whole and ending at the newest,
    says so in one line, and tells its progress."""
    from ktop.compare import load_baseline
    from ktop.record import fileformat, replay

    path = recorded(tmp_path / "long.krec", many_stacks(30, 100, distinct=False))
    recording = fileformat.Recording(path)
    one, json_bytes = recording.decoded(0)
    monkeypatch.setattr(replay, "BASELINE_JSON_BYTES", 10 * json_bytes)
    decoded = []
    real_decode = fileformat.Recording._decode
    monkeypatch.setattr(fileformat.Recording, "_decode",
                        lambda self, index: decoded.append(index) or real_decode(self, index))
    said, progress = [], []
    baseline = load_baseline(path, None, 5.0, say=said.append,
                             progress=lambda done, total: progress.append((done, total)))
    assert sorted(decoded) == list(range(2, 30, 3))  # ten records decoded, not thirty
    snapshot = baseline.snapshot
    assert snapshot.cpu.total_samples == 10 * one.cpu.total_samples
    assert snapshot.duration_s == pytest.approx(10 * one.duration_s)  # figures a second: true
    assert said == ["--baseline long.krec: 30 records, too many to merge at once: comparing "
                    "with one in 3 (10), spread over the whole (or name a time in it with "
                    "--replay FILE --baseline HH:MM:SS)"]
    # From the first chosen record's start to the newest's end.
    first, last = recording.records[2], recording.records[29]
    start = time.strftime("%H:%M:%S", time.localtime(first.taken_at - first.duration_s))
    end = time.strftime("%H:%M:%S", time.localtime(last.taken_at))
    assert baseline.label == f"{start}-{end}, 10 of 30 records of long.krec"
    assert progress[0] == (0, 10) and progress[-1] == (10, 10)


def test_ctrl_c_while_a_baseline_loads_is_one_line_and_exit_130(recording, tmp_path):
    """Issue 44: Ctrl-C while --baseline FILE loaded printed a KeyboardInterrupt traceback.
    Here the load says it started (a line, stderr being no terminal), then Ctrl-C."""
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    big = recorded(tmp_path / "big.krec", many_stacks(25, 1500, distinct=False))
    out = tmp_path / "c.json"
    process = subprocess.Popen([sys.executable, "-m", "ktop", "--replay", recording,
                                "--baseline", big, "--snapshot", str(out)],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    started = process.stderr.readline()
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert started == "ktop: --baseline big.krec: merging 25 records...\n"
    assert (process.returncode, rest) == (130, "ktop: interrupted\n")
    assert not out.exists()
