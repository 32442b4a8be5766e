#!/usr/bin/env python3
"""ktop's hot functions beside perf's, sampled at the same time on the same workload.

Runs `dd if=/dev/urandom of=/dev/null` on one CPU, then ktop's sampler and
`perf record -F HZ -a` together for the same seconds, and prints both top lists: ktop's share
of machine CPU time, perf's share of its samples (equal when samples arrive as expected).

Usage (root): python bench/compare_perf.py [--hz 99] [--seconds 5]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=int, default=99)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("compare_perf: run as root", file=sys.stderr)
        return 2
    workload = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M"],
                                stderr=subprocess.DEVNULL)
    source = LiveSource(Options(hz=args.hz, panes=frozenset({PANE_FUNCTIONS})))
    source.cumulative = True
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        try:
            source.start()
            perf = subprocess.Popen(
                ["perf", "record", "-F", str(args.hz), "-a", "-o", data, "--", "sleep",
                 str(args.seconds)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            time.sleep(args.seconds + 0.2)
            snapshot = source.collect()
            perf.wait()
        finally:
            source.close()
            workload.kill()
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
