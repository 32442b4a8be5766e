"""Files ktop did not write, read back: a recording or a snapshot JSON forged to nest 100,000
deep, to hold numbers no ktop writes (with valid checksums), to inflate to gigabytes or to
hold 300,000 rows, or a FIFO or a device where a file belongs. Each is refused in one line,
with a non-zero exit, in every mode that reads it, and costs bounded memory. The files are
made here, a few KB each (a sparse one stands for a big file)."""

from __future__ import annotations

import json
import math
import os
import resource
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib

import pytest
from test_recording import interval

from ktop.codec import MAX_ROWS, RecordingError
from ktop.exports import jsonfile
from ktop.exports.jsonfile import read_snapshot_file, to_json
from ktop.record import fileformat
from ktop.record.fileformat import (
    _FRAME,
    MAX_JSON,
    SYNC,
    Recording,
    encode_snapshot,
    file_header,
)


def record(seq: int, payload: bytes, taken_at: float = 1.7e9, duration: float = 1.0,
           figures: tuple[float, ...] = (1.0, 1.0, 1.0), compressed: bytes | None = None) -> bytes:
    """A record as ktop frames one, every checksum valid, around any payload."""
    body = zlib.compress(payload, 6) if compressed is None else compressed
    head = _FRAME.pack(SYNC, len(body), seq, zlib.crc32(body), taken_at, duration, *figures, 0)
    return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4])) + body


def forge(path, *payloads: bytes, **frame) -> str:
    with open(path, "wb") as f:
        f.write(file_header())
        for seq, payload in enumerate(payloads):
            f.write(record(seq, payload, **frame))
    return str(path)


def genuine() -> dict:
    """A record's JSON as ktop writes it, to forge from."""
    return json.loads(encode_snapshot(interval(0)))


def compact(data: dict) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def processes(count: int) -> bytes:
    """A record of `count` small process rows (~90 bytes each: 300,000 fit in 27 MB)."""
    data = genuine()
    data["processes"] = [{"pid": 10 + i, "comm": "x", "user": "u", "state": "S",
                          "cpu_percent": 0, "sys_percent": 0, "threads": 1, "rss_bytes": 0}
                         for i in range(count)]
    return compact(data)


DEEP = b'{"processes":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def ktop(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ktop", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, cwd="/")


def refused(result: subprocess.CompletedProcess) -> str:
    """The one line ktop said, checked to be one line of its own and a failure."""
    assert result.returncode != 0, result.stdout[-300:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ktop: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    return lines[0]


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


# ---- nesting -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [("--dump", "csv"), ("--dump", "jsonl"), ("--snapshot", "OUT.txt"),
                                  ("--snapshot", "OUT.json")])
def test_a_record_nested_100000_deep_is_one_line_in_every_mode(tmp_path, mode):
    path = forge(tmp_path / "deep.krec", DEEP)
    option, value = mode
    line = refused(ktop("--replay", path, option, value.replace("OUT", str(tmp_path / "out"))))
    assert "record 0" in line and "nests containers deeper than ktop reads" in line


def test_a_snapshot_json_nested_100000_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_bytes(DEEP)
    line = refused(ktop("--replay", str(path), "--snapshot", str(tmp_path / "out.txt")))
    assert "deep.json nests containers deeper than ktop reads" in line


def test_nesting_within_the_interpreters_limit_is_refused_by_ktops_own(tmp_path):
    """900 deep decodes as JSON: ktop's walk of the names still stops at its own limit."""
    data = genuine()
    data["cpu"]["stacks"][0]["extra"] = json.loads("[" * 900 + "]" * 900)
    recording = Recording(forge(tmp_path / "r.krec", compact(data)))
    with pytest.raises(RecordingError) as error:
        recording.snapshot(0)
    assert "nests containers deeper than 32" in one_line(error)


# ---- numbers no ktop writes --------------------------------------------------------------


def with_value(field: str, text: str) -> bytes:
    """A genuine record with the first `field` (a dotted path) set to the JSON text given
    (NaN and Infinity as Python's json writes them)."""
    data = genuine()
    *outer, last = field.split(".")
    place = data
    for key in outer:
        place = place[key][0] if isinstance(place[key], list) else place[key]
    place[last] = "SENTINEL"
    return compact(data).replace(b'"SENTINEL"', text.encode())


