"""`ktop --replay FILE --dump jsonl|csv`: every record to stdout, one line per interval, for
scripts (as `atop -P` and `below dump` do).

jsonl: each line is the interval's snapshot in the JSON format `--snapshot FILE.json` writes
(ktop.exports.jsonfile, with its "format" field). csv: a header line, then one row of figures per
interval, with the top function, lock caller and I/O process named. Strings from the
recording are escaped (ktop.text.csv_cell): a hostile process name reaches no terminal, and
one that starts as a formula (=HYPERLINK(...)) reaches a spreadsheet as text.
"""

from __future__ import annotations

import csv
import json
import time
from typing import TextIO

from ktop.exports.jsonfile import to_json
from ktop.model import EXITED_PID, Snapshot
from ktop.record.fileformat import Recording
from ktop.text import csv_cell

CSV_COLUMNS = (
    "time", "unix_time", "duration_s",
    "cpu_kernel_pct", "cpu_user_pct", "cpu_idle_pct", "cpu_iowait_pct", "cpu_steal_pct",
    "samples", "top_function", "top_function_pct",
    "lock_contended", "lock_wait_ms", "top_lock_caller", "top_lock_wait_ms",
    "io_requests", "io_bytes", "io_avg_latency_ms", "top_io_pid", "top_io_comm", "top_io_bytes",
    "processes", "lost_in_interval",
)


def csv_row(snapshot: Snapshot, show_idle: bool = False) -> list[object]:
    cpu, locks, io = snapshot.cpu, snapshot.locks, snapshot.blockio
    row: list[object] = [
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(snapshot.taken_at)),
        f"{snapshot.taken_at:.3f}", f"{snapshot.duration_s:.3f}",
    ]
    if cpu:
        functions = [f for f in cpu.functions if show_idle or not f.idle]
        top = functions[0] if functions else None
        row += [f"{cpu.times.kernel:.2f}", f"{cpu.times.user:.2f}", f"{cpu.times.idle:.2f}",
                f"{cpu.times.iowait:.2f}", f"{cpu.times.steal:.2f}", cpu.total_samples, csv_cell(top.symbol) if top else "",
                f"{top.percent:.3f}" if top else ""]
    elif snapshot.cpu_times is not None:  # no sampler (not root): /proc/stat's split
        times = snapshot.cpu_times
        row += [f"{times.kernel:.2f}", f"{times.user:.2f}", f"{times.idle:.2f}",
                f"{times.iowait:.2f}", f"{times.steal:.2f}", "", "", ""]
    else:
        row += [""] * 8
    if locks:
        top_lock = locks.callers[0] if locks.callers else None
        row += [locks.events, f"{sum(c.total_wait_ns for c in locks.callers) / 1e6:.3f}",
                csv_cell(top_lock.caller) if top_lock else "",
                f"{top_lock.total_wait_ns / 1e6:.3f}" if top_lock else ""]
    else:
        row += [""] * 4
    if io:
        requests = sum(d.reads + d.writes for d in io.disks)
        latency = sum(d.avg_lat_ms * (d.reads + d.writes) for d in io.disks)
        top_io = io.processes[0] if io.processes else None
        row += [requests, sum(d.read_bytes + d.write_bytes for d in io.disks),
                f"{latency / requests:.4f}" if requests else "",
                top_io.pid if top_io else "", csv_cell(top_io.comm) if top_io else "",
                top_io.bytes if top_io else ""]
    else:
        row += [""] * 6
    # Each record's losses are its interval's own (not since start): the column says so.
    lost = sum(n for profile in (cpu, locks, io, snapshot.waits) if profile
               for n in profile.lost.values())
    row += [sum(1 for p in snapshot.processes if p.pid != EXITED_PID), lost]
    return row


def dump(recording: Recording, fmt: str, out: TextIO, show_idle: bool = False) -> int:
    """Write every record of the recording to `out`; returns the exit code (0)."""
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for snapshot in recording.snapshots():
            writer.writerow(csv_row(snapshot, show_idle))
    else:
        for snapshot in recording.snapshots():
            # ensure_ascii: control characters in names travel as \\u escapes, inert.
            out.write(json.dumps(to_json(snapshot, include_idle=show_idle),
                                 separators=(",", ":")) + "\n")
    out.flush()
    return 0
