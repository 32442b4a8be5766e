"""The recording format (`ktop --record FILE`): round trips, crashes, damage, the ring, and
how the file is created as root. No kernel needed; the tmpfs test needs root to mount."""

from __future__ import annotations

import dataclasses
import errno
import os
import struct
import zlib

import pytest
from test_export import full_snapshot

from ktop.model import Snapshot
from ktop.record import fileformat as recording_module
from ktop.record.fileformat import (
    FORMAT,
    FRAME_SIZE,
    HEADER_SIZE,
    Recording,
    RecordingError,
    RecordWriter,
    frame_record,
)
from ktop.stacktree import hot_functions


def interval(i: int = 0) -> Snapshot:
    """A fully populated snapshot (every field set), as one interval of a recording: its hot
    functions derived from its stacks, as the live aggregator derives them."""
    snapshot = full_snapshot()
    cpu = snapshot.cpu
    cpu = dataclasses.replace(cpu, total_samples=cpu.total_samples + i, functions=hot_functions(
        cpu.stacks, cpu.sample_hz * cpu.window_s * cpu.cpus))
    return dataclasses.replace(snapshot, cpu=cpu, taken_at=snapshot.taken_at + i, paused=False)


def write(path, count: int, **writer_args) -> list[Snapshot]:
    written = [interval(i) for i in range(count)]
    writer = RecordWriter(str(path), **writer_args)
    for snapshot in written:
        writer.append(snapshot)
    writer.close()
    return [as_recorded(s) for s in written]


def as_recorded(snapshot: Snapshot) -> Snapshot:
    """The snapshot with its requests' times rounded as a record keeps them (to what the
    screen shows); every other value whole."""
    if snapshot.blockio is None:
        return snapshot
    requests = tuple(dataclasses.replace(r, **{
        name: round(getattr(r, name), digits)
        for name, digits in recording_module.REQUEST_DIGITS.items()})
        for r in snapshot.blockio.requests)
    return dataclasses.replace(snapshot, blockio=dataclasses.replace(snapshot.blockio,
                                                                     requests=requests))


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def test_every_field_round_trips(tmp_path):
    written = write(tmp_path / "r.krec", 3)
    recording = Recording(str(tmp_path / "r.krec"))
    assert list(recording.snapshots()) == written
    assert recording.dropped == ""
    assert [r.seq for r in recording.records] == [0, 1, 2]
    # The frame's figures, read without decompressing: what the timeline draws.
    first = recording.records[0]
    assert first.taken_at == written[0].taken_at
    assert first.kernel_percent == pytest.approx(written[0].cpu.times.kernel, rel=1e-6)
    assert first.lock_wait_ms == pytest.approx(3000 / 1e6, rel=1e-6)
    assert first.io_latency_ms == pytest.approx(written[0].blockio.disks[0].avg_lat_ms, rel=1e-6)


def test_a_pane_that_was_unavailable_stays_so(tmp_path):
    snapshot = dataclasses.replace(interval(), cpu=None, locks=None,
                                   unavailable={"functions": "needs root"})
    writer = RecordWriter(str(tmp_path / "r.krec"))
    writer.append(snapshot)
    writer.close()
    recording = Recording(str(tmp_path / "r.krec"))
    assert recording.snapshot(0) == as_recorded(snapshot)
    assert str(recording.records[0].kernel_percent) == "nan"  # a gap in the sparkline


def test_the_file_is_created_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        write(tmp_path / "r.krec", 1)
    finally:
        os.umask(old)
    assert (tmp_path / "r.krec").stat().st_mode & 0o777 == 0o600  # it holds command lines


def test_truncation_at_every_byte_of_the_last_record_keeps_the_ones_before(tmp_path):
    path = tmp_path / "r.krec"
    written = write(path, 3)
    data = path.read_bytes()
    last = Recording(str(path)).records[-1].offset
    for cut in range(last, len(data)):
        path.write_bytes(data[:cut])
        recording = Recording(str(path))
        assert list(recording.snapshots()) == written[:2], cut
        if cut > last:
            assert "cut off" in recording.dropped and "after record 1" in recording.dropped
        else:
            assert recording.dropped == ""  # it ends exactly after a record: nothing torn
        recording.close()