@pytest.mark.parametrize("field, text", [
    ("taken_at", "NaN"), ("taken_at", "Infinity"), ("taken_at", "1e300"), ("taken_at", "-1e18"),
    ("taken_at", "1e12"), ("duration_s", "-1"), ("cpu.window_s", "NaN"),
    ("cpu.stacks.samples", str(2**64)), ("processes.cpu_percent", "1e400"),
    ("locks.callers.hist_ns", "[1, 2]"),
])
def test_a_number_no_ktop_writes_is_refused_naming_its_field(tmp_path, field, text):
    recording = Recording(forge(tmp_path / "r.krec", with_value(field, text)))
    with pytest.raises(RecordingError) as error:
        recording.snapshot(0)
    line = one_line(error)
    assert "record 0 holds no ktop snapshot" in line
    assert field.rsplit(".", 1)[-1] in line  # the field named


@pytest.mark.parametrize("frame, said", [
    ({"taken_at": math.nan}, "taken_at nan"), ({"taken_at": math.inf}, "taken_at inf"),
    ({"taken_at": 1e300}, "taken_at 1e+300"), ({"taken_at": -1e18}, "taken_at -1e+18"),
    ({"duration": math.nan}, "duration_s nan"),
    ({"figures": (math.inf, 1.0, 1.0)}, "a timeline figure of inf"),
])
def test_a_frame_with_numbers_no_ktop_writes_is_refused_at_once(tmp_path, frame, said):
    """The frame's figures draw the timeline before any record is decoded."""
    path = forge(tmp_path / "r.krec", encode_snapshot(interval(0)), **frame)
    with pytest.raises(RecordingError) as error:
        Recording(path)
    assert f"record 0's frame says {said}" in one_line(error)


def test_forged_numbers_through_the_cli_are_one_line_in_every_mode(tmp_path):
    """What overflowed time.localtime(), pprof's int64 and the timeline's scale before."""
    path = forge(tmp_path / "r.krec", with_value("taken_at", "1e300"),
                 with_value("taken_at", "1e300"))
    for args in (["--dump", "csv"], ["--snapshot", str(tmp_path / "o.txt")],
                 ["--snapshot", str(tmp_path / "o.pb.gz")]):
        assert "taken_at: found 1e+300" in refused(ktop("--replay", path, *args))
    path = forge(tmp_path / "fig.krec", encode_snapshot(interval(0)),
                 figures=(math.inf, 1.0, 1.0))
    assert "timeline figure of inf" in refused(ktop("--replay", path, "--snapshot",
                                                    str(tmp_path / "o.txt")))


def test_a_snapshot_json_with_a_nan_window_names_the_field(tmp_path):
    data = to_json(interval(0))
    data["cpu"]["window_s"] = math.nan
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordingError) as error:
        read_snapshot_file(str(path))
    assert "cpu.window_s: found nan" in one_line(error)


def test_pprof_refuses_sums_past_its_64_bit_values(tmp_path):
    """Each value within range, their sum over a window is not: one line, not protobuf's
    ValueError."""
    data = genuine()
    stack = data["cpu"]["stacks"][0]
    stack["idle"] = False
    stack["samples"] = 2**62
    path = forge(tmp_path / "r.krec", compact(data), compact(data), compact(data))
    line = refused(ktop("--replay", path, "--snapshot", str(tmp_path / "o.pb.gz")))
    assert "past pprof's 64-bit range" in line


# ---- size --------------------------------------------------------------------------------


def test_a_zlib_bomb_stops_inflating_at_the_limit(tmp_path):
    inflater = zlib.compressobj(9)
    bomb = inflater.compress(b"{" + b" " * (MAX_JSON + (8 << 20))) + inflater.flush()
    path = str(tmp_path / "bomb.krec")
    with open(path, "wb") as f:
        f.write(file_header() + record(0, b"", compressed=bomb))
    recording = Recording(path)
    tracemalloc.start()
    try:
        with pytest.raises(RecordingError) as error:
            recording.snapshot(0)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"inflates past {MAX_JSON >> 20} MiB" in one_line(error)
    assert peak < MAX_JSON + (4 << 20)


def test_a_record_of_too_many_rows_says_how_many_and_the_limit(tmp_path):
    count = MAX_ROWS + 1000
    path = forge(tmp_path / "rows.krec", processes(count))
    assert os.path.getsize(path) < 1 << 20
    line = refused(ktop("--replay", path, "--dump", "csv"))
    assert f"record 0 holds {count} rows of processes; ktop reads at most {MAX_ROWS}" in line


