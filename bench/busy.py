#!/usr/bin/env python3
"""ktop on a busy machine beside perf top: the table of issue 39, in one run.

Two of perf's own scheduler benchmarks are the workload (nobody here wrote them):
`perf bench sched messaging -g 5 -l 2000` and `perf bench sched pipe -l 300000`. Each round
runs each workload alone, then with each ktop (`-d 2`, all panes, in a 160x50 tmux), then
with `perf top -d 2` (its default 4000 Hz), interleaved so drift hits all alike; then both
tools idle for --idle-seconds. For each: the workload's wall time, its slowdown against the
same round's run alone, the tool's own CPU (utime+stime over the workload's run, 100% = one
CPU) and, for ktop, its BPF programs' run time over the same span (kernel.bpf_stats_enabled
held on for the whole bench, restored after: it costs every program run a little). Figures
are medians of --rounds rounds with [min-max].

--ktop PATH (repeatable) names checkouts to compare, each run from its own .venv: e.g.
`--ktop /work/main --ktop .` puts main's ktop and this tree's side by side, interleaved.

Usage (root): python bench/busy.py [--rounds 3] [--ktop PATH ...] [--max-cost P] [--quick]
`make bench` runs it with the defaults (about 10 minutes on 2 CPUs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from overhead import (
    PERF_TOP_REFRESH_S,
    Tmux,
    bpf_run_times,
    bpf_stats,
    cpu_seconds,
    find_process,
    ktop_ready,
    memory_mib,
    perf_hot,
    stop,
)

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "messaging": ["perf", "bench", "sched", "messaging", "-g", "5", "-l", "2000"],
    "pipe": ["perf", "bench", "sched", "pipe", "-l", "300000"],
}
QUICK_WORKLOADS = {
    "messaging": ["perf", "bench", "sched", "messaging", "-g", "5", "-l", "500"],
    "pipe": ["perf", "bench", "sched", "pipe", "-l", "100000"],
}
READY_TIMEOUT = 90.0  # ktop compiles its BPF programs on a first start
# After the first full screen: the BPF panes load one after the other, then settle.
SETTLE_S = 8.0
QUIET_S = 1.0


@dataclass
class Tool:
    label: str
    argv: list[str]
    cwd: str
    is_main: Callable[[list[str]], bool]
    ready: Callable[[list[str]], bool]
    bpf: bool

    @property
    def name(self) -> str:  # as overhead.find_process names a tool
        return self.label


@dataclass
class Figures:
    wall: dict[str, list[float]] = field(default_factory=dict)  # workload -> seconds a round
    cpu: dict[str, list[float]] = field(default_factory=dict)
    bpf: dict[str, list[float]] = field(default_factory=dict)
    rss: list[float] = field(default_factory=list)


def ktop_tool(path: str, max_cost: str | None) -> Tool:
    root = Path(path).resolve()
    python = root / ".venv" / "bin" / "python"
    if not python.exists():  # an exported tree: this checkout's environment, its code
        python = REPO / ".venv" / "bin" / "python"
    argv = [str(python), "-m", "ktop", "-d", f"{PERF_TOP_REFRESH_S:g}"]
    if max_cost is not None:
        argv += ["--max-cost", max_cost]
    label = "ktop" if root == REPO else f"ktop ({root.name})"
    return Tool(label, argv, str(root),
                lambda a: bool(a) and os.path.basename(a[0]).startswith("python")
                and a[1:3] == ["-m", "ktop"],
                ktop_ready, bpf=True)


PERF_TOP = Tool("perf top", ["perf", "top", "-d", f"{PERF_TOP_REFRESH_S:g}"], str(REPO),
                lambda a: bool(a) and os.path.basename(a[0]).startswith("perf")
                and a[1:2] == ["top"],
                perf_hot, bpf=False)


def run_workload(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.monotonic() - started


def bpf_ns(pid: int) -> dict[int, int]:
    try:
        return bpf_run_times(pid)
    except OSError:
        return {}


def with_tool(tmux: Tmux, tool: Tool, workloads: dict[str, list[str]], idle_s: float,
              into: Figures) -> None:
    """Launch the tool, wait for its full screen, run each workload under it, then idle."""
    session = tmux.start_in(tool.argv, tool.cwd)
    process: psutil.Process | None = None
    try:
        process = find_process(tmux, session, tool)  # type: ignore[arg-type]
        deadline = time.monotonic() + READY_TIMEOUT
        while not tool.ready(tmux.screen(session)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tool.label} not on screen after {READY_TIMEOUT:.0f} s:\n"
                                   + "\n".join(tmux.screen(session)))
            time.sleep(0.2)
        time.sleep(SETTLE_S)
        pid = process.pid
        for name, argv in workloads.items():
            time.sleep(QUIET_S)
            cpu0, bpf0 = cpu_seconds(pid), bpf_ns(pid)
            wall = run_workload(argv)
            cpu1, bpf1 = cpu_seconds(pid), bpf_ns(pid)
            into.wall.setdefault(name, []).append(wall)
            into.cpu.setdefault(name, []).append(100 * (cpu1 - cpu0) / wall)
            spent = sum(ns - bpf0.get(prog, 0) for prog, ns in bpf1.items())
            into.bpf.setdefault(name, []).append(100 * spent / 1e9 / wall)
        if idle_s:
            time.sleep(SETTLE_S)
            t0, cpu0, bpf0 = time.monotonic(), cpu_seconds(pid), bpf_ns(pid)
            time.sleep(idle_s)
            t1, cpu1, bpf1 = time.monotonic(), cpu_seconds(pid), bpf_ns(pid)
            into.cpu.setdefault("idle", []).append(100 * (cpu1 - cpu0) / (t1 - t0))
            spent = sum(ns - bpf0.get(prog, 0) for prog, ns in bpf1.items())
            into.bpf.setdefault("idle", []).append(100 * spent / 1e9 / (t1 - t0))
            into.rss.append(memory_mib(pid)["rss"])
    finally:
        tmux.kill(session)
        if process is not None:
            stop(process)


def summary(values: list[float], digits: int = 2, percent: bool = False) -> str:
    if not values:
        return "-"
    unit = "%" if percent else " s"
    median = statistics.median(values)
    text = f"{median:.{digits}f}{unit}"
    if len(values) > 1:
        text += f" [{min(values):.{digits}f}-{max(values):.{digits}f}]"
    return text


def slowdowns(alone: list[float], under: list[float]) -> list[float]:
    """Per round, the workload's time under the tool against the same round's time alone."""
    return [100 * (u / a - 1) for a, u in zip(alone, under)]


def report(workloads: dict[str, list[str]], alone: Figures, tools: list[Tool],
           figures: dict[str, Figures], rounds: int) -> None:
    print(f"\nA busy machine: each workload alone, under each tool (-d 2, 160x50 tmux), "
          f"medians of {rounds} rounds [min-max], interleaved; tool CPU in % of one CPU "
          f"over the workload's run, BPF with kernel.bpf_stats_enabled held on.\n")
    names = [t.label for t in tools]
    head = ["workload", "alone", *[f"with {n}" for n in names],
            *[f"{n} CPU + BPF" for n in names if n != PERF_TOP.label],
            f"{PERF_TOP.label} CPU"]
    rows = []
    for name, argv in workloads.items():
        row = [f"`{' '.join(argv)}`", summary(alone.wall[name])]
        for tool in tools:
            f = figures[tool.label]
            slow = statistics.median(slowdowns(alone.wall[name], f.wall[name]))
            row.append(f"{summary(f.wall[name])} ({slow:+.1f}%)")
        for tool in tools:
            if tool.bpf:
                f = figures[tool.label]
                both = [c + b for c, b in zip(f.cpu[name], f.bpf[name])]
                row.append(f"{summary(f.cpu[name], 1, True)} + BPF {summary(f.bpf[name], 1, True)}"
                           f" = {statistics.median(both):.1f}%")
        row.append(summary(figures[PERF_TOP.label].cpu[name], 1, True))
        rows.append(row)
    if figures[PERF_TOP.label].cpu.get("idle"):
        row = ["idle (-d 2)", ""] + [""] * len(tools)
        for tool in tools:
            if tool.bpf:
                f = figures[tool.label]
                both = [c + b for c, b in zip(f.cpu["idle"], f.bpf["idle"])]
                row.append(f"{summary(f.cpu['idle'], 2, True)} + BPF "
                           f"{summary(f.bpf['idle'], 2, True)} = {statistics.median(both):.2f}%"
                           f", RSS {statistics.median(f.rss):.0f} MiB")
        row.append(summary(figures[PERF_TOP.label].cpu["idle"], 2, True))
        rows.append(row)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


class BenchTmux(Tmux):
    def start_in(self, argv: list[str], cwd: str) -> str:
        self.launches += 1
        session = f"run{self.launches}"
        self.run("new-session", "-d", "-s", session, "-x", "160", "-y", "50", "-c", cwd,
                 *argv, ";", "set-option", "-w", "-t", session, "remain-on-exit", "on")
        self.socket_path = self.socket_path or self.display(session, "#{socket_path}")
        return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ktop", action="append", default=[],
                        help="a checkout whose ktop to run (repeatable; default: this one)")
    parser.add_argument("--max-cost", default=None, help="passed to each ktop")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="1 round, smaller workloads")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (ktop loads BPF programs; perf top reads kernel samples)")
    workloads = QUICK_WORKLOADS if args.quick else WORKLOADS
    rounds = 1 if args.quick else args.rounds
    tools = [ktop_tool(p, args.max_cost) for p in (args.ktop or [str(REPO)])] + [PERF_TOP]
    figures = {t.label: Figures() for t in tools}
    alone = Figures()
    tmux = BenchTmux()
    try:
        with bpf_stats():
            for number in range(rounds):
                print(f"bench: round {number + 1} of {rounds}", file=sys.stderr)
                for name, argv in workloads.items():
                    time.sleep(QUIET_S)
                    alone.wall.setdefault(name, []).append(run_workload(argv))
                for tool in tools:
                    with_tool(tmux, tool, workloads, args.idle_seconds, figures[tool.label])
    finally:
        tmux.close()
    report(workloads, alone, tools, figures, rounds)


if __name__ == "__main__":
    main()