def test_a_crash_that_left_zeros_for_the_last_record_keeps_the_ones_before(tmp_path):
    """After a power cut a filesystem can show the file's new length with zeros in it."""
    path = tmp_path / "r.krec"
    written = write(path, 3)
    data = bytearray(path.read_bytes())
    last = Recording(str(path)).records[-1].offset
    for start in (last, last + FRAME_SIZE):  # the whole record, or only its payload
        torn = data[:start] + bytes(len(data) - start)
        path.write_bytes(torn)
        recording = Recording(str(path))
        assert list(recording.snapshots()) == written[:2]
        assert recording.dropped


def test_damage_in_the_middle_is_refused_whole(tmp_path):
    path = tmp_path / "r.krec"
    write(path, 3)
    data = path.read_bytes()
    records = Recording(str(path)).records
    middle = records[1]
    for where in (middle.offset + 6, middle.offset + FRAME_SIZE + 5, records[0].offset + 2):
        damaged = bytearray(data)
        damaged[where] ^= 0x40
        path.write_bytes(bytes(damaged))
        with pytest.raises(RecordingError) as error:
            Recording(str(path))
        assert "damaged" in one_line(error) and "not replayed" in one_line(error)


def test_a_record_missing_in_the_middle_is_refused(tmp_path):
    path = tmp_path / "r.krec"
    write(path, 3)
    data = path.read_bytes()
    records = Recording(str(path)).records
    path.write_bytes(data[: records[1].offset] + data[records[2].offset :])
    with pytest.raises(RecordingError) as error:
        Recording(str(path))
    assert "record 1 is followed by record 2" in one_line(error)


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (b"", "not a ktop recording"),
        (b"\x7fELF\x02\x01\x01" + bytes(40), "not a ktop recording"),
        (b"KTOPREC", "cut off in its header"),
        (recording_module.file_header(), "no whole record yet"),
    ],
)
def test_what_is_not_a_recording_gets_one_line(tmp_path, content, complaint):
    path = tmp_path / "x.krec"
    path.write_bytes(content)
    with pytest.raises(RecordingError) as error:
        Recording(str(path))
    assert complaint in one_line(error)


def test_a_newer_format_asks_for_a_newer_ktop(tmp_path):
    path = tmp_path / "r.krec"
    write(path, 1)
    data = bytearray(path.read_bytes())
    head = struct.pack("<8sHH", recording_module.MAGIC, FORMAT + 1, 0)
    data[:HEADER_SIZE] = head + struct.pack("<I", zlib.crc32(head))
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingError) as error:
        Recording(str(path))
    assert f"format {FORMAT + 1}" in one_line(error) and "newer ktop" in one_line(error)


def test_a_forged_record_with_a_valid_checksum_is_one_line(tmp_path):
    path = tmp_path / "r.krec"
    write(path, 1)
    data = path.read_bytes()
    payload = zlib.compress(b'{"processes": "\\u001b[2J"}')
    head = frame_record(1, interval(1))[: FRAME_SIZE - 4]
    head = head[:4] + struct.pack("<I", len(payload)) + head[8:12] + struct.pack(
        "<I", zlib.crc32(payload)) + head[16:]
    path.write_bytes(data + head + struct.pack("<I", zlib.crc32(head)) + payload)
    recording = Recording(str(path))
    with pytest.raises(RecordingError) as error:
        recording.snapshot(1)
    assert "holds no ktop snapshot" in one_line(error) and "\x1b" not in one_line(error)


# ---- writing -----------------------------------------------------------------------------


def test_the_ring_drops_the_oldest_and_stays_under_its_size(tmp_path):
    path = tmp_path / "r.krec"
    record_size = len(frame_record(0, interval()))
    limit = HEADER_SIZE + 10 * record_size + 10
    writer = RecordWriter(str(path), max_bytes=limit)
    for i in range(40):
        writer.append(interval(i))
        assert path.stat().st_size <= limit
    writer.close()
    recording = Recording(str(path))
    seqs = [r.seq for r in recording.records]
    assert seqs[-1] == 39 and seqs == list(range(seqs[0], 40))  # the newest, in a row
    assert 7 <= len(seqs) <= 10  # between three quarters and all of the limit
    assert recording.snapshot(len(seqs) - 1).taken_at == interval(39).taken_at
    assert path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["r.krec"]  # no temporary left


