"""Two moments compared: a window against a baseline window, pane by pane and stack by stack.

One diff serves every pane: each pane's Comparison (ktop.registry) names its rows by a key that
means the same row in both windows and measures each by one figure a second of its own
window, so a 30 s window compares with a 5 s one. A row is `new` when the baseline has no
such row, `gone` when only the baseline has it (listed with its baseline figure). The panes
in compare mode (key b), the drill-downs, `--baseline` with `--snapshot` (a picture, JSON,
or a differential folded file as difffolded.pl writes it) all read these functions.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ktop.model import BuiltOnRead, Snapshot
from ktop.registry import PANES, Comparison, PaneDef, Shows, folded_exports
from ktop.text import human_bytes, printable
from ktop.units import count_of, format_span

NEW = "new"
GONE = "gone"


@dataclass(frozen=True)
class Baseline:
    """The window the panes compare against, and how the header names it."""

    snapshot: Snapshot
    label: str  # "19:53:10-19:53:40, 30s", and the file's name when another file
    # Another file (a boot before, another machine): its pids mean other processes, so the
    # panes that list processes match them by command at first (v: by process).
    by_command: bool = False


def window_label(snapshot: Snapshot, source: str = "") -> str:
    """'19:53:10-19:53:40, 30s' (local time, as the header's clock), 'of FILE' after."""
    end = snapshot.taken_at
    start = end - snapshot.duration_s
    clock = f"{_clock(start)}-{_clock(end)}, {format_span(snapshot.duration_s)}"
    return f"{clock} of {printable(source)}" if source else clock


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def baseline_of(snapshot: Snapshot, source: str = "") -> Baseline:
    """The window as a baseline; `source`, the file it comes from when another one."""
    return Baseline(snapshot, window_label(snapshot, source), by_command=bool(source))


@dataclass(frozen=True)
class Change:
    """One row in both windows (or one of them), its figures a second of each window."""

    key: tuple
    name: str
    now: float | None  # None: gone since the baseline
    base: float | None  # None: new since the baseline
    row: Any  # the model row: the current window's, the baseline's when gone

    @property
    def change(self) -> float:
        return (self.now or 0.0) - (self.base or 0.0)

    @property
    def status(self) -> str:
        return NEW if self.base is None else GONE if self.now is None else ""


def keying(spec: Comparison, by_command: bool) -> tuple[Callable[[Any], tuple],
                                                       Callable[[Any], str]]:
    """How rows are matched and named: by their own key, or by command where the pane has
    one (processes of two boots or machines share commands, not pids)."""
    if by_command and spec.command_key is not None and spec.command_name is not None:
        return spec.command_key, spec.command_name
    return spec.key, spec.name


def _figures(spec: Comparison, snapshot: Snapshot, shows: Shows | None,
             by_command: bool) -> dict[tuple, tuple[float, Any]]:
    key_of, _ = keying(spec, by_command)
    scale = spec.scale(snapshot)
    figures: dict[tuple, tuple[float, Any]] = {}
    for row in spec.rows(snapshot, shows):
        key = key_of(row)
        had = figures.get(key)
        figure = spec.amount(row) * scale
        # Rows of one key (a command's processes, a pid reused in a window): their sum.
        figures[key] = (figure + had[0], had[1]) if had else (figure, row)
    return figures


def by_change(changes: Iterable[Change]) -> list[Change]:
    """Biggest change first, rises and falls alike; then the busier, then by name."""
    return sorted(changes, key=lambda c: (-abs(c.change), -max(c.now or 0.0, c.base or 0.0),
                                          c.name))


def compare_rows(spec: Comparison, now: Snapshot, base: Snapshot,
                 shows: Shows | None = None, by_command: bool = False) -> list[Change]:
    """Every row of either window with its figure in each, by the size of the change."""
    _, name_of = keying(spec, by_command)
    current = _figures(spec, now, shows, by_command)
    before = _figures(spec, base, shows, by_command)
    changes = [Change(key, name_of(row), figure, before[key][0] if key in before else None, row)
               for key, (figure, row) in current.items()]
    changes += [Change(key, name_of(row), None, figure, row)
                for key, (figure, row) in before.items() if key not in current]
    return by_change(changes)


def rows_in(spec: Comparison, snapshot: Snapshot, key: tuple, by_command: bool = False) -> list[Any]:
    """The rows of that key in the window (unfiltered): one, or a command's several."""
    key_of, _ = keying(spec, by_command)
    return [row for row in spec.rows(snapshot, None) if key_of(row) == key]


def figure_of(spec: Comparison, snapshot: Snapshot, key: tuple, by_command: bool = False) -> float | None:
    """The figure of the row of that key in the window, None when it has none."""
    rows = rows_in(spec, snapshot, key, by_command)
    return sum(spec.amount(row) for row in rows) * spec.scale(snapshot) if rows else None


@dataclass(frozen=True)
class StackChange:
    """One stack (function names, root first) behind a row, a second of each window."""

    frames: tuple[str, ...]
    now: float | None
    base: float | None

    @property
    def change(self) -> float:
        return (self.now or 0.0) - (self.base or 0.0)

    @property
    def status(self) -> str:
        return NEW if self.base is None else GONE if self.now is None else ""


def _stack_figures(spec: Comparison, snapshot: Snapshot,
                   rows: Iterable[Any]) -> dict[tuple[str, ...], float]:
    """Stacks that fold to the same function names (offsets apart) summed, a second."""
    scale = spec.stack_scale(snapshot)
    figures: dict[tuple[str, ...], float] = {}
    for row in rows:
        for frames, weight in spec.stacks(snapshot, row):
            key = tuple(frames)
            figures[key] = figures.get(key, 0.0) + weight * scale
    return figures


def compare_stacks(spec: Comparison, now: Snapshot, base: Snapshot, key: tuple,
                   by_command: bool = False) -> list[StackChange]:
    """The stacks behind the row of `key` in each window, by the size of the change."""
    current = _stack_figures(spec, now, rows_in(spec, now, key, by_command))
    before = _stack_figures(spec, base, rows_in(spec, base, key, by_command))
    changes = [StackChange(frames, figure, before.get(frames)) for frames, figure in current.items()]
    changes += [StackChange(frames, None, figure) for frames, figure in before.items()
                if frames not in current]
    return sorted(changes, key=lambda c: (-abs(c.change), c.frames))


# ---- figures as text ------------------------------------------------------------------------


def format_figure(value: float, unit: str, signed: bool = False, suffix: bool = True) -> str:
    """A figure a second as the panes show theirs: '12.30%', '4.10ms/s', '1.2MB/s' (without
    the unit where a column's label says it)."""
    sign = "+" if signed and value > 0 else ""
    if unit == "B/s":
        text = human_bytes(value)
        return f"{sign}{text}B/s" if suffix else f"{sign}{text}"
    return f"{sign}{value:.2f}{unit if suffix else ''}"


def changed_count(changes: Iterable[Change]) -> str:
    """'3 new, 1 gone' of a pane's rows ('' for neither)."""
    counts: dict[str, int] = {}
    for c in changes:
        if c.status:
            counts[c.status] = counts.get(c.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), reverse=True))


