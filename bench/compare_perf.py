#!/usr/bin/env python3
"""ktop's hot functions beside perf's, sampled at the same time on the same workload.

Runs `dd if=/dev/urandom of=/dev/null` on one CPU, then ktop's sampler and
`perf record -F HZ -a` together for the same seconds, and prints both top lists: ktop's share
of machine CPU time, perf's share of its samples (equal when samples arrive as expected).

--workload pingpong runs a pipe ping-pong between two processes pinned to CPUs 0 and 1
instead (a context switch at every message, the CPUs idle between them), and
--one-after-the-other runs ktop, then perf. There ktop's share of its samples matches perf's;
its Overhead (share of CPU time) is lower by the samples idle CPUs never took.

Usage (root): python bench/compare_perf.py [--hz 99] [--seconds 5] [--workload pingpong]
                                           [--one-after-the-other]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from ktop.engine import LiveSource, Options
from ktop.model import PANE_FUNCTIONS


def perf_top_symbols(data: str, count: int) -> list[str]:
    report = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "--sort", "sym"],
        capture_output=True, text=True, check=True,
    ).stdout
    rows = [line.split() for line in report.splitlines() if line.strip()[:1].isdigit()]
    return [f"{r[0]:>8}  {r[-1]}" for r in rows[:count]]


# Two processes bounce one byte over two pipes, each pinned to its own CPU.
PINGPONG = """
import os
a, b = os.pipe(), os.pipe()
if os.fork() == 0:
    os.sched_setaffinity(0, {1})
    os.close(a[1]); os.close(b[0])
    while os.read(a[0], 1):
        os.write(b[1], b"x")
    os._exit(0)
os.sched_setaffinity(0, {0})
os.close(a[0]); os.close(b[1])
while True:
    os.write(a[1], b"x")
    os.read(b[0], 1)
"""


def start_workload(name: str) -> subprocess.Popen:
    if name == "pingpong":
        return subprocess.Popen([sys.executable, "-c", PINGPONG], start_new_session=True)
    return subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M"],
                            stderr=subprocess.DEVNULL, start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=int, default=99)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workload", choices=("urandom", "pingpong"), default="urandom")
    parser.add_argument("--one-after-the-other", action="store_true",
                        help="ktop first, then perf record, on the same steady workload")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("compare_perf: run as root", file=sys.stderr)
        return 2
    workload = start_workload(args.workload)
    time.sleep(1.0)  # steady before either tool looks
    source = LiveSource(Options(hz=args.hz, panes=frozenset({PANE_FUNCTIONS})))
    source.cumulative = True
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        try:
            source.start()
            if args.one_after_the_other:
                time.sleep(args.seconds + 0.2)
                snapshot = source.collect()
                source.close()
            perf = subprocess.Popen(
                ["perf", "record", "-F", str(args.hz), "-a", "-o", data, "--", "sleep",
                 str(args.seconds)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if not args.one_after_the_other:
                time.sleep(args.seconds + 0.2)
                snapshot = source.collect()
            perf.wait()
        finally:
            source.close()
            os.killpg(workload.pid, 9)
            workload.wait()
        cpu = snapshot.cpu
        print(f"ktop: {cpu.total_samples} samples of {cpu.expected_samples} expected "
              f"in {cpu.window_s:.1f}s (idle included below, as perf shows it)")
        taken = cpu.total_samples or 1
        # Both of ktop's figures: share of machine CPU time (what the pane shows), and share
        # of the samples taken (perf's measure; larger when idle CPUs go under-sampled).
        ktop_rows = [
            f"{f.percent:7.2f}% {100 * f.samples / taken:7.2f}%  {f.symbol}"
            for f in cpu.functions[:8]
        ]
        perf_rows = perf_top_symbols(data, 8)
    print(f"\n{'ktop: CPU time, samples':48}perf record: samples")
    for left, right in zip(ktop_rows, perf_rows, strict=False):
        print(f"{left:48}{right}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
