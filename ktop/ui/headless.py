"""`ktop --snapshot FILE`: run the collectors headless, then write the screen or its data.

This drives the real app (`ktop.ui.app`) on the collected snapshot for a picture (svg, txt);
data formats come from `ktop.exports`. The app never imports this module. Files are written
by `ktop.writer`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import sys
import time

from rich.console import Console

from ktop.compare import Baseline
from ktop.engine import DataSource, LiveSource, Options, RecordedSource
from ktop.exports import DATA_FORMATS, ExportOptions, export
from ktop.model import Snapshot
from ktop.text import printable
from ktop.ui.app import KtopApp, build_app
from ktop.writer import (
    MODES,
    PRIVATE,
    STDOUT,
    SnapshotError,
    check_writable,
    snapshot_format,
    write_atomically,
)


def collect(options: Options, duration_s: float) -> Snapshot:
    """Run the live collectors for the duration, from the moment every pane is attached (so
    all cover the same seconds), draining them every interval as the screen does; the data
    covers all of it (cumulative)."""
    source = LiveSource(options)
    source.cumulative = True
    try:
        source.start()
        began = source.restart_span()  # the duration is counted from there: wall time
        end = began + duration_s
        following = began + options.interval_s
        while following < end:
            time.sleep(max(0.0, following - time.monotonic()))
            source.keep_up()
            # Late (a saturated machine): the next drain one interval from now, not at once
            # for each interval missed (a drain covers whatever time passed).
            following = max(following + options.interval_s,
                            time.monotonic() + options.interval_s / 2)
        time.sleep(max(0.0, end - time.monotonic()))
        return source.collect()
    finally:
        source.close()


async def render_screen(
    source: DataSource,
    size: tuple[int, int],
    fmt: str,
    show_idle: bool = False,
    drill: str | None = None,
    **app_args,
) -> str:
    """Drive the real app headless on the snapshot and export what it shows; with `drill`
    ("PANE:WHAT"), the drill-down Enter on the row WHAT names would open."""
    app = build_app(source, interval_s=0.05, show_idle=show_idle, **app_args)
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            await pilot.pause(0.02)
            if app.snapshot is not None:
                break
        await pilot.pause(0.05)
        if drill:
            if not _open_drill(app, drill):
                raise SnapshotError(
                    f"--drill {printable(drill)}: no such row in the data collected; "
                    "run without --drill to see what there is"
                )
            await pilot.pause(0.3)
        if fmt.lstrip(".") == "svg":  # ".svg" as the suffix, "svg" as the format
            return app.export_screenshot(title="ktop")
        return screen_text(app)


def _open_drill(app: KtopApp, drill: str) -> bool:
    name, _, what = drill.partition(":")
    pane = app.main_screen.pane(name)
    key = pane.row_named(what)
    return key is not None and app.main_screen.open_drill(pane, key)


def screen_text(app: KtopApp) -> str:
    """The current screen as plain text: what a user reads, with no escape sequences."""
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), record=True, color_system=None,
        force_terminal=False, legacy_windows=False, safe_box=False,
    )
    # Textual has no public text export: this renders the screen the way its own
    # App.export_screenshot does (compositor and background screens, both private), in plain
    # text instead of SVG. The one place ktop reaches into Textual's internals for it.
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    text = console.export_text(styles=False)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def compared_export(fmt: str, snapshot: Snapshot, baseline: Baseline,
                    options: ExportOptions) -> str:
    """--snapshot FILE.json or .folded with --baseline: both windows, and the change."""
    from ktop.compare import diff_folded, to_json  # noqa: PLC0415

    if fmt == "json":
        return json.dumps(to_json(snapshot, baseline, options.include_idle), indent=1) + "\n"
    if fmt == "folded":
        return diff_folded(snapshot, baseline.snapshot, options.folded_of, options.include_idle)
    raise SnapshotError(f"--baseline writes .svg, .txt, .json or .folded, not {fmt}")


def run_snapshot(
    path: str,
    options: Options,
    duration_s: float = 3.0,
    size: tuple[int, int] = (160, 50),
    show_idle: bool = False,
    recorded: Snapshot | DataSource | None = None,
    fmt: str | None = None,
    exports: ExportOptions | None = None,
    **app_args,
) -> str:
    """Collect (or take the recorded snapshot, or a replayed recording's window), render,
    write. `fmt` overrides the suffix; the path "-" is standard output. Returns the absolute
    path (or "-")."""
    fmt = snapshot_format(path, fmt)
    if path != STDOUT:
        check_writable(path)
    if recorded is None or isinstance(recorded, Snapshot):
        snapshot = recorded or collect(options, duration_s)
        source: DataSource = RecordedSource([snapshot])
    else:
        source, snapshot = recorded, recorded.collect()
    baseline = app_args.get("baseline")
    if fmt in DATA_FORMATS:  # --pid and --cgroup cut the data as they cut the screen
        from ktop.exports.filtered import filtered_snapshot  # noqa: PLC0415

        pid, cgroup = app_args.get("pid"), app_args.get("cgroup")
        snapshot = filtered_snapshot(snapshot, pid, cgroup)
        if baseline is not None:
            baseline = dataclasses.replace(
                baseline, snapshot=filtered_snapshot(baseline.snapshot, pid, cgroup))
    if fmt in DATA_FORMATS and baseline is not None:
        content = compared_export(fmt, snapshot, baseline,
                                  exports or ExportOptions(include_idle=show_idle))
    elif fmt in DATA_FORMATS:
        content = export(fmt, snapshot, exports or ExportOptions(include_idle=show_idle))
    else:
        content = asyncio.run(render_screen(source, size, fmt, show_idle=show_idle, **app_args))
    if path == STDOUT:
        if isinstance(content, bytes):
            sys.stdout.buffer.write(content)
        else:
            sys.stdout.write(content)
        sys.stdout.flush()
        return STDOUT
    write_atomically(path, content, MODES.get(fmt, PRIVATE))
    return os.path.abspath(path)