# ---- --snapshot FILE.json and FILE.folded with --baseline -----------------------------------


def holds(spec: PaneDef, snapshot: Snapshot) -> bool:
    """Whether the window has the pane's data at all: a file written before the pane
    existed (or before it attached) has none, and its rows would all read new or gone."""
    return getattr(snapshot, spec.field) is not None


def compared_panes() -> list[PaneDef]:
    return [spec for spec in PANES if spec.compare is not None]


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 6)


def _json_rows(changes: Iterable[Change]) -> list[dict[str, Any]]:
    return [{"key": list(c.key), "name": c.name, "now": _number(c.now),
             "baseline": _number(c.base), "change": _number(c.change), "status": c.status}
            for c in changes]


def to_json(now: Snapshot, baseline: Baseline, include_idle: bool = False) -> dict[str, Any]:
    """The current window's snapshot as `--snapshot FILE.json` writes it, the baseline's
    span, and each pane's rows with both figures a second and the change."""
    from ktop.exports.jsonfile import to_json as snapshot_json  # noqa: PLC0415

    data = snapshot_json(now, include_idle)
    base = baseline.snapshot
    data["baseline"] = {"label": baseline.label, "taken_at": base.taken_at,
                        "duration_s": base.duration_s, "hostname": base.hostname,
                        "kernel": base.kernel}
    compared: dict[str, Any] = {}
    for spec in compared_panes():
        assert spec.compare is not None
        missing = [which for which, snapshot in (("current window", now), ("baseline", base))
                   if not holds(spec, snapshot)]
        if missing:
            compared[spec.name] = {"figure": spec.compare.label, "unit": spec.compare.unit,
                                   "rows": [], "missing": f"no {spec.name} data in the "
                                   + " nor the ".join(missing)}
            continue
        compared[spec.name] = {
            "figure": spec.compare.label,
            "unit": spec.compare.unit,
            "rows": _json_rows(compare_rows(spec.compare, now, base)),
        }
        if spec.compare.command_key is not None:  # what two boots or machines share
            compared[spec.name]["rows_by_command"] = _json_rows(
                compare_rows(spec.compare, now, base, by_command=True))
    data["compare"] = compared
    return data


