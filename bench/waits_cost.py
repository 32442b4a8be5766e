"""What the waits pane costs where it costs most: a pipe ping-pong between two processes on
two CPUs switches ~10^5 times a second, every switch and wake-up running the waits program.

Prints the round trips a second on two CPUs (with the kernel's BPF run-time statistics off,
as ktop holds them 4 refreshes in 5), and the CPU time a round trip costs with both
processes on one CPU (statistics on, to read the programs' run time), without any tracer, under empty programs on the same raw tracepoints
(the floor), with the waits collector at several stack-walk minimums (--offcpu-min: ktop's
default, S=1000,D=10, first), and beside `perf top` for comparison; medians of interleaved
runs with their range; the BPF run time per event, and by program; and what each minimum
kept: the share of the machine's blocked time (and of its waits) in S and D whose stacks
were walked during the runs. Run as root: `python bench/waits_cost.py` (--seconds, --runs,
--minimums, --no-perf)."""

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

from ktop.collectors.bpfsys import (  # noqa: E402
    attach_raw_tracepoint,
    enable_stats,
    program_info,
)
from ktop.collectors.waits import (  # noqa: E402
    DEFAULT_MIN_WALK,
    FLIP,
    FUNCTIONS,
    NOT_WALKED,
    STATES,
    WaitCollector,
    WaitDrain,
    WalkMinimums,
    parse_min_walk,
    raw_name,
)

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


def ping_pong_cpu_ns(seconds: float) -> tuple[float, float]:
    """CPU time a round trip costs with both processes on CPU 0, in ns, and the round trips
    made: every switch and wake-up then runs in one of the two, so the tracer's cost is
    charged to them, whatever else the machine runs (round trips a second on a shared
    machine vary by 2x)."""
    out = subprocess.run([sys.executable, "-c", PING_PONG, str(seconds), "0", "0"],
                         capture_output=True, text=True, check=True)
    rate, ns = out.stdout.split()
    return float(ns), float(rate) * seconds


@contextlib.contextmanager
def waits_collector(min_walk: WalkMinimums) -> Iterator[WaitCollector]:
    collector = WaitCollector(min_walk=min_walk)
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


@contextlib.contextmanager
def empty_programs(tracepoints: tuple[str, ...]) -> Iterator[dict[str, int]]:
    """bench/floor.bpf.c's empty program on these raw tracepoints: what running any program
    there costs (the floor under the waits program's cost)."""
    from ktop.collectors.bpfload import kernel_headers  # noqa: PLC0415
    from ktop.collectors.loader import load_in_child  # noqa: PLC0415

    source = kernel_headers().source
    program = load_in_child("floor.bpf.c", os.path.dirname(os.path.abspath(__file__)), [],
                            {"empty": "RAW_TRACEPOINT"},
                            {"BCC_KERNEL_SOURCE": source} if source else {})
    try:
        for tracepoint in tracepoints:
            program.keep(attach_raw_tracepoint(program.programs["empty"], tracepoint))
        yield dict(program.programs)
    finally:
        program.close()


def run_time(programs: dict[str, int]) -> tuple[int, int]:
    total = count = 0
    for name, fd in programs.items():
        info = program_info(fd)
        if info is not None and name != FLIP:
            total += info.run_time_ns
            count += info.run_cnt
    return total, count


def by_program(programs: dict[str, int]) -> dict[str, tuple[int, int]]:
    found = {}
    for name, fd in programs.items():
        info = program_info(fd)
        if info is not None:
            found[name] = (info.run_time_ns, info.run_cnt)
    return found


def measure(args: argparse.Namespace, rows: dict[str, dict[str, list[float]]], name: str,
            programs: dict[str, int] | None = None) -> dict[str, tuple[int, int]]:
    """One run of both ping-pongs under a tracer: round trips a second on two CPUs, CPU ns
    a round trip on one, BPF ns an event, and BPF ns a round trip on one CPU (its programs'
    share of that round trip's CPU, however loaded the machine); what each program ran."""
    row = rows.setdefault(name, {"rate": [], "cpu": [], "event": [], "trip": []})
    # Round trips with the kernel's BPF statistics off, as ktop holds them 4 refreshes in 5
    # (selfcost.STATS_EVERY); the CPU a round trip costs with them on, to read the run time.
    row["rate"].append(ping_pong(args.seconds))
    stats = enable_stats()
    try:
        before = by_program(programs or {})
        cpu, trips = ping_pong_cpu_ns(args.seconds)
        after = by_program(programs or {})
    finally:
        if stats is not None:
            os.close(stats)
    row["cpu"].append(cpu)
    delta = {p: (after[p][0] - before[p][0], after[p][1] - before[p][1])
             for p in after if p in before and p != FLIP}
    ns, count = sum(d[0] for d in delta.values()), sum(d[1] for d in delta.values())
    if count:
        row["event"].append(ns / count)
        row["trip"].append(ns / trips)
    return delta


