"""Live: every export written from a `--snapshot FILE.json` is the export of the live run of
the same seconds (root, real BPF)."""

from __future__ import annotations

import gzip
import json
import sys
import time

import pytest
from conftest import live_source, root_only, running

from ktop.exports import ExportOptions, export
from ktop.exports.jsonfile import from_json

pytestmark = [pytest.mark.live, root_only]


def exports_of(snapshot) -> dict:
    formats = {f"folded {of}": export("folded", snapshot, ExportOptions(folded_of=of))
               for of in ("cpu", "locks", "io", "io-latency")}
    formats["pprof"] = gzip.decompress(export("pprof", snapshot))
    formats["prom"] = export("prom", snapshot)
    return formats


def test_exports_from_the_json_of_a_live_run_are_the_live_ones(tmp_path):
    # A spinner in user space only (no kernel frame under most of its samples), beside
    # kernel work and disk writes.
    with running([sys.executable, "-c", "while True: pass"]) as spinner, \
            running(["dd", "if=/dev/zero", f"of={tmp_path}/out", "bs=64k", "count=400",
                     "oflag=direct"]), live_source(interval_s=0.5, cumulative=True) as source:
        time.sleep(2.5)
        live = source.collect()
    user_only = sum(s.samples for s in live.cpu.stacks if s.pid == spinner.pid and not s.frames)
    assert user_only > 10
    replayed = from_json(json.loads(export("json", live)))
    assert sum(s.samples for s in replayed.cpu.stacks if s.pid == spinner.pid and not s.frames) \
        == user_only
    live_exports, replayed_exports = exports_of(live), exports_of(replayed)
    for name, content in live_exports.items():
        assert replayed_exports[name] == content, name


# A process with a second thread that burns CPU in the kernel (reads of /dev/zero).
THREADED_READER = """
import os, sys, threading
def read():
    with open("/dev/zero", "rb", buffering=0) as f:
        while True:
            f.read(1 << 16)
thread = threading.Thread(target=read, daemon=True)
thread.start()
print(threading.get_native_id(), thread.native_id, flush=True)
thread.join()
"""


def test_pid_of_a_thread_cuts_a_live_json_to_its_process_and_says_so(tmp_path):
    """Issue 44: --pid with .json (.folded, .pb.gz, .prom) wrote every process's rows; a
    thread's id was taken silently. Live: the thread's process alone, said in one line."""
    import subprocess  # noqa: PLC0415

    with running([sys.executable, "-c", THREADED_READER], stdout=subprocess.PIPE,
                 text=True) as reader:
        main_tid, reading_tid = map(int, reader.stdout.readline().split())
        assert main_tid == reader.pid and reading_tid != reader.pid
        with open(f"/proc/{reader.pid}/comm") as f:
            comm = f.read().strip()
        out = tmp_path / "one.json"
        result = subprocess.run([sys.executable, "-m", "ktop", "--pid", str(reading_tid),
                                 "--snapshot", str(out), "--duration", "2"],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"ktop: --pid {reading_tid} is a thread of process {reader.pid} ({comm}): showing the "
        "process")
    data = json.loads(out.read_text())
    assert [p["pid"] for p in data["processes"]] == [reader.pid]
    stacks = data["cpu"]["stacks"]
    assert stacks and {s["pid"] for s in stacks} == {reader.pid}, stacks[:3]
    assert any("read" in frame for s in stacks for frame in s["frames"])
    for rows in (data["waits"]["stacks"], data["waits"]["processes"],
                 data["blockio"]["processes"], data["locks"]["tasks"]):
        assert {row["pid"] for row in rows} <= {reader.pid}