def diff_folded(now: Snapshot, base: Snapshot, of: str = "cpu", include_idle: bool = False) -> str:
    """Folded stacks with two counts, `stack count_baseline count_now`, as difffolded.pl
    writes them for flamegraph.pl (and speedscope reads). The baseline's counts are scaled to
    the current window's seconds, so windows of different lengths compare; a stack in one
    window alone has 0 in the other. Most changed first."""
    from ktop.exports.folded import folded_stacks  # noqa: PLC0415

    current = folded_stacks(now, of, include_idle)
    before = folded_stacks(base, of, include_idle)
    ratio = _seconds_of(now, of) / _seconds_of(base, of) if _seconds_of(base, of) else 1.0
    lines = []
    for stack in set(current) | set(before):
        was, is_ = round(before.get(stack, 0) * ratio), current.get(stack, 0)
        if was or is_:
            lines.append((stack, was, is_))
    lines.sort(key=lambda line: (-abs(line[2] - line[1]), line[0]))
    return "".join(f"{stack} {was} {is_}\n" for stack, was, is_ in lines)


def _seconds_of(snapshot: Snapshot, of: str) -> float:
    """The seconds a folded export's weights were counted over: its pane's window."""
    exports = folded_exports()
    return (exports[of][0].window_s(snapshot) if of in exports else 0.0) or snapshot.duration_s


# ---- --baseline TIME|FILE ---------------------------------------------------------------------


class BaselineError(Exception):
    """A --baseline that cannot be compared with; str() is one line naming the fix."""


def is_clock(text: str) -> bool:
    """Whether --baseline names a time (HH:MM[:SS], with a date or not) rather than a file."""
    from ktop.record.replay import parse_clock  # noqa: PLC0415

    try:
        parse_clock(text)
    except ValueError:
        return False
    return True


def _rows_checker(name: str) -> Callable[[Snapshot], None]:
    """A whole recording merged holds every row any record held: no table of it may pass
    what one record may hold (MAX_ROWS), or the merge would grow with the file."""
    from ktop.codec import MAX_ROWS  # noqa: PLC0415

    def check(merged: Snapshot) -> None:
        tables = [(f"{spec.name} {table}", rows)
                  for spec in PANES if (profile := getattr(merged, spec.field)) is not None
                  for table, rows in _tables(profile)]
        for table, rows in tables:
            if rows > MAX_ROWS:
                raise BaselineError(
                    f"--baseline {printable(name)}: its records together hold more than "
                    f"{MAX_ROWS} rows of {table}, the most ktop compares: record a shorter "
                    "baseline (--duration), or replay it and compare with a time in it "
                    "(--baseline HH:MM:SS)")

    return check


def _tables(profile: Any) -> Iterable[tuple[str, int]]:
    """(field, rows) of each table a pane's profile holds (the processes pane is one)."""
    if isinstance(profile, tuple):
        yield "rows", len(profile)
        return
    for item in dataclasses.fields(profile):
        value = getattr(profile, item.name)
        if isinstance(value, (tuple, BuiltOnRead)):
            yield item.name, len(value)


