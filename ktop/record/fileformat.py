"""The recording format of `ktop --record FILE`: one record per interval, appended.

Why a file of framed records and not SQLite: every state the file can be in on disk is a
valid recording. A record is appended with one write and never changed afterwards; a crash
(kill -9, a power cut, a full disk) can only leave the last record short or zero-filled,
which a reader recognizes and drops, saying so. The file can be copied at any moment, needs
no side files (SQLite's -wal and -shm would have to travel with it, and a reader without
write access to the directory could not open it), is created and written without following
a symlink (SQLite opens by name, more than once), and is read without any library.

Layout (little-endian):

    file    = header record*
    header  = "KTOPREC\\0"  u16 format  u16 flags  u32 crc32 of the 12 bytes before
    record  = frame payload
    frame   = "KREC"  u32 payload length  u32 seq  u32 crc32 of the payload
              f64 taken_at (unix time)  f32 duration_s  f32 kernel CPU %  f32 lock wait ms
              f32 I/O latency ms  u32 crc32 of the 40 bytes before
    payload = zlib (deflate) of the interval's Snapshot as JSON, UTF-8; from format 2 its
              first key "names" is a table of the record's frame names (a string, or
              [symbol, module] for a user frame), and every frames, modules, sources and
              user_frames field a list of numbers into it; the block I/O requests are one
              list per field, their times rounded to what the screen shows (REQUEST_DIGITS);
              from format 3 each pane's "lost" counts its interval's losses alone (formats 1
              and 2 hold the collectors' counts since start: read as each interval's, the
              difference from the record before, as the live window takes them; except a
              format 2 file of the Nov 24 ktop, whose records hold iostat and their
              interval's own, unless the flag SINCE_START says a later ktop continued it)

`seq` counts records from the first the recording ever had: a ring that dropped its oldest
starts at a later one, and a gap anywhere else means a damaged file. The frame's figures
(NaN when a pane was unavailable) draw the replay's timeline without inflating every
record. The JSON is the snapshot of that one interval alone (the fields of ktop.model, as
`--snapshot FILE.json` writes them, floats unrounded, fields at their default left out,
hot functions left out: they are derived from the stacks and computed again on reading).
A replay sums any run of records as the live window sums intervals (ktop.record.replay).

A reader stops at the first record that is not whole. If that record runs to the end of
the file (cut off, or zero-filled by a crash) the records before it are the recording and
the reader says what was dropped; anything else after a damaged record means the file was
corrupted in the middle, and nothing is shown.

With a size limit the oldest records are dropped as a ring: when the next record would
pass the limit, the newest records filling three quarters of it are copied to a new file
that replaces the old one by rename (atomic: a reader or a crash sees one or the other).
"""

from __future__ import annotations

import array
import dataclasses
import errno
import fcntl
import json
import math
import os
import stat
import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ktop import safefs
from ktop.aggregate.window import lost_added, sum_lost
from ktop.codec import (
    LAST_TIME,
    MAX_FLOAT,
    MAX_ROWS,
    MAX_SPAN_S,
    FieldError,
    RecordingError,
    from_data,
    to_data,
)
from ktop.model import IoRequest, Snapshot
from ktop.registry import PANES, figured_panes
from ktop.stacktree import hot_functions
from ktop.text import printable

MAGIC = b"KTOPREC\x00"
# 2: a record's frames are numbers into its own table of names (format 1 files are read as
# before, and continued in their own format). 3: a record's losses are its interval's own.
FORMAT = 3
LOSSES_PER_INTERVAL = 3  # the first format whose records hold their interval's losses only
_HEADER = struct.Struct("<8sHHI")
_FRAME = struct.Struct("<4sIIIdffffI")
SYNC = b"KREC"
HEADER_SIZE = _HEADER.size  # 16
FRAME_SIZE = _FRAME.size  # 44
# A record bigger than this is no record ktop wrote: refuse it before allocating for it.
MAX_PAYLOAD = 256 << 20
# A record's JSON, inflated: a busy 2-CPU machine's is ~0.4 MB, and the biggest a record can
# be (every BPF map full, every stack 127 frames deep) ~25 MB. Inflating stops here.
MAX_JSON = 32 << 20
# Containers nested in a record: a snapshot's deepest is 7 (locks, callers, a caller, its
# task stacks, a stack, its user frames, a frame); a forged file's 100,000 are refused.
MAX_DEPTH = 32
RING_KEEPS = 0.75  # of the size limit, when the ring drops its oldest records
FIGURES = 3  # f32 figures in a frame: kernel CPU %, lock wait ms, I/O latency ms
# Decoded snapshots kept for stepping, counted by the bytes of their JSON (a decoded one
# takes 2 to 4.5 times as much): a window of records steps without decoding them again.
CACHE_BYTES = 32 << 20


@dataclass(frozen=True, slots=True)
class RecordInfo:
    """What a record's frame says, without decompressing it: enough for the timeline."""

    seq: int
    offset: int  # of the frame in the file
    length: int  # payload bytes
    taken_at: float  # unix time at the end of the interval
    duration_s: float
    kernel_percent: float  # NaN: no CPU data in that interval
    lock_wait_ms: float  # NaN: no lock data
    io_latency_ms: float  # average completion latency; NaN: no block I/O data

    @property
    def size(self) -> int:
        return FRAME_SIZE + self.length

    @property
    def figures(self) -> tuple[float, ...]:
        """In the order of ktop.registry.figured_panes()."""
        return self.kernel_percent, self.lock_wait_ms, self.io_latency_ms


