"""What the syscalls pane costs where it costs most: a storm of system calls from one thread.

A C program (compiled here) makes one call in a loop for a few seconds and prints the calls
a second: getppid (the cheapest call there is: the worst case, a tracer's cost all in view)
and openat of a missing file (ENOENT: the storm of issue 42). Each storm is run alone,
under empty programs on raw_syscalls sys_enter and sys_exit (the floor: what any program
there costs, the syscall slow path included), with the syscalls pane's collector (drained
every second, as ktop does), and under `perf trace -s` for comparison; rounds interleaved,
medians with their range, each as a share of alone. Goal (issue 42): the storm keeps at
least 85% of its throughput under the pane. Run as root: `python bench/syscalls_cost.py`
(--seconds, --runs, --no-perf); numbers are noisy on a shared machine: read the ranges."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ktop.collectors.bpfsys import attach_raw_tracepoint  # noqa: E402
from ktop.panes.syscalls.collector import SyscallCollector  # noqa: E402

STORM = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);	/* the vDSO: no system call */
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = atof(argv[2]), start = now(), end = start + seconds, t;
	int opens = strcmp(argv[1], "openat") == 0;
	unsigned long calls = 0;

	do {
		for (int i = 0; i < 1024; i++)
			if (opens)
				syscall(SYS_openat, AT_FDCWD, "/nonexistent/ktop-storm", O_RDONLY);
			else
				syscall(SYS_getppid);
		calls += 1024;
	} while ((t = now()) < end);
	printf("%.0f\n", calls / (t - start));
	return 0;
}
"""


def compiled(where: str) -> str:
    with open(os.path.join(where, "storm.c"), "w") as f:
        f.write(STORM)
    binary = os.path.join(where, "storm")
    subprocess.run(["cc", "-O2", "-o", binary, os.path.join(where, "storm.c")], check=True)
    return binary


def storm(binary: str, call: str, seconds: float, prefix: list[str] | None = None) -> float:
    out = subprocess.run([*(prefix or []), binary, call, str(seconds)], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


@contextlib.contextmanager
def empty_programs() -> Iterator[None]:
    """bench/floor.bpf.c's empty program on sys_enter and sys_exit."""
    from ktop.collectors.bpfload import kernel_headers  # noqa: PLC0415
    from ktop.collectors.loader import load_in_child  # noqa: PLC0415

    source = kernel_headers().source
    program = load_in_child("floor.bpf.c", os.path.dirname(os.path.abspath(__file__)), [],
                            {"empty": "RAW_TRACEPOINT"},
                            {"BCC_KERNEL_SOURCE": source} if source else {})
    try:
        for tracepoint in ("sys_enter", "sys_exit"):
            program.keep(attach_raw_tracepoint(program.programs["empty"], tracepoint))
        yield
    finally:
        program.close()


@contextlib.contextmanager
def syscalls_pane() -> Iterator[None]:
    """The pane's collector, drained every second in a thread as ktop's engine does."""
    collector = SyscallCollector()
    collector.start()
    stop = threading.Event()

    def drain() -> None:
        while not stop.wait(1.0):
            collector.drain()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        collector.close()


def spread(values: list[float], base: float) -> str:
    median = statistics.median(values)
    return (f"{median:12,.0f}/s  {100 * median / base:5.1f}%  "
            f"(range {100 * min(values) / base:.1f}-{100 * max(values) / base:.1f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-perf", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("syscalls_cost: needs root (BPF)")
    perf = None if args.no_perf else shutil.which("perf")
    with tempfile.TemporaryDirectory() as where:
        binary = compiled(where)
        trace_out = os.path.join(where, "trace.txt")
        conditions: dict[str, tuple[Callable[[], contextlib.AbstractContextManager], list[str]]] = {
            "alone": (nothing, []),
            "floor: empty programs on sys_enter/exit": (empty_programs, []),
            "the syscalls pane": (syscalls_pane, []),
        }
        if perf:
            conditions["perf trace -s"] = (nothing, [perf, "trace", "-s", "-o", trace_out, "--"])
        for call in ("getppid", "openat"):
            rates: dict[str, list[float]] = {name: [] for name in conditions}
            for _ in range(args.runs):
                for name, (context, prefix) in conditions.items():
                    with context():
                        rates[name].append(storm(binary, call, args.seconds, prefix))
            base = statistics.median(rates["alone"])
            print(f"{call} storm, one thread, {args.seconds:g} s x {args.runs} interleaved runs:")
            for name, values in rates.items():
                print(f"  {name:42} {spread(values, base)}")
            kept = statistics.median(rates["the syscalls pane"]) / base
            print(f"  goal: >= 85% of alone under the pane: {100 * kept:.1f}% "
                  f"({'met' if kept >= 0.85 else 'NOT met'})")


if __name__ == "__main__":
    main()