def _writer_in_another_process(path, max_bytes=None):
    """A RecordWriter held open by a child process (as a second `ktop --record` would)."""
    import subprocess
    import sys

    code = ("import sys; from ktop.record.fileformat import RecordWriter; "
            f"w = RecordWriter({str(path)!r}, {max_bytes!r}); print('open', flush=True); "
            "sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "open\n"
    return child


def test_a_second_writer_of_the_same_file_is_refused_naming_the_first(tmp_path):
    """Two `ktop --record same.krec` appended in turn and tore each other's records: the
    file was "damaged after 24 records" and nothing could be replayed."""
    path = tmp_path / "same.krec"
    child = _writer_in_another_process(path)
    try:
        with pytest.raises(RecordingError) as refused:
            RecordWriter(str(path))
        assert str(refused.value) == (
            f"cannot record to {path}: another ktop (pid {child.pid}) is recording to it; "
            "stop that one, or name another file")
    finally:
        child.stdin.close()
        child.wait(10)
    writer = RecordWriter(str(path))  # the first one gone: continued
    writer.append(interval(0))
    writer.close()
    assert len(Recording(str(path))) == 1


def test_two_writers_in_turn_never_tear_the_file(tmp_path):
    path = tmp_path / "same.krec"
    first = RecordWriter(str(path))
    with pytest.raises(RecordingError, match="another ktop .* is recording to it"):
        RecordWriter(str(path))
    for i in range(3):
        first.append(interval(i))
    first.close()
    assert [r.seq for r in Recording(str(path)).records] == [0, 1, 2]


def test_the_ring_keeps_its_lock_across_the_rename(tmp_path):
    path = tmp_path / "r.krec"
    record_size = len(frame_record(0, interval()))
    writer = RecordWriter(str(path), max_bytes=HEADER_SIZE + 4 * record_size + 10)
    for i in range(12):
        writer.append(interval(i))
    assert writer.ring_dropped  # the ring replaced the file by rename
    with pytest.raises(RecordingError, match=f"another ktop \\(pid {os.getpid()}\\)"):
        RecordWriter(str(path))
    writer.close()


def test_an_existing_recording_is_continued_after_its_torn_end(tmp_path):
    """A service restarted after kill -9 goes on with its history."""
    path = tmp_path / "r.krec"
    write(path, 2)
    with open(path, "ab") as f:
        f.write(frame_record(2, interval(2))[:30])  # the record being written when killed
    writer = RecordWriter(str(path))
    assert writer.continued == 2 and "cut off" in writer.dropped
    writer.append(interval(3))
    writer.close()
    recording = Recording(str(path))
    assert [r.seq for r in recording.records] == [0, 1, 2]
    assert recording.dropped == "" and recording.snapshot(2) == as_recorded(interval(3))


def busy(snapshot: Snapshot, stacks: int = 200, requests: int = 300) -> Snapshot:
    """Many stacks over the same frames, many requests: what a busy machine records."""
    base = snapshot.cpu.stacks[0]
    cpu = dataclasses.replace(snapshot.cpu, stacks=tuple(
        dataclasses.replace(base, pid=1000 + i, samples=1 + i % 7) for i in range(stacks)))
    request = snapshot.blockio.requests[0]
    blockio = dataclasses.replace(snapshot.blockio, requests=tuple(
        dataclasses.replace(request, time_s=100 + i / 3, sector=8 * i, lat_ms=0.1 + i / 7)
        for i in range(requests)))
    return dataclasses.replace(snapshot, cpu=cpu, blockio=blockio)


def test_a_record_names_each_frame_once_and_lists_requests_by_field(tmp_path):
    """A busy record repeated each frame name in every stack (farther apart than zlib's
    window) and each request's field names and noise digits: 25.0 KB an interval under busy
    churn here. Frames are numbers into the record's table of names now."""
    snapshot = busy(interval())
    payload = recording_module.encode_snapshot(snapshot)
    assert payload.count(b'"vfs_read+0x10"') == 1
    assert payload.count(b'"time_s"') == 1
    assert len(zlib.compress(payload, 6)) < 0.9 * len(zlib.compress(
        recording_module.encode_snapshot(snapshot, format=1), 6))
    back = recording_module.decode_snapshot(payload)
    assert back.cpu.stacks == snapshot.cpu.stacks and back.locks == snapshot.locks
    assert back.blockio == as_recorded(snapshot).blockio
    assert back.blockio.requests[1].time_s == round(100 + 1 / 3, 6)


def test_a_recording_of_format_1_is_read_and_continued_in_its_format(tmp_path):
    """A file ktop wrote before the table of names: read as before, and a restarted
    recorder appends records its own ktop can still read."""
    path = tmp_path / "old.krec"
    header = struct.pack("<8sHH", recording_module.MAGIC, 1, 0)
    with open(path, "wb") as f:
        f.write(header + struct.pack("<I", zlib.crc32(header)))
        f.write(frame_record(0, interval(0), format=1))
    writer = RecordWriter(str(path))
    writer.append(interval(1))
    writer.close()
    recording = Recording(str(path))
    assert list(recording.snapshots()) == [interval(0), interval(1)]  # as format 1 keeps them
    appended = recording.records[1]
    with open(path, "rb") as f:
        f.seek(appended.offset + FRAME_SIZE)
        assert b'"names"' not in zlib.decompress(f.read(appended.length))


def with_lock_losses(snapshot: Snapshot, unpaired: int) -> Snapshot:
    return dataclasses.replace(snapshot, locks=dataclasses.replace(
        snapshot.locks, lost={"unpaired": unpaired}))


def old_recording(path, losses: list[int], format: int = 2) -> None:
    """A file as ktop wrote it before Nov 24: each record's losses counted since start, and
    no disks' iostat counters (they came with the change to each interval's own)."""
    header = struct.pack("<8sHH", recording_module.MAGIC, format, 0)
    with open(path, "wb") as f:
        f.write(header + struct.pack("<I", zlib.crc32(header)))
        for seq, lost in enumerate(losses):
            snapshot = dataclasses.replace(with_lock_losses(interval(seq), lost), iostat=None)
            f.write(frame_record(seq, snapshot, format=format))
    os.chmod(path, 0o600)


def lock_losses(path) -> list[int]:
    recording = Recording(str(path))
    try:
        return [s.locks.lost["unpaired"] for s in recording.snapshots()]
    finally:
        recording.close()


def test_an_old_recordings_losses_since_start_are_read_as_each_intervals(tmp_path):
    """Records of formats 1 and 2 hold the losses counted since start: replayed as they
    are, the per-interval lost column grew 3 -> 11 and a window summed them again."""
    import csv
    import io

    from ktop.aggregate.merge import merge_snapshots
    from ktop.record.dump import dump

    path = tmp_path / "old.krec"
    # A ktop restarted mid-file (continued by a new process): its counters began at zero.
    old_recording(path, [3, 5, 11, 1, 4])
    assert lock_losses(path) == [3, 2, 6, 1, 3]
    recording = Recording(str(path))
    out = io.StringIO()
    dump(recording, "csv", out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    # lost_in_interval sums every pane: interval()'s other panes lose 1 + 1 + 1 each time,
    # the same since start, so the first record alone counts them.
    # Every pane's profile that counts losses, as the registry lists them (a new pane's too).
    from ktop.registry import PANES

    profiles = (getattr(interval(), spec.field, None) for spec in PANES if spec.field != "locks")
    others = sum(sum(p.lost.values()) for p in profiles if hasattr(p, "lost"))
    assert [int(row["lost_in_interval"]) for row in rows] == [3 + others, 2, 6, 1, 3]
    # A window of the first three: what was lost over them, 11, not 3 + 5 + 11.
    merged = merge_snapshots([recording.snapshot(i) for i in range(3)])
    assert merged.locks.lost["unpaired"] == 11
    # Read in any order (the cache dropped the record before): the same.
    assert Recording(str(path)).snapshot(2).locks.lost["unpaired"] == 6


def test_an_old_recording_continued_keeps_counting_since_start(tmp_path):
    """A new ktop appending to a format 2 file writes its losses as that file counts them
    (since start, from its last record's), so every record reads back as its interval's;
    its ring keeps the format of the records it copies."""
    path = tmp_path / "old.krec"
    old_recording(path, [3, 5])
    record_size = len(frame_record(0, interval()))
    writer = RecordWriter(str(path), max_bytes=HEADER_SIZE + 4 * record_size)
    for i in range(2, 8):
        writer.append(with_lock_losses(interval(i), i))  # each interval's own
    writer.close()
    with open(path, "rb") as f:
        assert struct.unpack("<H", f.read(10)[8:10])[0] == 2  # still format 2 after the ring
    recording = Recording(str(path))
    assert recording.records[0].seq > 0  # the ring dropped the oldest
    kept = [r.seq for r in recording.records]
    # On disk, as an old ktop reads the file: since start, 5 then 2 + 3 + ... + 7 more.
    last = recording.records[-1]
    with open(path, "rb") as f:
        f.seek(last.offset + FRAME_SIZE)
        raw = recording_module.decode_snapshot(zlib.decompress(f.read(last.length)))
    assert raw.locks.lost == {"unpaired": 5 + sum(range(2, 8))}
    # Read back: the first kept record counts since start (what came before it is in no
    # record); the others are their intervals' own.
    assert lock_losses(path)[1:] == kept[1:]


def test_a_format_2_file_of_the_ktop_that_counted_each_intervals_losses_is_read_as_is(tmp_path):
    """The ktop of Nov 24 wrote its interval's own losses in format 2 (with the disks'
    iostat counters, new in it): read as since-start counts, they read 3, 2, 6 for 3, 5, 11.
    Continued, the file goes on holding each interval's own."""
    from ktop.model import DiskIo, IostatProfile

    iostat = IostatProfile(span_s=1.0, disks=(DiskIo(disk="vda", major=253, minor=0),))
    path = tmp_path / "nov24.krec"
    header = struct.pack("<8sHH", recording_module.MAGIC, 2, 0)
    with open(path, "wb") as f:
        f.write(header + struct.pack("<I", zlib.crc32(header)))
        for seq, lost in enumerate([3, 5, 11]):
            snapshot = dataclasses.replace(with_lock_losses(interval(seq), lost), iostat=iostat)
            f.write(frame_record(seq, snapshot, format=2))
    os.chmod(path, 0o600)
    assert lock_losses(path) == [3, 5, 11]
    writer = RecordWriter(str(path))
    writer.append(dataclasses.replace(with_lock_losses(interval(3), 7), iostat=iostat))
    writer.close()
    assert lock_losses(path) == [3, 5, 11, 7]


def test_a_file_that_is_not_a_recording_is_never_overwritten(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("precious\n")
    with pytest.raises(RecordingError) as error:
        RecordWriter(str(path))
    assert "not a ktop recording" in one_line(error) and "name another file" in one_line(error)
    assert path.read_text() == "precious\n"


def test_a_symlink_at_the_target_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (tmp_path / "r.krec").symlink_to(victim)
    (tmp_path / "dangling.krec").symlink_to(tmp_path / "new-file")
    for name in ("r.krec", "dangling.krec"):
        with pytest.raises(RecordingError) as error:
            RecordWriter(str(tmp_path / name))
        assert "symlink" in one_line(error)
    assert victim.read_text() == "root's file\n"
    assert not (tmp_path / "new-file").exists()


def test_a_missing_directory_is_one_line(tmp_path):
    with pytest.raises(RecordingError) as error:
        RecordWriter(str(tmp_path / "missing" / "r.krec"))
    assert "does not exist" in one_line(error)


class FullDisk:
    """os.write that fails with ENOSPC once `room` bytes are written (after a short write,
    as a filesystem filling up does)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.real = os.write

    def __call__(self, fd: int, data) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = self.real(fd, bytes(data[: self.room]))
        self.room -= written
        return written


def test_a_full_disk_stops_the_recording_and_keeps_the_whole_records(tmp_path, monkeypatch):
    path = tmp_path / "r.krec"
    writer = RecordWriter(str(path))
    writer.append(interval(0))
    writer.append(interval(1))
    monkeypatch.setattr(os, "write", FullDisk(room=100))
    with pytest.raises(RecordingError) as error:
        writer.append(interval(2))
    message = one_line(error)
    assert "No space left on device" in message and "keeps its 2 whole records" in message
    monkeypatch.undo()
    writer.close()
    recording = Recording(str(path))
    assert len(recording) == 2 and recording.dropped == ""  # the torn one was cut back
