#!/usr/bin/env python3
"""ktop's own cost beside perf top's, measured in one run on this machine.

For each tool, started in a real terminal (tmux) at the same sampling frequency:
  - idle: its CPU% (utime+stime over wall time) and memory (RSS and PSS) on an idle machine;
  - busy: the throughput of a CPU-bound kernel workload (reading /dev/urandom) with the tool
    running, against the workload alone: the slowdown the tool causes.

Usage (root): python bench/overhead.py [--hz 99] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

SESSION = "ktop-bench"
TICKS = os.sysconf("SC_CLK_TCK")
WORKLOAD_MB = 2048  # a few seconds of /dev/urandom on one CPU


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def memory_kib(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, anonymous) in KiB: PSS shares the big libraries (LLVM in bcc) fairly; the
    anonymous part is the tool's own heap and stacks, the rest is reclaimable library text."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("Rss", "Pss", "Anonymous"):
                fields[name] = int(value.split()[0])
    return fields["Rss"], fields["Pss"], fields["Anonymous"]


def find_process(name_part: str, timeout: float = 20.0) -> int:
    """The tool's main process, found by its command line among tmux's descendants."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if name_part in cmdline and "tmux" not in cmdline and "overhead.py" not in cmdline:
                return int(entry)
        time.sleep(0.2)
    raise RuntimeError(f"{name_part!r} did not start")


def start_in_tmux(command: str) -> None:
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", SESSION, "-x", "160", "-y", "50", command], check=True
    )


def stop_tmux() -> None:
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    time.sleep(1)


def urandom_throughput(megabytes: int) -> float:
    """MB/s of dd reading a fixed amount of /dev/urandom: kernel-bound, one CPU. Timed here,
    not by signalling dd: background jobs may ignore SIGINT."""
    started = time.monotonic()
    subprocess.run(
        ["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M", f"count={megabytes}", "status=none"],
        check=True,
    )
    return megabytes * 1.048576 / (time.monotonic() - started)


def measure(name: str, command: str, match: str, seconds: float, warmup: float) -> dict:
    start_in_tmux(command)
    pid = find_process(match)
    time.sleep(warmup)  # ktop compiles its BPF programs; perf top loads symbols
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    rss, pss, anon = memory_kib(pid)
    idle_cpu = 100.0 * (cpu1 - cpu0) / (t1 - t0)
    busy = urandom_throughput(WORKLOAD_MB)
    stop_tmux()
    return {"name": name, "cpu": idle_cpu, "rss": rss, "pss": pss, "anon": anon, "busy": busy}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=int, default=99)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: run as root (both tools need it)", file=sys.stderr)
        return 2
    for tool in ("tmux", "perf", "dd"):
        if not shutil.which(tool):
            print(f"bench: {tool} is not installed", file=sys.stderr)
            return 2
    ktop = [sys.executable, "-m", "ktop", "-F", str(args.hz)]
    baseline = urandom_throughput(WORKLOAD_MB)
    rows = [
        measure("ktop", " ".join(ktop), "-m ktop", args.seconds, warmup=8),
        measure("perf top", f"perf top -F {args.hz}", "perf top", args.seconds, warmup=8),
    ]
    print(f"\nsampling at {args.hz} Hz on {os.cpu_count()} CPUs, {args.seconds:.0f} s per figure")
    print(f"workload alone: dd if=/dev/urandom {baseline:8.1f} MB/s\n")
    print(f"{'tool':10} {'CPU% idle':>10} {'RSS MiB':>9} {'PSS MiB':>9} {'anon MiB':>9} {'dd MB/s':>9} {'slowdown':>9}")
    for row in rows:
        slowdown = 100.0 * (baseline - row["busy"]) / baseline
        print(
            f"{row['name']:10} {row['cpu']:10.2f} {row['rss'] / 1024:9.1f} "
            f"{row['pss'] / 1024:9.1f} {row['anon'] / 1024:9.1f} {row['busy']:9.1f} {slowdown:8.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
