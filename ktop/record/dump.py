"""`ktop --replay FILE --dump jsonl|csv`: every record to stdout, one line per interval, for
scripts (as `atop -P` and `below dump` do).

jsonl: each line is the interval's snapshot in the JSON format `--snapshot FILE.json` writes
(ktop.exports.jsonfile, with its "format" field). csv: a header line, then one row of figures per
interval, each pane's columns as ktop.registry declares them (the top function, lock caller,
I/O process and waiting process named). Strings from the
recording are escaped (ktop.text.csv_cell): a hostile process name reaches no terminal, and
one that starts as a formula (=HYPERLINK(...)) reaches a spreadsheet as text.
"""

from __future__ import annotations

import csv
import json
import time
from typing import TextIO

from ktop.exports.filtered import filtered_snapshot
from ktop.exports.jsonfile import to_json
from ktop.model import Snapshot, WaitProcess
from ktop.record.fileformat import Recording
from ktop.registry import PANES
from ktop.text import csv_cell

# A column of each interval's own, then each pane's (ktop.registry: PaneDef.csv), then its losses.
_TIME_COLUMNS = ("time", "unix_time", "duration_s")


def csv_columns() -> tuple[str, ...]:
    return (*_TIME_COLUMNS, *(name for spec in PANES if spec.csv for name in spec.csv.names),
            "lost_in_interval")


CSV_COLUMNS = csv_columns()


def csv_row(snapshot: Snapshot, show_idle: bool = False) -> list[object]:
    row: list[object] = [
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(snapshot.taken_at)),
        f"{snapshot.taken_at:.3f}", f"{snapshot.duration_s:.3f}",
    ]
    for spec in PANES:
        if spec.csv is not None:
            cells = spec.csv.cells(snapshot, show_idle)
            assert len(cells) == len(spec.csv.names), spec.name
            row += cells
    # Each record's losses are its interval's own (not since start): the column says so.
    profiles = (getattr(snapshot, spec.field, None) for spec in PANES)
    row.append(sum(n for profile in profiles if profile is not None
                   for n in getattr(profile, "lost", {}).values()))
    return row


def functions_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    cpu = snapshot.cpu
    if cpu:
        functions = [f for f in cpu.functions if show_idle or not f.idle]
        top = functions[0] if functions else None
        return [f"{cpu.times.kernel:.2f}", f"{cpu.times.user:.2f}", f"{cpu.times.idle:.2f}",
                f"{cpu.times.iowait:.2f}", f"{cpu.times.steal:.2f}", cpu.total_samples,
                csv_cell(top.symbol) if top else "", f"{top.percent:.3f}" if top else ""]
    if snapshot.cpu_times is not None:  # no sampler (not root): /proc/stat's split
        times = snapshot.cpu_times
        return [f"{times.kernel:.2f}", f"{times.user:.2f}", f"{times.idle:.2f}",
                f"{times.iowait:.2f}", f"{times.steal:.2f}", "", "", ""]
    return [""] * 8


def locks_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    locks = snapshot.locks
    if not locks:
        return [""] * 4
    top_lock = locks.callers[0] if locks.callers else None
    return [locks.events, f"{sum(c.total_wait_ns for c in locks.callers) / 1e6:.3f}",
            csv_cell(top_lock.caller) if top_lock else "",
            f"{top_lock.total_wait_ns / 1e6:.3f}" if top_lock else ""]


def waits_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    """Every thread's time waiting in the interval (ms), and the process that waited most."""
    waits = snapshot.waits
    if not waits:
        return [""] * 8
    processes = waits.processes
    top = processes[0] if processes else None
    return [f"{sum(p.runq_ns for p in processes) / 1e6:.3f}",
            f"{sum(p.blocked_s_ns for p in processes) / 1e6:.3f}",
            f"{sum(p.blocked_d_ns for p in processes) / 1e6:.3f}",
            f"{sum(p.blocked_other_ns for p in processes) / 1e6:.3f}",
            top.pid if top else "", csv_cell(top.comm) if top else "",
            f"{_waiting_ns(top) / 1e6:.3f}" if top else "",
            csv_cell(top.reason) if top else ""]


def _waiting_ns(process: WaitProcess) -> int:
    return (process.runq_ns + process.blocked_s_ns + process.blocked_d_ns
            + process.blocked_other_ns)


def dump(recording: Recording, fmt: str, out: TextIO, show_idle: bool = False,
         pid: int | None = None, cgroup: str | None = None) -> int:
    """Write every record of the recording to `out`, cut to --pid/--cgroup's processes;
    returns the exit code (0)."""
    snapshots = (filtered_snapshot(s, pid, cgroup) for s in recording.snapshots())
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for snapshot in snapshots:
            writer.writerow(csv_row(snapshot, show_idle))
    else:
        for snapshot in snapshots:
            # ensure_ascii: control characters in names travel as \\u escapes, inert.
            out.write(json.dumps(to_json(snapshot, include_idle=show_idle),
                                 separators=(",", ":")) + "\n")
    out.flush()
    return 0
