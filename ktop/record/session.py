"""Recording live data: `ktop --record FILE` headless, and the `R` key of the live screen.

Both append the newest interval alone (LiveSource.collect(latest=True), or
interval_snapshot() beside the window the screen shows) through ktop.record.fileformat's writer.
Nothing here imports Textual.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
from collections.abc import Callable

from ktop.engine import LiveSource, Options
from ktop.model import Snapshot
from ktop.record.fileformat import HEADER_SIZE, RecordingError, RecordWriter
from ktop.text import human_bytes, printable
from ktop.units import count_of


class SessionRecorder:
    """A recording that the collecting thread appends to and the UI thread starts, stops
    and describes. After a write error it is stopped, and `error` says why in one line."""

    def __init__(self, path: str, max_bytes: int | None = None, exclusive: bool = False) -> None:
        # raises RecordingError (FileExistsError if exclusive): nothing started
        self.writer = RecordWriter(path, max_bytes, exclusive=exclusive)
        self.path = path
        self.error = ""
        self.trimmed = 0
        self._lock = threading.Lock()

    def append(self, snapshot: Snapshot) -> bool:
        """False once stopped (by stop() or by a write error, then in `error`)."""
        with self._lock:
            if self.writer is None or self.error:
                return False
            try:
                self.writer.append(snapshot)
            except RecordingError as e:
                self.error = str(e)
                self._close()
                return False
            return True

    def stop(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self.writer is not None:
            self.records, self.size = self.writer.continued + self.writer.records, self.writer.size
            self.trimmed = self.writer.trimmed_records
            self.writer.close()
            self.writer = None

    def describe(self) -> str:
        """For the header: how much is recorded so far."""
        with self._lock:
            writer = self.writer
            if writer is None:
                return f"{self.records} records, {human_bytes(self.size)}{_trimmed_note(self.trimmed)}"
            return (f"{writer.continued + writer.records} records, {human_bytes(writer.size)}"
                    f"{_trimmed_note(writer.trimmed_records)}")


def _trimmed_note(records: int) -> str:
    return f", {records} trimmed" if records else ""


def new_session_recorder(directory: str) -> SessionRecorder:
    """`R`: a new recording in `directory`, named for the time (ktop-YYYYmmdd-HHMMSS.krec).
    The name is predictable, so the file is created with O_EXCL and never continued: one
    already there (another user may have planted it in a directory they can write) is left
    alone, and the name takes a random suffix instead. Raises RecordingError."""
    stamp = time.strftime("ktop-%Y%m%d-%H%M%S")
    names = [f"{stamp}.krec", *(f"{stamp}-{secrets.token_hex(4)}.krec" for _ in range(20))]
    for name in names:
        try:
            return SessionRecorder(os.path.join(directory, name), exclusive=True)
        except FileExistsError:
            continue
    raise RecordingError(f"cannot record in {printable(directory)}: every name tried was "
                         "taken; name a file with `ktop --record FILE`")


def record(
    path: str,
    options: Options,
    duration_s: float | None = None,
    max_bytes: int | None = None,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
    source: LiveSource | None = None,
) -> int:
    """`ktop --record FILE`: collect headless and append one record per interval until the
    duration (wall time) is over or `stop` is set (SIGINT/SIGTERM), then the interval in
    progress. Returns the exit code: 0, or 1 once
    the file cannot be written (a full disk): the one line says so. (`source`: tests hand
    one with fake collectors.)"""
    stop = stop or threading.Event()
    try:
        writer = RecordWriter(path, max_bytes)  # before loading anything: fail at once
    except RecordingError as e:
        say(str(e))
        return 1
    if writer.continued:
        note = f" (its torn end dropped: {writer.dropped})" if writer.dropped else ""
        say(f"continuing {writer.name} after its {writer.continued} records{note}")
    source = source or LiveSource(options)
    appended = 0
    try:
        source.start(wait=False)
        while not source.wait_loaded(0.1):
            if stop.is_set():
                return 0
        for pane, reason in sorted(source.unavailable.items()):
            say(f"{pane}: {reason} (recorded without it)")
        source.collect()  # every pane's first interval starts here, together
        started = time.monotonic()
        end = started + duration_s if duration_s else math.inf
        while True:
            # The next tick on the grid counted from the start (0.2 added five times can fall
            # short of 1.0 and record a sixth interval); a collect that ran past ticks skips
            # them: --duration is wall time, whatever an interval costs.
            now = time.monotonic()
            ticks = math.floor((now - started) / options.interval_s + 1e-9) + 1
            next_at = min(started + ticks * options.interval_s, end)
            stopped = stop.wait(max(0.0, next_at - now))
            # Stopped (SIGINT, SIGTERM) mid-interval: the interval in progress is written
            # too, its span the seconds it really covers.
            trimmed = writer.trimmed_records
            try:
                writer.append(source.collect(latest=True))
            except RecordingError as e:
                say(str(e))
                return 1
            appended += 1
            if writer.trimmed_records > trimmed == 0:  # said once, counted in the last line
                say(f"record {appended} trimmed to fit what ktop reads back: "
                    f"{writer.trimmed_rows} rows and texts left out or cut (counted)")
            if stopped or next_at >= end:
                break
    finally:
        source.close()
        size = writer.size
        writer.close()
    say(f"recorded {appended} intervals to {writer.name} ({human_bytes(size)}B{_per_record(writer)})"
        f"{_trimmed(writer)}")
    return 0


def _trimmed(writer: RecordWriter) -> str:
    """The records trimmed to fit, as a loss said."""
    if not writer.trimmed_records:
        return ""
    return (f"; {count_of(writer.trimmed_records, 'record')} trimmed to fit, "
            f"{writer.trimmed_rows} rows and texts left out or cut")


def _per_record(writer: RecordWriter) -> str:
    """The records' average size on disk, over those the file holds (a ring dropped some)."""
    held = writer.held
    if not held:
        return ""
    kept = f"; the ring keeps the newest {held}" if writer.ring_dropped else ""
    return f", {human_bytes((writer.size - HEADER_SIZE) / held)}B per interval{kept}"