class RecordIndex(Sequence[RecordInfo]):
    """Every whole record's frame, kept as columns of numbers (64 bytes a record): a
    forged file of minimal records, 54 bytes each, held 330 bytes of objects per record."""

    _FLOATS = 5  # taken_at, duration_s, the three figures

    def __init__(self) -> None:
        self._ints = array.array("Q")  # seq, offset, length
        self._floats = array.array("d")

    def append(self, seq: int, offset: int, length: int, *floats: float) -> None:
        """A record's frame: its RecordInfo's fields in order."""
        self._ints.extend((seq, offset, length))
        self._floats.extend(floats)

    def taken_at(self) -> array.array:
        """Every record's taken_at, in order (one array, no objects)."""
        return self._floats[0::self._FLOATS]

    def durations(self) -> array.array:
        return self._floats[1::self._FLOATS]

    def lengths(self) -> array.array:
        """Every record's payload bytes (compressed), in order."""
        return self._ints[2::3]

    def figure(self, index: int) -> array.array:
        """Every record's figure `index` (the order of RecordInfo.figures)."""
        return self._floats[2 + index::self._FLOATS]

    def __len__(self) -> int:
        return len(self._ints) // 3

    def _at(self, index: int) -> RecordInfo:
        i, f = index * 3, index * self._FLOATS
        return RecordInfo(*self._ints[i:i + 3], *self._floats[f:f + self._FLOATS])

    def __getitem__(self, index):  # type: ignore[override]  # int or slice, as a list's
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("record index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[RecordInfo]:
        for index in range(len(self)):
            yield self._at(index)


# ---- a snapshot as a record's payload -----------------------------------------------------


# Fields that hold frames (kernel "symbol+0xoff", modules, file:line, user frames): written
# as numbers into the record's table of names, each name once. A busy record repeats the
# same few hundred frames over thousands of stacks, farther apart than zlib's 32 KB window.
NAMED_FIELDS = frozenset({"frames", "modules", "sources", "user_frames"})
# A request's times as the screen shows them (time to the microsecond, queue and latency to
# a tenth of one): the digits below are noise, and a busy record lists hundreds of requests.
REQUEST_DIGITS = {"time_s": 6, "queue_ms": 4, "lat_ms": 4}
_REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(IoRequest))


def encode_snapshot(snapshot: Snapshot, format: int = FORMAT) -> bytes:
    """One interval's snapshot as a record's (uncompressed) payload, in the format of the
    file it goes to."""
    return encode_record(snapshot, format)[0]


