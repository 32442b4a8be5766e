"""The processes pane's exports: its --dump csv cells."""

from __future__ import annotations

from ktop.model import EXITED_PID, Snapshot


def csv_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    return [sum(1 for p in snapshot.processes if p.pid != EXITED_PID)]
