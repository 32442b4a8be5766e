"""What the interrupts pane costs where it costs most: a loopback UDP flood (127.0.0.1 only,
bounded) raises and runs NET_RX ~10^5 times a second, each run passing the softirq_raise,
softirq_entry and softirq_exit tracepoints the pane's program counts.

Prints the flood's packets a second without the pane and with its collector attached,
interleaved (A, B, A, B...: the noise of a shared machine falls on both), medians with their
range, the slowdown, and the NET_RX runs the pane counted. Run as root, under the machine lock:
    flock /tmp/ktop-machine.lock .venv/bin/python bench/irqs_cost.py [--seconds 2] [--runs 3]"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ktop.panes.irqs.collector import IrqCollector  # noqa: E402

FLOOD = """
import socket, sys, time
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
r.setblocking(False)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
seconds = float(sys.argv[1])
addr, n, buf = r.getsockname(), 0, b"x" * 64
start = time.monotonic(); end = start + seconds
while time.monotonic() < end and n < 20_000_000:
    for _ in range(100):
        s.sendto(buf, addr)
        try:
            r.recv(2048)
        except BlockingIOError:
            pass
    n += 100
print(n / (time.monotonic() - start))
"""


def flood(seconds: float) -> float:
    done = subprocess.run([sys.executable, "-c", FLOOD, str(seconds)], capture_output=True,
                          text=True, timeout=seconds + 30, check=True)
    return float(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("irqs_cost: needs root to load BPF: run it with sudo", file=sys.stderr)
        return 2
    without: list[float] = []
    with_pane: list[float] = []
    counted = 0
    for _ in range(args.runs):
        without.append(flood(args.seconds))
        collector = IrqCollector()
        collector.start()
        try:
            collector.drain()
            with_pane.append(flood(args.seconds))
            drain = collector.drain()
            counted += sum(c.count for c in drain.counts if c.kind == "softirq" and c.number == 3)
        finally:
            collector.close()

    def show(label: str, rates: list[float]) -> float:
        median = statistics.median(rates)
        print(f"{label:<22} {median:>10,.0f} packets/s  (range {min(rates):,.0f}-{max(rates):,.0f})")
        return median

    base = show("without the pane", without)
    traced = show("with the irqs pane", with_pane)
    print(f"kept {100 * traced / base:.1f}% of the flood's throughput; "
          f"NET_RX runs counted {counted:,} ({counted / (args.runs * args.seconds):,.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
