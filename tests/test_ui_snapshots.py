"""The screen pinned as SVG (pytest-textual-snapshot): recorded data, fixed clock and zone.

Regenerate after an intended change with `pytest tests/test_ui_snapshots.py --snapshot-update`
and look at the SVGs (e.g. `rsvg-convert -o /tmp/x.png FILE.svg`) before committing them.
"""

from __future__ import annotations

from dataclasses import replace

from conftest import SCREEN_SIZE, wait_for_data

from ktop.engine import RecordedSource
from ktop.ui.app import build_app

INTERVAL = 0.2


def app_for(snapshot, **kwargs):
    return build_app(RecordedSource([snapshot]), interval_s=INTERVAL, **kwargs)


def test_main_screen(snap_compare, recorded_snapshot):
    """Header with the sample accounting, the four panes, the footer of keys."""
    assert snap_compare(app_for(recorded_snapshot), terminal_size=SCREEN_SIZE, run_before=wait_for_data)


def test_idle_rows_shown_and_functions_zoomed(snap_compare, recorded_snapshot):
    """`i` then `z`: pv_native_safe_halt and poll_idle appear (dimmed) among the functions."""
    assert snap_compare(
        app_for(recorded_snapshot), press=["i", "z"], terminal_size=SCREEN_SIZE,
        run_before=wait_for_data,
    )


def test_help_screen(snap_compare, recorded_snapshot):
    assert snap_compare(
        app_for(recorded_snapshot), press=["question_mark"], terminal_size=SCREEN_SIZE,
        run_before=wait_for_data,
    )


def test_lock_addresses_view_zoomed(snap_compare, recorded_snapshot):
    assert snap_compare(
        app_for(recorded_snapshot), press=["2", "v", "z"], terminal_size=SCREEN_SIZE,
        run_before=wait_for_data,
    )


def test_block_io_requests_with_hostile_names(snap_compare, recorded_snapshot):
    """Names holding ESC [2J and Rich markup shown as text, in the biosnoop-like view."""
    assert snap_compare(
        app_for(recorded_snapshot), press=["3", "v", "z"], terminal_size=SCREEN_SIZE,
        run_before=wait_for_data,
    )


def test_processes_zoomed_show_whole_hostile_command_lines(snap_compare, recorded_snapshot):
    assert snap_compare(
        app_for(recorded_snapshot), press=["4", "z"], terminal_size=SCREEN_SIZE,
        run_before=wait_for_data,
    )


def test_unavailable_panes(snap_compare, recorded_snapshot):
    """What a kernel without lock tracepoints and an unprivileged block collector look like."""
    snapshot = replace(
        recorded_snapshot,
        locks=None,
        blockio=None,
        unavailable={
            "locks": "kernel lacks tracepoint lock:contention_begin (Linux >= 5.19)",
            "blockio": "needs root (or CAP_BPF and CAP_PERFMON): run `sudo ktop`",
        },
    )
    assert snap_compare(app_for(snapshot), terminal_size=SCREEN_SIZE, run_before=wait_for_data)


def test_lock_drill_down_at_80x24(snap_compare, recorded_snapshot):
    """Enter on the top lock caller: its stack one frame a line, at the default terminal size."""
    assert snap_compare(
        app_for(recorded_snapshot), press=["2", "enter"], terminal_size=(80, 24),
        run_before=wait_for_data,
    )