def encode_record(snapshot: Snapshot, format: int = FORMAT) -> tuple[bytes, int]:
    """The payload, and how many rows and texts were left out or cut to make it one ktop
    reads back (0 for most): a table past MAX_ROWS keeps its first rows (tables are in the
    order shown, most first), and a record past MAX_JSON has its long texts cut to
    TRIMMED_TEXT and its tables cut shorter until it fits. One interval never stops a
    recorder."""
    data = _record_data(snapshot)
    trimmed = _cut_tables(data, MAX_ROWS)
    payload = _payload(data, format)
    rows = MAX_ROWS
    while len(payload) > MAX_JSON:
        data = _record_data(snapshot)
        trimmed = _cut_tables(data, rows) + _cut_texts(data)
        longest = _longest_table(data)
        payload = _payload(data, format)
        if len(payload) > MAX_JSON:
            if longest <= 1:  # cannot happen with texts cut and a row a table
                raise RecordingError(f"this interval's record is {len(payload) >> 20} MiB of "
                                     f"JSON even trimmed, more than the {MAX_JSON >> 20} MiB "
                                     "ktop reads back: not recorded")
            rows = max(1, min(longest // 2, int(longest * MAX_JSON / len(payload) * 0.9)))
    return payload, trimmed


# A text of a trimmed record is cut to this many characters (a command line, a cgroup path).
TRIMMED_TEXT = 256


def _record_data(snapshot: Snapshot) -> dict[str, Any]:
    data = to_data(dataclasses.replace(snapshot, paused=False), skip_defaults=True)
    if data.get("cpu"):
        del data["cpu"]["functions"]  # derived from the stacks: computed again on reading
    return data


def _cut_tables(data: Any, rows: int) -> int:
    """Every list of the data to its first `rows` (a list of values past MAX_ROWS only: a
    stack's frames are cut by no smaller count); the rows left out."""
    cut = 0
    if type(data) is dict:
        for value in data.values():
            if type(value) is list or type(value) is dict:
                cut += _cut_tables(value, rows)
    elif type(data) is list:
        limit = rows if data and type(data[0]) is dict else MAX_ROWS
        if len(data) > limit:
            cut += len(data) - limit
            del data[limit:]
        for item in data:
            if type(item) is list or type(item) is dict:
                cut += _cut_tables(item, rows)
    return cut


def _cut_texts(data: Any) -> int:
    """Every text value longer than TRIMMED_TEXT cut to it, in place; how many were."""
    cut = 0
    items = data.items() if type(data) is dict else enumerate(data)
    for key, value in items:
        if type(value) is str and len(value) > TRIMMED_TEXT:
            data[key] = value[:TRIMMED_TEXT]
            cut += 1
        elif type(value) is list or type(value) is dict:
            cut += _cut_texts(value)
    return cut


def _longest_table(data: Any) -> int:
    """The length of the longest list of rows (dicts) in the data."""
    longest = 0
    values = data.values() if type(data) is dict else data
    if type(data) is list and data and type(data[0]) is dict:
        longest = len(data)
    for value in values:
        if type(value) is list or type(value) is dict:
            longest = max(longest, _longest_table(value))
    return longest


def _payload(data: dict[str, Any], format: int) -> bytes:
    if format >= 2:
        names = _Names()
        names.number(data)
        requests = (data.get("blockio") or {}).get("requests")
        if requests:
            data["blockio"]["requests"] = _request_columns(requests)
        # First: a reader meets the names before the numbers that stand for them.
        data = {"names": names.table, **data}
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


class _Names:
    """The table of a record's names: a string, or [symbol, module] for a user frame."""

    def __init__(self) -> None:
        self.numbers: dict[Any, int] = {}
        self.table: list[Any] = []

    def number(self, data: Any) -> None:
        """The frames of the payload's data as numbers into the table, in place."""
        if type(data) is list:
            for item in data:
                if type(item) is dict or type(item) is list:
                    self.number(item)
            return
        if type(data) is not dict:
            return
        for key, value in data.items():
            if type(value) is list and len(value) > MAX_ROWS:  # never written: none reads it
                raise RecordingError(f"this interval holds {len(value)} rows of {key}; ktop reads "
                                     f"back at most {MAX_ROWS} a table: not recorded")
            if key in NAMED_FIELDS and type(value) is list:
                data[key] = [self._numbered(item) for item in value]
            elif type(value) is dict or type(value) is list:
                self.number(value)

    def _numbered(self, item: Any) -> int:
        key = item if type(item) is str else (item["symbol"], item["module"])
        number = self.numbers.get(key)
        if number is None:
            number = self.numbers[key] = len(self.table)
            self.table.append(item if type(item) is str else list(key))
        return number


def _request_columns(requests: list[dict]) -> dict[str, list]:
    """Requests as one list per field (each field's values side by side compress better
    than objects in turn), times rounded to what they can mean."""
    columns: dict[str, list] = {}
    for name in _REQUEST_FIELDS:
        digits = REQUEST_DIGITS.get(name)
        values = [request.get(name) for request in requests]
        if digits is not None:
            values = [None if v is None else round(v, digits) for v in values]
        if any(v is not None for v in values):
            columns[name] = values
    return columns


def _request_rows(columns: Any) -> list[dict]:
    if type(columns) is not dict or any(type(v) is not list for v in columns.values()):
        raise TypeError("request columns are no object of lists")
    lengths = {len(values) for values in columns.values()}
    if len(lengths) > 1:
        raise ValueError("request columns of different lengths")
    count = lengths.pop() if lengths else 0
    return [{name: values[i] for name, values in columns.items() if values[i] is not None}
            for i in range(count)]


def _named(data: Any, table: list, depth: int = 0) -> None:
    """A payload's frame numbers back to the names they stand for, in place."""
    if depth > MAX_DEPTH:
        raise ValueError(f"it nests containers deeper than {MAX_DEPTH}")
    if type(data) is list:
        for item in data:
            if type(item) is dict or type(item) is list:
                _named(item, table, depth + 1)
        return
    if type(data) is not dict:
        return
    for key, value in data.items():
        if key in NAMED_FIELDS and type(value) is list:
            data[key] = [_name(table, number) for number in value]
        elif type(value) is dict or type(value) is list:
            _named(value, table, depth + 1)


def _name(table: list, number: Any) -> Any:
    if type(number) is not int or not 0 <= number < len(table):
        raise ValueError(f"frame {number!r:.20} is in no table of names")
    name = table[number]
    if type(name) is list:
        if len(name) != 2:
            raise ValueError("a user frame's name is no [symbol, module]")
        symbol, module = name
        return {"symbol": symbol, "module": module}
    return name


def decode_snapshot(payload: bytes | bytearray) -> Snapshot:
    """A record's payload back to the Snapshot it was made from. Raises ValueError, KeyError
    or TypeError for data that is not one (FieldError naming the field of a value out of
    range or a table too long)."""
    data = _load_json(payload)
    if not isinstance(data, dict):
        raise TypeError("a record holds no object")
    names = data.pop("names", None)
    if names is not None:  # format 2: frames as numbers in the record's table
        if type(names) is not list:
            raise TypeError("a record's names are no list")
        _named(data, names)
        blockio = data.get("blockio")
        if isinstance(blockio, dict) and isinstance(blockio.get("requests"), dict):
            blockio["requests"] = _request_rows(blockio["requests"])
    cpu = data.get("cpu")
    if isinstance(cpu, dict):
        cpu["functions"] = []
    snapshot = from_data(Snapshot, data)
    cpu = snapshot.cpu
    if cpu is not None:  # as the live aggregator derives them, from the same stacks
        functions = hot_functions(cpu.stacks, cpu.sample_hz * cpu.window_s * cpu.cpus)
        snapshot = dataclasses.replace(snapshot, cpu=dataclasses.replace(cpu, functions=functions))
    return snapshot


def _load_json(text: bytes | str) -> Any:
    """JSON data, or ValueError: json's decoder stops at the interpreter's recursion limit
    (RecursionError, which must not escape as one: a forged file nests 100,000 deep)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it nests containers deeper than ktop reads") from None


def _figures(snapshot: Snapshot) -> tuple[float, ...]:
    """The timeline figures of one interval, NaN where unknown: the frame keeps FIGURES, the
    first panes' of ktop.registry that have one (their order is the format's)."""
    figures = [spec.figure.value(snapshot) for spec in figured_panes() if spec.figure]
    return (*figures, *[math.nan] * FIGURES)[:FIGURES]


def frame_record(seq: int, snapshot: Snapshot, level: int = 6, format: int = FORMAT) -> bytes:
    """The bytes appended for one interval: frame and compressed payload."""
    return framed_record(seq, snapshot, level, format)[0]


def framed_record(seq: int, snapshot: Snapshot, level: int = 6,
                  format: int = FORMAT) -> tuple[bytes, int]:
    """frame_record's bytes, and the rows and texts trimmed to make the record fit."""
    encoded, trimmed = encode_record(snapshot, format)
    payload = zlib.compress(encoded, level)
    head = _FRAME.pack(SYNC, len(payload), seq, zlib.crc32(payload), snapshot.taken_at,
                       snapshot.duration_s, *_figures(snapshot), 0)
    return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4])) + payload, trimmed


