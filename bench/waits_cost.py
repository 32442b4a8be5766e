"""What the waits pane costs where it costs most: a pipe ping-pong between two processes on
two CPUs switches ~10^5 times a second, every switch and wake-up running the waits program.

Prints the round trips a second without any tracer, with the waits collector at several
stack-walk minimums (--offcpu-min), and beside `perf top` for comparison; and the BPF run
time per event. Run as root: `python bench/waits_cost.py` (--seconds, --runs)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ktop.collectors.bpfsys import enable_stats, program_info  # noqa: E402
from ktop.collectors.waits import WaitCollector  # noqa: E402

PING_PONG = r"""
import os, sys, time
seconds = float(sys.argv[1])
parent_cpu, child_cpu = int(sys.argv[2]), int(sys.argv[3])
a_r, a_w = os.pipe(); b_r, b_w = os.pipe()
child = os.fork()
if child == 0:
    os.close(a_w); os.close(b_r)
    os.sched_setaffinity(0, {child_cpu})
    while os.read(a_r, 1):
        os.write(b_w, b"x")
    os._exit(0)
os.close(a_r); os.close(b_w)
os.sched_setaffinity(0, {parent_cpu})
n = 0
cpu = time.process_time()
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(200):
        os.write(a_w, b"x"); os.read(b_r, 1)
    n += 200
cpu = time.process_time() - cpu
os.close(a_w); os.waitpid(child, 0)
times = os.times()
print(n / seconds, 1e9 * (cpu + times.children_user + times.children_system) / n)
"""


def ping_pong(seconds: float) -> float:
    """Round trips a second (each is two wake-ups and four context switches)."""
    out = subprocess.run([sys.executable, "-c", PING_PONG, str(seconds), "0", "1"],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def ping_pong_cpu_ns(seconds: float) -> float:
    """CPU time a round trip costs with both processes on CPU 0, in ns: every switch and
    wake-up then runs in one of the two, so the tracer's cost is charged to them, whatever
    else the machine runs (round trips a second on a shared machine vary by 2x)."""
    out = subprocess.run([sys.executable, "-c", PING_PONG, str(seconds), "0", "0"],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[1])


@contextlib.contextmanager
def waits_collector(min_walk_us: int) -> Iterator[WaitCollector]:
    collector = WaitCollector(min_walk_us=min_walk_us)
    collector.start()
    try:
        yield collector
    finally:
        collector.close()


@contextlib.contextmanager
def perf_top() -> Iterator[None]:
    process = subprocess.Popen(["perf", "top", "--stdio", "-d", "2"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    time.sleep(2.0)
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_time(programs: dict[str, int]) -> tuple[int, int]:
    total = count = 0
    for fd in programs.values():
        info = program_info(fd)
        if info is not None:
            total += info.run_time_ns
            count += info.run_cnt
    return total, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--minimums", default="0,100,1000",
                        help="stack-walk minimums to measure, in µs")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("waits_cost: run as root (it loads BPF programs)")
    minimums = [int(m) for m in args.minimums.split(",")]
    stats = enable_stats()
    rows: dict[str, list[float]] = {"none": []}
    per_event: dict[str, list[float]] = {}
    for _ in range(args.runs):  # interleaved, so drift hits every figure alike
        rows["none"].append(ping_pong(args.seconds))
        for minimum in minimums:
            name = f"waits, stacks past {minimum} µs"
            with waits_collector(minimum) as collector:
                collector.drain()
                before = run_time(collector.programs)
                rows.setdefault(name, []).append(ping_pong(args.seconds))
                after = run_time(collector.programs)
                collector.drain()
            if stats is not None and after[1] > before[1]:
                per_event.setdefault(name, []).append(
                    (after[0] - before[0]) / (after[1] - before[1]))
        with perf_top():
            rows.setdefault("perf top -d 2", []).append(ping_pong(args.seconds))
    base = statistics.median(rows["none"])
    print(f"pipe ping-pong, two processes on CPUs 0 and 1, {args.seconds:g} s x {args.runs} runs "
          "(median)")
    print(f"{'tracer':32} {'round trips/s':>14} {'vs none':>8} {'BPF ns/event':>13}")
    for name, values in rows.items():
        median = statistics.median(values)
        event = per_event.get(name)
        event_text = f"{statistics.median(event):13.0f}" if event else f"{'-':>13}"
        print(f"{name:32} {median:14.0f} {100 * (median / base - 1):+7.1f}% {event_text}")
    if stats is not None:
        os.close(stats)


if __name__ == "__main__":
    main()