def test_stepping_through_a_recording_keeps_a_bounded_cache(tmp_path, monkeypatch):
    """Decoded records are kept for stepping by the bytes of their JSON, not by their count:
    30 records of 8,000 rows (0.7 MB of JSON each) held ~60 MB decoded."""
    monkeypatch.setattr(fileformat, "CACHE_BYTES", 2 << 20, raising=False)
    payload = processes(8000)
    recording = Recording(forge(tmp_path / "r.krec", *[payload] * 30))
    tracemalloc.start()
    try:
        for snapshot in recording.snapshots():
            assert len(snapshot.processes) == 8000
        kept, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_record = 2 * len(payload)  # decoded, at least
    assert kept < 3 * (2 << 20) + 2 * per_record, f"{kept / 1e6:.0f} MB kept"


def test_a_snapshot_json_bigger_than_any_ktop_writes_is_refused_unread(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(jsonfile.MAX_FILE + 1)  # sparse: nothing written
    with pytest.raises(RecordingError) as error:
        read_snapshot_file(str(path))
    assert f"more than the {jsonfile.MAX_FILE >> 20} MiB" in one_line(error)


# ---- not a file --------------------------------------------------------------------------


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("reader", [
    "from ktop.record.fileformat import Recording as read",
    "from ktop.exports.jsonfile import read_snapshot_file as read",
    "from ktop.record.fileformat import is_recording as read",
])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_is_refused_without_blocking_or_reading_it(tmp_path, reader, kind):
    """The command line checks --replay's file first; the readers refuse on their own too
    (a name swapped after that check; any other caller)."""
    path = kind
    if kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    code = (f"{reader}\nfrom ktop.codec import RecordingError\n"
            f"try:\n    print(read({path!r}))\nexcept RecordingError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=20, preexec_fn=_limited)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip() in ("False", f"cannot read {path}: not a regular file") or (
        "not a regular file" in result.stdout), result.stdout


def test_an_io_process_of_no_requests_is_drawn(tmp_path):
    """A value a forged file may hold and the screen divided by (bytes per request)."""
    path = forge(tmp_path / "r.krec", with_value("blockio.processes.requests", "0"))
    result = ktop("--replay", path, "--snapshot", str(tmp_path / "o.txt"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Block I/O" in (tmp_path / "o.txt").read_text()


def test_a_sparse_recording_of_20_gb_is_judged_without_reading_its_holes(tmp_path):
    """Zeros after the last record are a crash's leftovers; 20 GB of them, as holes, took
    minutes to read."""
    path = forge(tmp_path / "sparse.krec", encode_snapshot(interval(0)))
    with open(path, "r+b") as f:
        f.truncate(20 << 30)
    result = ktop("--replay", path, "--dump", "csv", timeout=20)
    assert result.returncode == 0, result.stderr
    assert "21474" in result.stderr and "bytes dropped after record 0" in result.stderr
    assert len(result.stdout.splitlines()) == 2  # the header and the one record
    replayed = ktop("--replay", path, "--snapshot", str(tmp_path / "o.json"), timeout=20)
    assert "replaying the 1 whole record before it" in replayed.stderr, replayed.stderr


def test_a_recording_of_many_tiny_records_costs_little_per_record(tmp_path):
    """Records of an empty payload are 54 bytes each: every frame read is kept for the
    timeline, as numbers (330 bytes of objects a record before; a million, 365 MB)."""
    count = 50_000
    body = zlib.compress(b"{}")
    path = tmp_path / "tiny.krec"
    with open(path, "wb") as f:
        f.write(file_header())
        f.write(b"".join(record(seq, b"", taken_at=1.7e9 + seq, compressed=body)
                         for seq in range(count)))
    tracemalloc.start()
    try:
        recording = Recording(str(path))
        kept, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(recording) == count and recording.records[-1].taken_at == 1.7e9 + count - 1
    assert kept / count < 100, f"{kept / count:.0f} bytes a record"


# ---- the replay's screen -----------------------------------------------------------------


def replay_app(path: str):
    from ktop.record.replay import ReplaySource
    from ktop.ui.app import build_app

    return build_app(ReplaySource(Recording(path), window_s=1.0), interval_s=1.0)


def test_a_replay_whose_first_window_is_forged_leaves_with_its_line(tmp_path):
    """It crashed ('ktop: crashed: WorkerFailed ... please report it'): a bad file is no bug."""
    import asyncio

    app = replay_app(forge(tmp_path / "r.krec", with_value("cpu.window_s", "NaN")))

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(500):
                if not app.is_running:
                    break
                await pilot.pause(0.01)

    asyncio.run(main())
    assert app.return_code == 1
    assert "record 0 holds no ktop snapshot (cpu.window_s: found nan" in app.file_error


def test_stepping_onto_a_forged_record_says_so_and_keeps_the_screen(tmp_path):
    from conftest import run_app

    good = encode_snapshot(interval(0))
    app = replay_app(forge(tmp_path / "r.krec", with_value("taken_at", "1e300"), good, good))
    said = []

    async def scenario(pilot) -> None:
        await pilot.press("home")
        for _ in range(300):
            said[:] = [n.message for n in app._notifications]
            if said:
                break
            await pilot.pause(0.01)
        assert app.is_running and app.snapshot is not None

    run_app(app, scenario)
    assert len(said) == 1 and "record 0 holds no ktop snapshot (taken_at: found 1e+300" in said[0]


def serving(path: str) -> tuple[subprocess.Popen, str]:
    """ktop --serve of a replayed file on a free port: the process and its page's URL."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "ktop", "--serve", f"127.0.0.1:{port}",
                                "--replay", path], stderr=subprocess.PIPE, text=True, cwd="/",
                               stdin=subprocess.DEVNULL)
    line = process.stderr.readline()
    assert f"serving http://127.0.0.1:{port}/metrics" in line, line + process.stderr.read()
    return process, f"http://127.0.0.1:{port}/metrics"


def test_serve_of_a_recording_answers_scrapes(tmp_path):
    """It stopped at the first collect: AttributeError ('ReplaySource' has no 'loading')."""
    import urllib.request

    process, url = serving(forge(tmp_path / "r.krec", encode_snapshot(interval(0))))
    try:
        for _ in range(50):
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    page = answer.read().decode()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read()
                time.sleep(0.1)
        assert "ktop_" in page
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_serve_of_a_forged_recording_is_one_line(tmp_path):
    process, _serving = serving(forge(tmp_path / "r.krec", with_value("cpu.window_s", "NaN")))
    try:
        rest = process.stderr.read()
        assert process.wait(timeout=20) == 1
    finally:
        process.kill()
    assert rest.count("\n") == 1 and "cpu.window_s: found nan" in rest, rest[-2000:]


def test_a_record_past_what_ktop_reads_back_is_trimmed_and_counted_not_refused(tmp_path):
    """A machine of more processes than a table holds, or processes of huge command lines
    (nobody's six of 1.8 MB made a 63 MiB record): the record keeps the first rows of a
    table (most first) and cut texts, the trim is counted, and the recorder goes on (it
    stopped, exit 1, at the first such interval)."""
    import dataclasses

    from ktop.record.fileformat import MAX_JSON, RecordWriter

    snapshot = interval(0)
    crowded = dataclasses.replace(snapshot, processes=tuple(
        dataclasses.replace(snapshot.processes[0], pid=10 + i) for i in range(MAX_ROWS + 1)))
    huge = "\x01" * (2 << 20)  # each control byte is 6 bytes of JSON
    hostile = dataclasses.replace(snapshot, processes=tuple(
        dataclasses.replace(snapshot.processes[0], pid=10 + i, cmdline=huge) for i in range(6)))
    assert len(json.dumps(hostile.processes[0].cmdline)) * 6 > MAX_JSON
    path = str(tmp_path / "r.krec")
    writer = RecordWriter(path)
    writer.append(snapshot)
    writer.append(crowded)
    assert (writer.trimmed_records, writer.trimmed_rows) == (1, 1)
    writer.append(hostile)
    writer.append(snapshot)
    assert writer.trimmed_records == 2
    writer.close()
    recording = Recording(path)
    assert len(recording) == 4
    assert len(recording.snapshot(1).processes) == MAX_ROWS
    assert recording.snapshot(1).processes[:3] == crowded.processes[:3]
    trimmed = recording.snapshot(2).processes
    assert [p.pid for p in trimmed] == [p.pid for p in hostile.processes]  # every row kept
    assert all(0 < len(p.cmdline) <= fileformat.TRIMMED_TEXT for p in trimmed)
    assert recording.snapshot(3).processes == snapshot.processes