# The header's flags. SINCE_START: the records of this file of an older format count their
# losses since start (set by a ktop continuing such a file, whose new records would
# otherwise read as the Nov 24 ktop's, which held each interval's own).
SINCE_START = 1


def file_header(format: int = FORMAT, flags: int = 0) -> bytes:
    head = _HEADER.pack(MAGIC, format, flags, 0)
    return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))


Losses = dict[str, Mapping[str, int]]  # each pane's losses by reason, by its Snapshot field


def _counts_since_start(format: int, flags: int, snapshot: Snapshot) -> bool:
    """Whether a file of this format and header flags, whose first record this is, holds
    losses counted since start. Formats 1 and 2 did, but the ktop of Nov 24 already wrote its
    interval's own in format 2: its records are those with the disks' iostat counters, which
    came with that change."""
    if format >= LOSSES_PER_INTERVAL:
        return False
    return format < 2 or bool(flags & SINCE_START) or snapshot.iostat is None


def _losses(snapshot: Snapshot) -> Losses:
    profiles = ((spec.field, getattr(snapshot, spec.field)) for spec in PANES)
    return {name: profile.lost for name, profile in profiles if hasattr(profile, "lost")}


def _with_losses(snapshot: Snapshot, losses: Losses) -> Snapshot:
    return dataclasses.replace(snapshot, **{
        name: dataclasses.replace(getattr(snapshot, name), lost=lost)
        for name, lost in losses.items() if getattr(snapshot, name) is not None})


# ---- reading ------------------------------------------------------------------------------


def is_recording(path: str) -> bool:
    """Whether the file starts as a recording does (else it may be a --snapshot JSON)."""
    try:
        # O_NONBLOCK: a FIFO must not block; only a regular file is read.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        start = os.pread(fd, len(MAGIC), 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    # Four bytes at least: a recording cut off in its header is still one (and says so).
    return len(start) >= 4 and MAGIC.startswith(start)


@dataclass
class _Scan:
    records: RecordIndex
    end: int  # where the whole records end: a writer continues from here
    dropped: str  # "" or what was dropped at the end, for the one-line note
    format: int = FORMAT
    flags: int = 0


def _check_header(head: bytes, name: str) -> tuple[int, int]:
    """The file's format and flags, or RecordingError saying why it cannot be read."""
    if len(head) < HEADER_SIZE:
        if MAGIC.startswith(head[: len(MAGIC)]) and head:
            raise RecordingError(f"{name} is a ktop recording cut off in its header: "
                                 "it holds no records")
        raise RecordingError(f"{name} is not a ktop recording: replay a file written by "
                             "`ktop --record FILE` or `ktop --snapshot FILE.json`")
    magic, version, flags, crc = _HEADER.unpack(head)
    if magic != MAGIC:
        raise RecordingError(f"{name} is not a ktop recording: replay a file written by "
                             "`ktop --record FILE` or `ktop --snapshot FILE.json`")
    if zlib.crc32(head[:-4]) != crc:
        raise RecordingError(f"{name} is a damaged ktop recording (its header fails its "
                             "checksum): nothing in it can be trusted")
    if version > FORMAT:
        raise RecordingError(f"{name} is a recording of format {version}, newer than this ktop "
                             f"reads (format {FORMAT}): replay it with a newer ktop")
    if version < 1:
        raise RecordingError(f"{name} is not a ktop recording (format {version})")
    return version, flags


