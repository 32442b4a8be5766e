#!/usr/bin/env python3
"""What being sampled costs a bystander: the part of a tool's CPU% that grows with the
sampling rate whatever the tool does.

Each sample interrupts the task running on that CPU; the perf interrupt and the BPF program
(a kernel stack walk costs 18-28 us a sample on this VM) are charged to that task. So any
process's CPU time grows with the rate ktop samples at, ktop's own included. This runs a
bystander that does a fixed amount of work a second (bench/textual_floor.py: a bare Textual
app redrawing 5 lines per pane a second) in a real terminal, both CPUs busy, first alone,
then beside ktop at each rate in turn, and prints the bystander's CPU%:

    python bench/sampled_floor.py [--rates 99 4000] [--rounds 2] [--seconds 30]

The growth from 99 to 4000 Hz, as a share of the bystander's CPU%, is what ktop's own
figure at 4000 Hz carries for being sampled, before any work of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import overhead
import psutil


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[99, 4000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("sampled_floor: run as root (ktop loads BPF programs)", file=sys.stderr)
        return 1
    floor_app = [sys.executable, os.path.join(os.path.dirname(__file__), "textual_floor.py"),
                 "--lines", "5"]
    tmux = overhead.Tmux()
    readings: dict[int, list[float]] = {0: [], **{hz: [] for hz in args.rates}}
    try:
        session = tmux.start(floor_app)
        time.sleep(3)
        bystander = psutil.Process(int(tmux.run("display-message", "-p", "-t", session,
                                                "#{pane_pid}")))
        with overhead.busy_cpus(overhead.CPUS):
            for _ in range(args.rounds):
                for hz in readings:
                    if hz == 0:
                        time.sleep(overhead.SETTLE)
                        readings[0].append(overhead.measure_cpu(bystander.pid, args.seconds)[0])
                        continue
                    with overhead.launched(tmux, overhead.KTOP, hz):
                        time.sleep(overhead.SETTLE + 5)  # past ktop's compiles
                        readings[hz].append(
                            overhead.measure_cpu(bystander.pid, args.seconds)[0])
    finally:
        tmux.close()
    print(f"bystander CPU% (Textual app, 5 lines per pane a second; both CPUs busy), "
          f"median of {args.rounds}:")
    for hz, values in readings.items():
        label = "alone" if hz == 0 else f"beside ktop -F {hz}"
        print(f"  {label:22} {statistics.median(values):.2f}  "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
