"""The waits pane under churn (bench/churn.py): its collector alone, drained every second
for --seconds (90 by default), then what it counted and what it lost: waits, stacks that
could not be read (stack_missing), and every other loss. Run as root."""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from churn import churning  # noqa: E402

from ktop.collectors.waits import WaitCollector  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("waits_churn: run as root (it loads BPF programs)")
    collector = WaitCollector()
    collector.start()
    waits = walked = 0
    try:
        with churning():
            collector.drain()
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                time.sleep(1.0)
                drain = collector.drain()
                waits += sum(s.count for s in drain.stacks)
                walked += sum(s.count for s in drain.stacks if s.kernel_error == 0)
        lost, notes = drain.lost, drain.notes
    finally:
        collector.close()
    print(f"{args.seconds:g} s under churn, load average {os.getloadavg()[0]:.1f}: "
          f"{waits} blocked waits counted, {walked} with a kernel stack walked")
    for name, count in {**lost, **notes}.items():
        share = f" ({100 * count / waits:.2f}%)" if waits else ""
        print(f"  {name:20} {count:8d}{share}")


if __name__ == "__main__":
    main()