def _scan(fd: int, name: str) -> _Scan:
    """Every whole record's frame, checksums verified; raises RecordingError for a file that
    is not a recording or is damaged before its last record."""
    size = os.fstat(fd).st_size
    version, flags = _check_header(os.pread(fd, HEADER_SIZE, 0), name)
    records = RecordIndex()
    offset = HEADER_SIZE
    chunk = 1 << 20
    while offset < size:
        problem = ""
        head = os.pread(fd, FRAME_SIZE, offset)
        if len(head) < FRAME_SIZE:
            problem = "its last record is cut off"
        else:
            sync, length, seq, payload_crc, taken_at, duration, *figures, head_crc = _FRAME.unpack(head)
            if sync != SYNC or zlib.crc32(head[:-4]) != head_crc or length > MAX_PAYLOAD:
                problem = "a record's frame is damaged"
            elif offset + FRAME_SIZE + length > size:
                problem = "its last record is cut off"
            else:
                crc = 0
                for at in range(0, length, chunk):
                    crc = zlib.crc32(os.pread(fd, min(chunk, length - at), offset + FRAME_SIZE + at), crc)
                if crc != payload_crc:
                    problem = "a record fails its checksum"
                elif records and seq != records[-1].seq + 1:
                    problem = f"record {records[-1].seq + 1} is followed by record {seq}"
        if problem:
            if problem.startswith("record ") or not _only_tail(fd, offset, size, head):
                raise RecordingError(
                    f"{name} is damaged after {len(records)} records ({problem}, with more "
                    "data after it): a file corrupted in the middle is not replayed"
                )
            return _Scan(records, offset,
                         f"{problem}: {size - offset} bytes dropped after record "
                         f"{records[-1].seq if records else 'none'}", version, flags)
        wrong = _wrong_frame(taken_at, duration, figures)
        if wrong:
            raise RecordingError(f"{name}: record {seq}'s frame says {wrong}, which ktop never "
                                 "writes: the file was not written by ktop")
        records.append(seq, offset, length, taken_at, duration, *figures)
        offset += FRAME_SIZE + length
    return _Scan(records, offset, "", version, flags)


def _wrong_frame(taken_at: float, duration_s: float, figures: list[float]) -> str:
    """The frame's figure that no ktop writes (its checksum holds: forged), or ""."""
    if not 0.0 <= taken_at <= LAST_TIME:  # NaN too
        return f"taken_at {taken_at!r:.30}"
    if not 0.0 <= duration_s <= MAX_SPAN_S:
        return f"duration_s {duration_s!r:.30}"
    for figure in figures:
        if not (math.isnan(figure) or 0.0 <= figure <= MAX_FLOAT):  # NaN: the pane was off
            return f"a timeline figure of {figure!r:.30}"
    return ""


def _only_tail(fd: int, offset: int, size: int, head: bytes) -> bool:
    """Whether the bad record at `offset` is the torn end of the file: cut short, or whole
    in length but running to the end (a crash can leave zeros where its bytes were)."""
    if len(head) < FRAME_SIZE:
        return True
    sync, length, *_rest, head_crc = _FRAME.unpack(head)
    if sync == SYNC and zlib.crc32(head[:-4]) == head_crc and length <= MAX_PAYLOAD:
        return offset + FRAME_SIZE + length >= size
    # A frame that is not one: only zeros from here on are a crash's leftovers. Holes are
    # zeros unread (a sparse file of 20 GB took minutes to read).
    at = offset
    while at < size:
        try:
            at = os.lseek(fd, at, os.SEEK_DATA)
            end = min(size, os.lseek(fd, at, os.SEEK_HOLE))
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past `at`: a hole to the end
                return True
            return _zeros(fd, at, size)  # a file system without SEEK_DATA
        if not _zeros(fd, at, end):
            return False
        at = end
    return True


def _zeros(fd: int, at: int, end: int) -> bool:
    while at < end:
        block = os.pread(fd, min(1 << 20, end - at), at)
        if not block or block.count(0) != len(block):
            return False
        at += len(block)
    return True


def _inflate(fd: int, info: RecordInfo, name: str) -> bytearray:
    """The record's JSON, inflated no further than MAX_JSON (a zlib bomb stops there)."""
    if info.length > MAX_JSON + (MAX_JSON >> 8) + 64:  # deflate never grows data more
        raise RecordingError(f"{name}: record {info.seq} is {info.length >> 20} MiB "
                             f"compressed, and no record ktop reads inflates past "
                             f"{MAX_JSON >> 20} MiB: the file was not written by ktop")
    inflater = zlib.decompressobj()
    # A MiB at a time: one decompress(max_length) call doubles its buffer up to twice that.
    raw = bytearray()
    tail = os.pread(fd, info.length, info.offset + FRAME_SIZE)
    while tail and not inflater.eof:
        raw += inflater.decompress(tail, 1 << 20)
        tail = inflater.unconsumed_tail
        if len(raw) > MAX_JSON:
            raise RecordingError(f"{name}: record {info.seq} inflates past "
                                 f"{MAX_JSON >> 20} MiB, more than any record ktop writes: "
                                 "the file was not written by ktop")
    raw += inflater.flush()
    return raw


