"""`ktop --snapshot FILE`: run the collectors headless, then write the screen or its data.

The format follows the extension: .svg (Textual's screenshot), .txt (the same screen as
plain text) or .json (the data behind it). Files are written as root, so never through a
symlink planted at the target: we write a private temporary file beside it and rename it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tempfile
import time

from rich.console import Console

from ktop.engine import DataSource, LiveSource, Options, RecordedSource
from ktop.export import to_json
from ktop.model import Snapshot

FORMATS = (".svg", ".txt", ".json")


class SnapshotError(Exception):
    """One line naming the problem and the fix."""


def snapshot_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise SnapshotError(f"cannot tell the format of {path!r}: name it .svg, .txt or .json")
    return ext


def check_writable(path: str) -> None:
    """Fail before collecting for seconds, not after."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SnapshotError(f"cannot write {path}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise SnapshotError(f"cannot write {path}: it is a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SnapshotError(f"cannot write {path}: directory {directory} is not writable")


def write_atomically(path: str, content: str) -> None:
    """Write to a new private file in the same directory, then rename over the target.

    rename() replaces a symlink at `path` rather than following it, and a reader never sees a
    partial file; on any error the temporary file is removed and nothing else changed.
    """
    check_writable(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temporary = tempfile.mkstemp(prefix=".ktop-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise SnapshotError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)
        os.rename(temporary, path)
    except OSError as e:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise SnapshotError(f"cannot write {path}: {e.strerror}") from None


def collect(options: Options, duration_s: float) -> Snapshot:
    """Run the live collectors for the duration; the data covers all of it (cumulative)."""
    source = LiveSource(options)
    source.cumulative = True
    try:
        source.start()
        time.sleep(duration_s)
        return source.collect()
    finally:
        source.close()


async def render_screen(
    source: DataSource, size: tuple[int, int], fmt: str, show_idle: bool = False, **app_args
) -> str:
    """Drive the real app headless on the snapshot and export what it shows."""
    from ktop.app import build_app

    app = build_app(source, interval_s=0.05, show_idle=show_idle, **app_args)
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            await pilot.pause(0.02)
            if app.snapshot is not None:
                break
        await pilot.pause(0.05)
        drill = app_args.get("drill")
        if not await app.prepare_export(pilot):
            raise SnapshotError(
                f"--drill {drill}: no such row in the data collected; "
                "run without --drill to see what there is"
            )
        if fmt == ".svg":
            return app.export_screenshot(title="ktop")
        return screen_text(app)


def screen_text(app) -> str:
    """The current screen as plain text: what a user reads, with no escape sequences."""
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), record=True, color_system=None,
        force_terminal=False, legacy_windows=False, safe_box=False,
    )
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    text = console.export_text(styles=False)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def run_snapshot(
    path: str,
    options: Options,
    duration_s: float = 3.0,
    size: tuple[int, int] = (160, 50),
    show_idle: bool = False,
    recorded: Snapshot | None = None,
    **app_args,
) -> str:
    """Collect (or take the recorded snapshot), render, write. Returns the absolute path."""
    fmt = snapshot_format(path)
    check_writable(path)
    snapshot = recorded or collect(options, duration_s)
    if fmt == ".json":
        content = json.dumps(to_json(snapshot, include_idle=show_idle), indent=1) + "\n"
    else:
        content = asyncio.run(
            render_screen(RecordedSource([snapshot]), size, fmt, show_idle=show_idle, **app_args)
        )
    write_atomically(path, content)
    return os.path.abspath(path)