def walked(drain: WaitDrain, kept: dict[str, list[int]]) -> None:
    """Adds to kept[state] [blocked ns, of it walked, waits ended, of them walked]: the
    stacks a minimum keeps, over the whole machine (the ping-pong's waits are many and
    short; most blocked time is other threads' long sleeps)."""
    for stack in drain.stacks:
        row = kept.setdefault(stack.state, [0, 0, 0, 0])
        has_stack = stack.kernel_error != NOT_WALKED
        row[0] += stack.total_ns
        row[1] += stack.total_ns if has_stack else 0
        row[2] += stack.count
        row[3] += stack.count if has_stack else 0


def spread(values: list[float], base: float) -> str:
    """The median against the base, and the range of the runs, in %."""
    low, high = (100 * (min(values) / base - 1), 100 * (max(values) / base - 1))
    return f"{100 * (statistics.median(values) / base - 1):+6.1f}% [{low:+.0f},{high:+.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--minimums", nargs="+", type=parse_min_walk,
                        default=[DEFAULT_MIN_WALK, *map(parse_min_walk, ("S=500,D=10",
                                                                          "S=100,D=10", "10"))],
                        help="stack-walk minimums to measure, as --offcpu-min takes them "
                        "(default: S=1000,D=10 S=500,D=10 S=100,D=10 10)")
    parser.add_argument("--no-perf", action="store_true", help="leave perf top out")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("waits_cost: run as root (it loads BPF programs)")
    rows: dict[str, dict[str, list[float]]] = {}
    programs: dict[str, dict[str, list[float]]] = {}  # minimum -> program -> ns/event
    kept: dict[str, dict[str, list[int]]] = {}  # minimum -> state -> walked() counts
    unwalked: dict[str, int] = {}  # minimum -> long waits mispredicted (not walked)
    loads = []
    ours = f"empty program, ktop's {len(FUNCTIONS)}"
    for _ in range(args.runs):  # interleaved, so drift hits every figure alike
        loads.append(os.getloadavg()[0])
        measure(args, rows, "none")
        with empty_programs(("sched_switch",)) as floor:
            measure(args, rows, "empty program, sched_switch", floor)
        with empty_programs(tuple(raw_name(t) for t in FUNCTIONS.values())) as floor:
            measure(args, rows, ours, floor)
        for minimum in args.minimums:
            name = f"waits {minimum}" + (" (default)" if minimum == DEFAULT_MIN_WALK else "")
            with waits_collector(minimum) as collector:
                collector.drain()
                delta = measure(args, rows, name, collector.programs)
                drain = collector.drain()
            walked(drain, kept.setdefault(name, {}))
            unwalked[name] = unwalked.get(name, 0) + drain.notes.get("long_wait_unwalked", 0)
            for program, (ns, count) in delta.items():
                if count:
                    programs.setdefault(name, {}).setdefault(program, []).append(ns / count)
        if not args.no_perf:
            with perf_top():
                measure(args, rows, "perf top -d 2")
    loads.append(os.getloadavg()[0])
    base = rows["none"]
    base_rate, base_cpu = statistics.median(base["rate"]), statistics.median(base["cpu"])
    print(f"pipe ping-pong, {args.seconds:g} s x {args.runs} interleaved runs: medians "
          f"[range of the runs]; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'tracer':30} {'trips/s, 2 CPUs':>15} {'vs none [range]':>20} "
          f"{'ns/trip, 1 CPU':>14} {'vs none [range]':>20} {'BPF ns/event':>12} "
          f"{'BPF ns/trip, 1 CPU':>18}")
    for name, row in rows.items():
        rate, cpu = statistics.median(row["rate"]), statistics.median(row["cpu"])
        event = f"{statistics.median(row['event']):12.0f}" if row["event"] else f"{'-':>12}"
        trip = (f"{statistics.median(row['trip']):7.0f} ({100 * statistics.median(row['trip']) / cpu:4.1f}%)"
                if row["trip"] else "-")
        print(f"{name:30} {rate:15.0f} {spread(row['rate'], base_rate):>20} {cpu:14.0f} "
              f"{spread(row['cpu'], base_cpu):>20} {event} {trip:>18}")
    floor_rate = statistics.median(rows[ours]["rate"])
    print(f"goal: within 5% of none at the default; the floor ({ours}) is "
          f"{100 * (floor_rate / base_rate - 1):+.1f}% of it")
    print("\nstacks kept, the whole machine during the runs: share of blocked time "
          "(of waits) walked")
    for name, by_state in kept.items():
        shares = "  ".join(
            f"{state} {100 * c[1] / c[0]:5.1f}% ({100 * c[3] / max(c[2], 1):.1f}% of "
            f"{c[2]:,} waits)" for state in STATES if (c := by_state.get(state)) and c[0])
        print(f"{name:30} {shares}  long waits not walked: {unwalked.get(name, 0):,}")
    print()
    for name, by_name in programs.items():
        shown = "  ".join(f"{program} {statistics.median(values):.0f}"
                          for program, values in by_name.items())
        print(f"{name}: ns/event by program: {shown}")


if __name__ == "__main__":
    main()