class Recording:
    """A recording opened for replay: every record's frame read and checked at once (so a
    damaged file is refused before anything is shown), snapshots decoded when asked for."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = printable(path)
        try:
            # O_NONBLOCK: a FIFO opens without waiting for a writer, then is refused.
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise RecordingError(f"cannot read {self.name}: {e.strerror or e}") from None
        try:
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise RecordingError(f"cannot read {self.name}: not a regular file")
            scan = _scan(self._fd, self.name)
        except OSError as e:
            os.close(self._fd)
            raise RecordingError(f"cannot read {self.name}: {e.strerror or e}") from None
        except RecordingError:
            os.close(self._fd)
            raise
        if not scan.records:
            os.close(self._fd)
            why = f" ({scan.dropped})" if scan.dropped else ""
            raise RecordingError(f"{self.name} is a ktop recording with no whole record yet{why}: "
                                 "record for at least one interval")
        self.records = scan.records
        self.format = scan.format
        self._flags = scan.flags
        # One line for the user when the end was cut off (kill -9, disk full, power cut).
        self.dropped = scan.dropped
        # index -> (snapshot, bytes of its JSON, losses since start as recorded in a file
        # of an older format), newest used last; at most CACHE_BYTES.
        self._cache: OrderedDict[int, tuple[Snapshot, int, Losses]] = OrderedDict()
        self._cached_bytes = 0
        self._counts_since_start: bool | None = None  # known at the first record decoded

    def __len__(self) -> int:
        return len(self.records)

    def snapshot(self, index: int) -> Snapshot:
        """The snapshot of record `index` (0 = the oldest kept). Raises RecordingError if its
        payload, whole and checksummed, still does not decode (a bug, or a forged file)."""
        return self.decoded(index)[0]

    def decoded(self, index: int, keep: bool = True) -> tuple[Snapshot, int]:
        """The snapshot of record `index` and the bytes of its JSON (what decoding it cost);
        keep=False: not kept for stepping back to it (a merge of the whole reads each once)."""
        cached = self._cache.get(index)
        if cached is not None:
            self._cache.move_to_end(index)
            return cached[0], cached[1]
        snapshot, size = self._decode(index)
        since_start: Losses = {}
        if self._since_start_counts(index, snapshot):
            # Counted since start: the interval's own are what it added to the record before
            # (the first kept record keeps them all: lost before it, shown nowhere else).
            since_start = _losses(snapshot)
            if index > 0:
                before = self._since_start(index - 1)
                snapshot = _with_losses(snapshot, {
                    name: lost_added(before.get(name, {}), lost)
                    for name, lost in since_start.items()})
        if not keep:
            return snapshot, size
        self._cache[index] = (snapshot, size, since_start)
        self._cached_bytes += size
        while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
            self._cached_bytes -= self._cache.popitem(last=False)[1][1]
        return snapshot, size

    def _since_start_counts(self, index: int, snapshot: Snapshot) -> bool:
        """Whether this file's records count losses since start (decided by its first)."""
        if self.format >= LOSSES_PER_INTERVAL:
            return False
        if self._counts_since_start is None:
            first = snapshot if index == 0 else self._decode(0)[0]
            self._counts_since_start = _counts_since_start(self.format, self._flags, first)
        return self._counts_since_start

    def _since_start(self, index: int) -> Losses:
        """The losses since start record `index` of an older format holds."""
        cached = self._cache.get(index)
        return cached[2] if cached is not None else _losses(self._decode(index)[0])

    def _decode(self, index: int) -> tuple[Snapshot, int]:
        """Record `index` decoded as it was written, and the bytes of its JSON."""
        info = self.records[index]
        try:
            raw = _inflate(self._fd, info, self.name)
            snapshot = decode_snapshot(raw)
        except OSError as e:
            raise RecordingError(f"cannot read {self.name}: {e.strerror or e}") from None
        except FieldError as e:
            raise RecordingError(f"{self.name}: record {info.seq} holds {printable(str(e))[:120]}"
                                 if e.rows else
                                 f"{self.name}: record {info.seq} holds no ktop snapshot "
                                 f"({printable(str(e))[:120]}): the file was not written by ktop") from None
        except (zlib.error, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            raise RecordingError(f"{self.name}: record {info.seq} holds no ktop snapshot "
                                 f"({printable(str(e))[:80]}): the file was not written by ktop") from None
        return snapshot, len(raw)

    def snapshots(self) -> Iterator[Snapshot]:
        for index in range(len(self.records)):
            yield self.snapshot(index)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ---- writing ------------------------------------------------------------------------------


def _lock_holder(info: os.stat_result, locks: str = "/proc/locks") -> int | None:
    """The pid /proc/locks names for a flock on the file (None when it names none)."""
    # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF": the device in hex, then the inode.
    want = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    try:
        with open(locks, "rb") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != b"FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(b":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                return int(fields[4])
        except ValueError:
            continue
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # no error, no progress: a full disk on some filesystems
            raise OSError(28, os.strerror(28))
        view = view[written:]


class RecordWriter:
    """Appends one record per interval to FILE, as root: the file is created (mode 0600: it
    holds command lines) or continued, never through a symlink (in the path either: see
    ktop.safefs); with max_bytes, a ring.

    An existing recording is continued after its last whole record (a service restarted
    goes on with its history) if this user owns it and nobody else may write it; any other
    existing file is refused, never overwritten.

    The writer holds an exclusive flock on the file while it records: a second writer of the
    same file is refused at once (two appending in turn tore each other's records), and the
    ring's new file is locked before it replaces the old one under its name.
    """

    def __init__(self, path: str, max_bytes: int | None = None, level: int = 6,
                 exclusive: bool = False) -> None:
        """exclusive: a new file only (FileExistsError if the name is taken), as `R` makes."""
        self.path = path
        self.exclusive = exclusive
        self._dir_fd = -1  # the file's directory, reached without planted links (ktop.safefs)
        self.name = printable(path)
        self.max_bytes = max_bytes
        self.level = level
        self.records = 0  # appended by this writer
        self.ring_dropped = 0  # records the ring dropped, oldest first
        # Records trimmed to be ones ktop reads back, and the rows and texts they left out.
        self.trimmed_records = 0
        self.trimmed_rows = 0
        self.format = FORMAT
        # A file whose records count losses since start (older formats) goes on so, from its
        # last record's: each pane's, by reason; None: each record holds its interval's own.
        self._lost_since_start: Losses | None = None
        self.continued = 0  # whole records the file already held
        self.dropped = ""  # what was cut off its end, when continued
        self._offsets = array.array("Q")  # of the records in the file, kept for the ring
        self._fd = self._open()

    def _fail(self, why: str) -> RecordingError:
        return RecordingError(f"cannot record to {self.name}: {why}")

    def _open(self) -> int:
        directory, name = safefs.split(self.path)
        self._name = name
        if name in ("", ".", ".."):
            raise self._fail("it is a directory: name a file")
        try:
            self._dir_fd = safefs.open_directory(directory)
        except safefs.UnsafePath as e:
            raise self._fail(str(e)) from None
        except FileNotFoundError:
            raise self._fail(f"directory {printable(directory)} does not exist") from None
        except OSError as e:
            raise self._fail(f"{printable(e.filename or directory)}: {e.strerror}") from None
        try:
            fd = safefs.create_exclusive(self._dir_fd, name, 0o600, os.O_RDWR)
        except FileExistsError:
            if self.exclusive:
                self._close_dir()
                raise
            return self._continue()
        except OSError as e:
            self._close_dir()
            raise self._fail(e.strerror or str(e)) from None
        try:
            self._lock(fd)
        except RecordingError:
            os.close(fd)  # the other writer owns it now: left alone
            self._close_dir()
            raise
        try:
            _write_all(fd, file_header())
        except OSError as e:
            os.close(fd)
            os.unlink(name, dir_fd=self._dir_fd)
            self._close_dir()
            raise self._fail(e.strerror or str(e)) from None
        self._end = HEADER_SIZE
        self._seq = 0
        return fd

    def _close_dir(self) -> None:
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def _continue(self) -> int:
        """The existing file, continued only if it is a regular file this user owns and
        nobody else may write: root continuing a file another user made (or may still
        write) would hand that user the command lines and stacks recorded."""
        try:
            fd = self._open_own()
            self._lock(fd)
        except BaseException:
            self._close_dir()
            raise
        try:
            info = os.fstat(fd)
            if info.st_size == 0:  # an empty file (touch) holds nothing to lose
                os.fchmod(fd, 0o600)
                _write_all(fd, file_header())
                self._end, self._seq = HEADER_SIZE, 0
                return fd
            try:
                scan = _scan(fd, self.name)
            except RecordingError as e:
                raise self._fail(f"it exists and is not a ktop recording this ktop can continue "
                                 f"({str(e).removeprefix(self.name + ' ')}); remove it or name "
                                 "another file") from None
            if scan.records and scan.format < LOSSES_PER_INTERVAL:
                self._lost_since_start = self._last_losses(fd, scan)
                if self._lost_since_start is not None and not scan.flags & SINCE_START:
                    # Said in the header: the records this ktop adds are new ones.
                    os.pwrite(fd, file_header(scan.format, scan.flags | SINCE_START), 0)
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, scan.end)  # a torn last record goes: the next one follows whole
        except OSError as e:
            os.close(fd)
            self._close_dir()
            raise self._fail(e.strerror or str(e)) from None
        except RecordingError:
            os.close(fd)
            self._close_dir()
            raise
        self.continued = len(scan.records)
        self.format = scan.format  # a file of an older format goes on in it
        self.dropped = scan.dropped
        self._end = scan.end
        self._seq = scan.records[-1].seq + 1 if scan.records else 0
        if self.max_bytes:
            self._offsets.extend(r.offset for r in scan.records)
        return fd

    def _last_losses(self, fd: int, scan: _Scan) -> Losses | None:
        """The losses since start the file's last record holds (None: its records hold their
        interval's own, as its first tells), or RecordingError."""
        first, last = scan.records[0], scan.records[-1]
        try:
            if not _counts_since_start(scan.format, scan.flags,
                                       decode_snapshot(_inflate(fd, first, self.name))):
                return None
            return _losses(decode_snapshot(_inflate(fd, last, self.name)))
        except RecordingError as e:
            raise self._fail(f"it exists and a record of it cannot be read ({e}); remove it "
                             "or name another file") from None
        except (zlib.error, ValueError, KeyError, TypeError, AttributeError, IndexError):
            raise self._fail("it exists and a record of it holds no ktop "
                             "snapshot; remove it or name another file") from None

    def _open_own(self) -> int:
        """The existing file, opened for writing once it is known to be one ktop may continue."""
        try:
            safefs.check_target(self._dir_fd, self._name)
        except safefs.UnsafePath as e:
            raise self._fail(str(e).replace("name a new or regular file, or - for standard "
                                            "output", "name the file itself")) from None
        try:
            # O_NONBLOCK: a FIFO swapped in since the check opens without waiting, then is refused.
            fd = os.open(self._name, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                         dir_fd=self._dir_fd)
        except OSError as e:
            raise self._fail(e.strerror or str(e)) from None
        info = os.fstat(fd)
        problem = ""
        if not stat.S_ISREG(info.st_mode):
            problem = f"it is {safefs.kind_of(info.st_mode)}: name a regular file"
        elif info.st_uid != os.geteuid():
            problem = (f"it exists and belongs to uid {info.st_uid}, and ktop continues only "
                       "its own recordings (that user could read what it records): remove "
                       "it or name another file")
        elif info.st_mode & 0o022:
            problem = (f"it exists and others may write it (mode {info.st_mode & 0o777:04o}): "
                       "ktop continues only a recording nobody else can change; remove it or "
                       "name another file")
        if problem:
            os.close(fd)
            raise self._fail(problem)
        os.set_blocking(fd, True)
        return fd

    def _lock(self, fd: int) -> None:
        """An exclusive flock on the file just opened, or RecordingError naming who holds
        it. Closes fd on failure. A ring that replaced the file by rename between our open
        and our lock leaves us the old one, no longer named: refused as well."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            info = os.fstat(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise self._fail(f"cannot lock it: {e.strerror or e}") from None
            raise self._busy(_lock_holder(info)) from None
        try:
            named = os.stat(self._name, dir_fd=self._dir_fd, follow_symlinks=False)
            held = os.fstat(fd)
        except OSError:
            named = held = None
        if named is None or held is None or (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
            os.close(fd)
            raise self._busy(None)

    def _busy(self, pid: int | None) -> RecordingError:
        who = f"ktop (pid {pid})" if pid else "ktop"
        return self._fail(f"another {who} is recording to it; stop that one, or name "
                          "another file")

    @property
    def size(self) -> int:
        return self._end

    @property
    def held(self) -> int:
        """Whole records in the file now."""
        return self.continued + self.records - self.ring_dropped

    def append(self, snapshot: Snapshot) -> int:
        """Append the interval's record; returns its size. On a write error (a full disk)
        the file is cut back to its last whole record and RecordingError says so."""
        if self._fd < 0:
            raise self._fail("the recording is closed")
        if self._lost_since_start is not None:  # the file counts them since start
            since_start = self._lost_since_start
            self._lost_since_start = {**since_start, **{
                name: sum_lost((since_start.get(name, {}), lost))
                for name, lost in _losses(snapshot).items()}}
            snapshot = _with_losses(snapshot, self._lost_since_start)
        record, trimmed = framed_record(self._seq, snapshot, self.level, self.format)
        if self.max_bytes and self._end + len(record) > self.max_bytes and self._offsets:
            self._drop_oldest(len(record))
        try:
            os.lseek(self._fd, self._end, os.SEEK_SET)
            _write_all(self._fd, record)
        except OSError as e:
            try:
                os.ftruncate(self._fd, self._end)
            except OSError:
                pass  # a reader drops the torn record anyway
            raise self._stopped(e) from None
        if self.max_bytes:
            self._offsets.append(self._end)
        self._end += len(record)
        self._seq += 1
        self.records += 1
        if trimmed:
            self.trimmed_records += 1
            self.trimmed_rows += trimmed
        return len(record)

    def _stopped(self, error: OSError) -> RecordingError:
        kept = self.continued + self.records
        return RecordingError(f"recording to {self.name} stopped: {error.strerror or error} "
                              f"(the file keeps its {kept} whole records)")

    def _drop_oldest(self, incoming: int) -> None:
        """The ring: copy the newest records that fill RING_KEEPS of the limit (and leave room
        for the incoming one) to a new file, which replaces this one by rename."""
        budget = max(0, int(self.max_bytes * RING_KEEPS) - HEADER_SIZE - incoming)
        offsets = self._offsets
        first = len(offsets)
        while first > 0 and self._end - offsets[first - 1] <= budget:
            first -= 1
        start = offsets[first] if first < len(offsets) else self._end
        try:
            fd, temporary = safefs.create_temporary(self._dir_fd, ".ktop-record-", 0o600,
                                                    os.O_RDWR)
        except OSError as e:
            raise self._stopped(e) from None
        try:
            # Locked before it gets the name: a writer that opens it then is refused.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Its records' format and way of counting losses, continued or not.
            _write_all(fd, file_header(self.format,
                                       0 if self._lost_since_start is None else SINCE_START))
            at = start
            while at < self._end:
                block = os.pread(self._fd, min(1 << 20, self._end - at), at)
                _write_all(fd, block)
                at += len(block)
            os.fsync(fd)
            # In the directory opened at the start: a link planted in the path since is not
            # followed, and the name itself is replaced, symlink or not.
            os.rename(temporary, self._name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        except OSError as e:
            os.close(fd)
            try:
                os.unlink(temporary, dir_fd=self._dir_fd)
            except OSError:
                pass
            raise self._stopped(e) from None
        os.close(self._fd)
        self._fd = fd
        shift = start - HEADER_SIZE
        self.ring_dropped += first
        self._offsets = array.array("Q", (o - shift for o in offsets[first:]))
        self._end -= shift

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1
        self._close_dir()
