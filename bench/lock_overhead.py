"""What watching lock contention costs the workload that contends: run as root.

Two workloads from tests/fixtures/locks_workload.py, each for a fixed time: `files` (8
processes creating and unlinking files in one directory: a few hundred long i_rwsem waits a
second) and `epoll` (4 processes adding and removing fds in one epoll instance: some 15,000
short mutex waits a second). Each runs alone, with ktop's lock collector attached (drained
and aggregated every second, as the pane does; also without lock owners and names), and
under `perf lock record -a`; the modes
take turns, round after round, so drift in the machine's speed spreads over all of them.
Prints operations per second per mode (median of the rounds), the slowdown against the
workload alone, and what the watching itself cost in CPU time.

    python bench/lock_overhead.py [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ktop.aggregate.locks import LockAggregator
from ktop.collectors.locks import LockCollector
from ktop.symbolize.kernel import Kallsyms

WORKLOAD = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "locks_workload.py"
)


_SYS_BPF = 321  # x86_64
_BPF_ENABLE_STATS, _BPF_STATS_RUN_TIME = 32, 0


@contextmanager
def bpf_run_time_stats() -> Iterator[None]:
    """Has the kernel time every BPF program run while held (BPF_ENABLE_STATS: unlike the
    sysctl, it ends with this process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 2)(_BPF_STATS_RUN_TIME, 0)
    fd = libc.syscall(_SYS_BPF, _BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS")
    try:
        yield
    finally:
        os.close(fd)


def prog_run_stats(prog_fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of a loaded BPF program, from its fdinfo."""
    fields = {}
    with open(f"/proc/self/fdinfo/{prog_fd}") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields.get("run_time_ns", 0)), int(fields.get("run_cnt", 0))


SCENARIOS = {
    "files": ("file_ops", ["--processes", "8", "--mmap-threads", "0"]),
    "epoll": ("epoll_ops", ["--processes", "0", "--mmap-threads", "0", "--epoll-processes", "4"]),
}


def run_workload(seconds: float, options: list[str]) -> dict[str, float]:
    """Operations done, and the CPU time the workload's processes used doing them (BPF
    programs run in their context, so that is where the collector's cost lands)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [sys.executable, WORKLOAD, "--seconds", str(seconds), *options],
        check=True, capture_output=True, text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**json.loads(result.stdout), "workload_cpu_s": cpu_s}


@contextmanager
def alone() -> Iterator[dict]:
    yield {}


@contextmanager
def with_ktop(**options: bool) -> Iterator[dict]:
    """The collector attached, drained and folded every second in a thread, as in ktop."""
    collector = LockCollector(**options)
    collector.start()
    programs = dict(collector._program.program.programs)  # noqa: SLF001 - bench only
    aggregator = LockAggregator(Kallsyms.load())
    stop = threading.Event()
    stats = {"events": 0}

    def drain_every_second() -> None:
        while not stop.wait(1.0):
            aggregator.add(collector.drain())
            stats["events"] = aggregator.profile(cumulative=True).events

    drainer = threading.Thread(target=drain_every_second)
    cpu_before = time.process_time()
    drainer.start()
    try:
        yield stats
    finally:
        stop.set()
        drainer.join()
        aggregator.add(collector.drain())
        stats["events"] = aggregator.profile(cumulative=True).events
        stats["ktop_cpu_s"] = time.process_time() - cpu_before
        for name, fd in programs.items():
            run_ns, runs = prog_run_stats(fd)
            stats[f"{name[3:]}_ns"] = run_ns / runs if runs else 0.0
            stats[f"{name[3:]}_runs"] = runs
            stats["bpf_cpu_s"] = stats.get("bpf_cpu_s", 0.0) + run_ns / 1e9
        collector.close()


@contextmanager
def with_perf_lock_record() -> Iterator[dict]:
    with tempfile.TemporaryDirectory(prefix="ktop-bench-") as tmp:
        data = os.path.join(tmp, "perf.data")
        perf = subprocess.Popen(
            ["perf", "lock", "record", "-a", "-o", data],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # perf opens its events
        stats: dict = {}
        try:
            yield stats
        finally:
            perf.send_signal(2)  # SIGINT: perf writes its header and exits
            _, _, usage = os.wait4(perf.pid, 0)
            perf.returncode = 0
            stats["perf_cpu_s"] = usage.ru_utime + usage.ru_stime
            stats["perf_data_mb"] = os.path.getsize(data) / 1e6


MODES: dict[str, Callable] = {
    "alone": alone,
    "ktop": with_ktop,
    "ktop, no user stacks": lambda: with_ktop(user_stacks=False),
    # As before lock owners and names: no BTF offsets, so neither is traced (and no
    # sched_waking program): the same load's cost of owners and names, side by side.
    "ktop, no owners/names": lambda: with_ktop(btf_path="/nonexistent/btf"),
    "perf lock record -a": with_perf_lock_record,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the collector loads BPF and perf traces all CPUs")

    results = {(name, mode): [] for name in SCENARIOS for mode in MODES}
    with bpf_run_time_stats():
        for round_ in range(args.rounds):
            for name, (_, options) in SCENARIOS.items():
                for mode, attach in MODES.items():
                    with attach() as stats:
                        ops = run_workload(args.seconds, options)
                    results[name, mode].append({**ops, **stats})
                    print(f"round {round_ + 1} {name} {mode:22} "
                          f"{json.dumps(results[name, mode][-1])}", file=sys.stderr)
    print(f"{args.rounds} rounds of {args.seconds:g} s, medians; {os.cpu_count()} CPUs, "
          f"kernel {os.uname().release}, load average {os.getloadavg()[0]:.1f}")
    for name, (kind, _) in SCENARIOS.items():
        print_scenario(name, kind, {mode: results[name, mode] for mode in MODES})


def print_scenario(name: str, kind: str, runs: dict[str, list[dict]]) -> None:
    def median(mode: str, value: Callable[[dict], float]) -> float:
        return statistics.median(value(r) for r in runs[mode])

    def ops_per_s(r: dict) -> float:
        return r[kind] / r["seconds"]

    def cpu_us_per_op(r: dict) -> float:
        return r["workload_cpu_s"] * 1e6 / max(1, r[kind])

    print(f"\n{name}: {kind} per second")
    print(f"{'mode':22} {'ops/s':>9} {'(min-max)':>15} {'slowdown':>9} {'CPU us/op':>10} "
          f"{'extra CPU':>10}")
    base_rate, base_cpu = median("alone", ops_per_s), median("alone", cpu_us_per_op)
    for mode in runs:
        rates = [ops_per_s(r) for r in runs[mode]]
        rate, cpu = median(mode, ops_per_s), median(mode, cpu_us_per_op)
        print(f"{mode:22} {rate:9.0f} {f'{min(rates):.0f}-{max(rates):.0f}':>15} "
              f"{1 - rate / base_rate:9.1%} {cpu:10.2f} {cpu / base_cpu - 1:10.1%}")
    alone = [ops_per_s(r) for r in runs["alone"]]
    if len(alone) > 1 and max(alone) > 1.2 * min(alone):
        print(f"  (alone varied {max(alone) / min(alone):.1f}x between rounds: slowdowns smaller "
              "than that are noise here; the CPU figures below are the steadier measure)")
    extras = ("events", "contention_begin_ns", "contention_end_ns", "lock_waking_ns",
              "lock_waking_runs", "bpf_cpu_s", "ktop_cpu_s",
              "perf_cpu_s", "perf_data_mb")
    for mode in runs:
        cost = {
            key: round(median(mode, lambda r, key=key: r[key]), 3)
            for key in extras if key in runs[mode][0]
        }
        if cost:
            print(f"  {mode:20} {cost}")


if __name__ == "__main__":
    main()