def _merged_baseline(recording: Any, name: str, say: Callable[[str], None],
                     progress: Callable[[int, int], None]) -> Baseline:
    """A recording's records as one window: all of them, or a long one's sample (each record
    decodes at ~4 MB/s: 3,000 of a busy server took 5 min), said in one line."""
    from ktop.record import replay  # noqa: PLC0415

    sample = replay.baseline_sample(recording)
    total = len(recording)
    if not sample.whole:
        say(f"--baseline {printable(name)}: {count_of(total, 'record')}, too many to merge "
            f"at once: comparing with one in {sample.stride} ({len(sample.indices)}), "
            "spread over the whole (or name a time in it with --replay FILE --baseline "
            "HH:MM:SS)")
    merged_count = 0

    def counted(done: int, of: int) -> None:
        nonlocal merged_count
        merged_count = done
        progress(done, of)

    merged = replay.merge_recording(recording, _rows_checker(name), sample.indices, counted,
                                    max_json_bytes=2 * replay.BASELINE_JSON_BYTES)
    if sample.whole and merged_count == total:
        return baseline_of(merged, name)
    records = recording.records
    first = records[sample.indices[0]]
    last = records[sample.indices[merged_count - 1]]
    if merged_count < len(sample.indices):
        say(f"--baseline {printable(name)}: its records are bigger than their sizes said: "
            f"comparing with the first {merged_count} of the {len(sample.indices)} chosen")
    label = (f"{_clock(first.taken_at - first.duration_s)}-{_clock(last.taken_at)}, "
             f"{merged_count} of {count_of(total, 'record')} of {printable(name)}")
    return Baseline(merged, label, by_command=True)


def load_baseline(text: str, replayed: object, window_s: float,
                  say: Callable[[str], None] = lambda line: None,
                  progress: Callable[[int, int], None] = lambda done, total: None) -> Baseline:
    """--baseline TIME: the window of `window_s` ending at that time in the replayed
    recording (`replayed`, its ReplaySource); --baseline FILE: another recording (all its
    records as one window, a long one sampled: ktop.record.replay.baseline_sample) or a JSON
    snapshot (--snapshot FILE.json). Raises BaselineError; `say` tells what is read but not
    all there (a recording cut off, sampled), `progress(records merged, of)` how far it is."""
    from ktop.codec import RecordingError  # noqa: PLC0415
    from ktop.record.fileformat import Recording, is_recording  # noqa: PLC0415
    from ktop.record.replay import ReplaySource, find_time  # noqa: PLC0415

    said = f"--baseline {printable(text)}"
    if not os.path.lexists(text) and is_clock(text):
        if not isinstance(replayed, ReplaySource):
            raise BaselineError(f"{said}: a time needs --replay of a recording (--record "
                                "FILE) to find it in; or name a file to compare with")
        try:
            position = find_time(replayed.records, text)
        except ValueError as e:
            raise BaselineError(f"{said}: {e}") from None
        window = ReplaySource(replayed.recording, window_s=window_s, position=position)
        return baseline_of(window.collect())
    try:
        if not stat.S_ISREG(os.stat(text).st_mode):  # a FIFO would block the first read
            raise BaselineError(f"{said}: not a regular file; name a recording (--record "
                                "FILE), a snapshot (--snapshot FILE.json) or a time HH:MM:SS")
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise BaselineError(f"{said}: no such file, nor a time HH:MM:SS; name a recording, "
                                "a snapshot FILE.json or a time in the replay") from None
        raise BaselineError(f"{said}: cannot read it: {e.strerror or e}") from None
    name = os.path.basename(text)
    try:
        if is_recording(text):
            recording = Recording(text)
            if recording.dropped:  # cut off by kill -9 or a full disk: compare with the rest
                say(f"--baseline {printable(name)}: {recording.dropped}; comparing with the "
                    f"{count_of(len(recording), 'whole record')} before it")
            return _merged_baseline(recording, name, say, progress)
        from ktop.exports.jsonfile import read_snapshot_file  # noqa: PLC0415

        return baseline_of(read_snapshot_file(text), name)
    except RecordingError as e:
        raise BaselineError(f"--baseline: {e}") from None
