#!/usr/bin/env python3
"""How long `--baseline BIG.krec` takes to load, and how much memory: a recording of heavy
records (a busy server's: hundreds of processes, thousands of CPU and wait stacks) made with
ktop's own writer, then `ktop --replay SMALL --baseline BIG --snapshot out.json` timed in a
subprocess, its peak RSS read from the kernel (ru_maxrss of the child).

A/B in one run (interleaved, which cancels most of the noise of a shared machine): give
--tree for each checkout to compare (its ktop package is imported from there).

Usage: python bench/baseline_load.py [--records 3000] [--tree /work/main --tree .]
                                     [--rounds 2] [--keep DIR]
No root needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import time

# Rows of a record: "forged" ~1.4 MB of JSON (200 KB compressed: 100 of them make a 20 MB
# file), "busy" ~0.4 MB, a busy 2-CPU machine's (--scale).
SCALES = {"forged": (800, 1500, 600), "busy": (250, 450, 180)}
PROCESSES, CPU_STACKS, WAIT_STACKS = SCALES["forged"]
FRAMES = 18
SYMBOLS = 4000  # distinct kernel function names the stacks draw from


def heavy_snapshot(index: int):
    """One busy interval: the same processes and stacks each record (the merged baseline
    holds as many rows as one record), their counts varying."""
    from ktop.model import (
        CpuProfile,
        CpuTimes,
        ProcessRow,
        Snapshot,
        StackSample,
        WaitProcess,
        WaitProfile,
        WaitStack,
    )
    from ktop.stacktree import hot_functions

    def frames(seed: int) -> tuple[str, ...]:
        return tuple(f"kfunc_{(seed * 7919 + depth * 104729) % SYMBOLS}+0x{depth * 16:x}"
                     for depth in range(FRAMES))

    kernel = "[kernel.kallsyms]"
    stacks = tuple(StackSample(pid=1000 + i % PROCESSES, comm=f"worker-{i % PROCESSES}",
                               samples=1 + (i + index) % 7, frames=frames(i),
                               modules=(kernel,) * FRAMES, cgroup="/system.slice/app.service")
                   for i in range(CPU_STACKS))
    total = sum(s.samples for s in stacks)
    cpu = CpuProfile(sample_hz=99, cpus=2, window_s=1.0, cumulative=False,
                     total_samples=total, idle_samples=0, kernel_samples=total, user_samples=0,
                     lost={}, functions=hot_functions(stacks, total), stacks=stacks,
                     times=CpuTimes(user=40.0, kernel=50.0, idle=10.0, steal=0.0, ticks=200))
    processes = tuple(ProcessRow(pid=1000 + i, comm=f"worker-{i}", user="app", state="S",
                                 cpu_percent=(i + index) % 50 / 10, sys_percent=0.1, threads=4,
                                 rss_bytes=50 << 20, cmdline=f"/usr/bin/worker --id {i} "
                                 "--config /etc/app/worker.conf",
                                 cgroup="/system.slice/app.service")
                      for i in range(PROCESSES))
    waits = WaitProfile(
        processes=tuple(WaitProcess(pid=1000 + i, comm=f"worker-{i}", cgroup="/system.slice",
                                    on_cpu_ns=10_000, runq_ns=20_000 + index, runq_count=3,
                                    blocked_s_ns=1_000_000, blocked_d_ns=0, blocked_other_ns=0,
                                    blocked_count=5, runq_hist=(0, 1, 2), reason="futex_wait")
                        for i in range(PROCESSES)),
        stacks=tuple(WaitStack(pid=1000 + i % PROCESSES, comm=f"worker-{i % PROCESSES}",
                               cgroup="/system.slice", state="S", reason="futex_wait",
                               frames=frames(i + 99), user=(), count=2 + index % 3,
                               total_ns=1_000_000, max_ns=500_000, hist=(0, 1, 1), wakers=())
                     for i in range(WAIT_STACKS)),
        lost={}, window_s=1.0)
    return Snapshot(taken_at=1767268245.0 + index, duration_s=1.0, hostname="bench",
                    kernel="6.18", ktop_version="bench", headers="", processes=processes, cpu=cpu,
                    waits=waits, unavailable={})


def make_recording(path: str, records: int) -> None:
    from ktop.record.fileformat import RecordWriter

    writer = RecordWriter(path)
    first = heavy_snapshot(0)
    for index in range(records):
        # Counts move from one record to the next; building each whole would take longer
        # than the load measured: the rows are reused, the times move.
        snapshot = heavy_snapshot(index) if index < 7 else dataclasses.replace(
            first, taken_at=first.taken_at + index)
        writer.append(snapshot)
    writer.close()


def measure(tree: str, replay: str, baseline: str, out: str) -> tuple[float, float, float, str]:
    """(seconds, CPU seconds, peak RSS MiB, last stderr line) of one --baseline load in a
    fresh ktop (CPU seconds are what a loaded machine's wall time hides)."""
    env = {**os.environ, "PYTHONPATH": tree, "TZ": "UTC"}
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "ktop", "--replay", replay, "--baseline",
                             baseline, "--snapshot", out], env=env, cwd=tree,
                            capture_output=True, text=True)
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu_before
    said = (result.stderr.strip().splitlines() or [""])[-1]
    if result.returncode:
        said = f"exit {result.returncode}: {said}"
    return seconds, cpu, max(peak, before) / 1024, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--tree", action="append", help="a checkout to measure (repeatable)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--keep", help="make (or reuse) the recordings in this directory")
    parser.add_argument("--scale", choices=SCALES, default="forged")
    args = parser.parse_args()
    global PROCESSES, CPU_STACKS, WAIT_STACKS
    PROCESSES, CPU_STACKS, WAIT_STACKS = SCALES[args.scale]
    trees = [os.path.abspath(t) for t in (args.tree or ["."])]
    directory = args.keep or tempfile.mkdtemp(prefix="ktop-baseline-")
    os.makedirs(directory, exist_ok=True)
    big = os.path.join(directory, f"{args.scale}-{args.records}.krec")
    small = os.path.join(directory, "small.krec")
    if not os.path.exists(big):
        started = time.monotonic()
        make_recording(big, args.records)
        print(f"made {big}: {os.path.getsize(big) / 1e6:.1f} MB, {args.records} records "
              f"in {time.monotonic() - started:.0f}s", flush=True)
    if not os.path.exists(small):
        make_recording(small, 5)
    for round_ in range(args.rounds):
        order = trees if round_ % 2 == 0 else trees[::-1]
        for tree in order:
            out = os.path.join(directory, "out.json")
            # One child at a time: ru_maxrss of the children is the largest of all so far,
            # so each measurement runs in a fresh process group of one (a helper).
            result = subprocess.run([sys.executable, __file__, "--one", tree, small, big, out],
                                    capture_output=True, text=True)
            print(f"round {round_ + 1} {tree}: {result.stdout.strip() or result.stderr.strip()}",
                  flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--one":
        seconds, cpu, rss, said = measure(*sys.argv[2:])
        print(f"{seconds:.1f} s ({cpu:.1f} s of CPU), peak RSS {rss:.0f} MiB; {said}")
        sys.exit(0)
    sys.exit(main())
