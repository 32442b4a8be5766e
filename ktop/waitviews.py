"""Queries over a WaitProfile: the waits pane's views (by process, blocking function,
command, cgroup), run-queue histograms, and the line that explains pressure. No Textual,
no kernel: the pane, the drill-down and the exports share them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from operator import add, attrgetter
from typing import Any

from ktop.frozen import quick_init
from ktop.model import Bucket, WaitProcess, WaitProfile, WaitStack

NS_PER_S = 1_000_000_000


@quick_init
@dataclass(frozen=True, slots=True)
class WaitGroup:
    """Processes' time together (one process, one command, one cgroup), as ns in the window."""

    key: str  # what the group is named by: a pid as text, a command, a cgroup path
    pid: int  # the process's, for the by-process view (0 otherwise)
    comm: str
    cgroup: str
    processes: int
    on_cpu_ns: int
    runq_ns: int
    blocked_d_ns: int
    blocked_s_ns: int
    blocked_other_ns: int
    waits: int  # blocked waits
    reason: str  # the blocking function with most time in the group's stacks
    runq_hist: tuple[int, ...]

    @property
    def waiting_ns(self) -> int:
        return self.runq_ns + self.blocked_d_ns + self.blocked_s_ns + self.blocked_other_ns


@quick_init
@dataclass(frozen=True, slots=True)
class WaitReason:
    """Blocked waits at one blocking function, in one state."""

    reason: str
    state: str
    count: int
    total_ns: int
    max_ns: int
    processes: int


_pid = attrgetter("pid")


def _slot_sums(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Two histograms of the same slots added (4x faster than summing a zip of all rows)."""
    return tuple(map(add, a, b))


def percent(ns: int, window_s: float) -> float:
    """A share of one thread's wall time over the window (threads add up past 100)."""
    return 100.0 * ns / (window_s * NS_PER_S) if window_s > 0 else 0.0


def _groups(processes: Iterable[WaitProcess], stacks: Sequence[WaitStack],
            key_of: Callable[[WaitProcess], Any], stack_key: Callable[[WaitStack], Any] | None,
            by_pid: bool = False) -> list[WaitGroup]:
    """key_of, stack_key: the group's key (by_pid: the pid, named by it as text); without
    stack_key, groups of one process, whose reason its rows carry (WaitProcess.reason)."""
    members: dict[Any, list[WaitProcess]] = {}
    for p in processes:
        members.setdefault(key_of(p), []).append(p)
    reasons: dict[Any, dict[str, int]] = {}
    if stack_key is not None:
        for s in stacks:
            if not s.reason.startswith("["):
                per = reasons.setdefault(stack_key(s), {})
                per[s.reason] = per.get(s.reason, 0) + s.total_ns
    groups = []
    for member_key, rows in members.items():
        if stack_key is None:
            reason = rows[0].reason
        else:
            top = reasons.get(member_key, {})
            reason = max(top, key=top.__getitem__) if top else ""
        key = str(member_key) if by_pid else member_key
        first = rows[0]
        if len(rows) == 1:  # most groups of the by-process view: nothing to sum
            groups.append(WaitGroup(
                key, first.pid if by_pid else 0, first.comm, first.cgroup, 1, first.on_cpu_ns,
                first.runq_ns, first.blocked_d_ns, first.blocked_s_ns, first.blocked_other_ns,
                first.blocked_count, reason, tuple(first.runq_hist),
            ))
            continue
        cgroups = {p.cgroup for p in rows}  # a command may run in several: then none to name
        groups.append(WaitGroup(
            key=key, pid=first.pid if by_pid else 0, comm=first.comm,
            cgroup=first.cgroup if len(cgroups) == 1 else "",
            processes=len({p.pid for p in rows}),
            on_cpu_ns=sum(p.on_cpu_ns for p in rows),
            runq_ns=sum(p.runq_ns for p in rows),
            blocked_d_ns=sum(p.blocked_d_ns for p in rows),
            blocked_s_ns=sum(p.blocked_s_ns for p in rows),
            blocked_other_ns=sum(p.blocked_other_ns for p in rows),
            waits=sum(p.blocked_count for p in rows),
            reason=reason,
            runq_hist=reduce(_slot_sums, (p.runq_hist for p in rows)),
        ))
    groups.sort(key=lambda g: (-g.waiting_ns, g.key))
    return groups


def by_process(profile: WaitProfile, shows: Callable[[int, str], bool] | None = None) -> list[WaitGroup]:
    """One row per process, its threads (and their commands) summed."""
    procs = [p for p in profile.processes if shows is None or shows(p.pid, p.cgroup)]
    return _groups(procs, profile.stacks, _pid, None, by_pid=True)


def by_command(profile: WaitProfile, shows: Callable[[int, str], bool] | None = None) -> list[WaitGroup]:
    procs = [p for p in profile.processes if shows is None or shows(p.pid, p.cgroup)]
    return _groups(procs, profile.stacks, lambda p: p.comm, lambda s: s.comm)


def by_cgroup(profile: WaitProfile, shows: Callable[[int, str], bool] | None = None) -> list[WaitGroup]:
    procs = [p for p in profile.processes if shows is None or shows(p.pid, p.cgroup)]
    return _groups(procs, profile.stacks, lambda p: p.cgroup, lambda s: s.cgroup)


def by_reason(profile: WaitProfile, shows: Callable[[int, str], bool] | None = None) -> list[WaitReason]:
    """Blocked time by blocking function and state, most first."""
    table: dict[tuple[str, str], list] = {}
    for s in profile.stacks:
        if shows is not None and not shows(s.pid, s.cgroup):
            continue
        entry = table.setdefault((s.reason, s.state), [0, 0, 0, set()])
        entry[0] += s.count
        entry[1] += s.total_ns
        entry[2] = max(entry[2], s.max_ns)
        entry[3].add(s.pid)
    rows = [WaitReason(reason, state, count, total, max_ns, len(pids))
            for (reason, state), (count, total, max_ns, pids) in table.items()]
    rows.sort(key=lambda r: (-r.total_ns, r.reason, r.state))
    return rows


def hist_buckets_us(slots: Sequence[int]) -> tuple[Bucket, ...]:
    """Log2 slots of us (slot k >= 1 holds [2^(k-1), 2^k) us, slot 0 under 1 us) as buckets
    in us, from the first to the last non-empty slot."""
    used = [k for k, count in enumerate(slots) if count]
    if not used:
        return ()
    return tuple(
        Bucket(0 if k == 0 else 1 << (k - 1), 0 if k == 0 else (1 << k) - 1, slots[k])
        for k in range(used[0], used[-1] + 1)
    )


def machine_runq_hist(profile: WaitProfile) -> tuple[int, ...]:
    return tuple(map(sum, zip(*(p.runq_hist for p in profile.processes)))) if profile.processes else ()


def pressure_line(profile: WaitProfile, window_s: float, top: int = 2) -> str:
    """Where pressure comes from, in one line: CPU pressure as the processes waiting in the
    run queue, I/O pressure as the D waits under I/O."""
    parts = []
    runq = sorted(profile.processes, key=lambda p: -p.runq_ns)
    runq = [p for p in runq if percent(p.runq_ns, window_s) >= 1.0][:top]
    if runq:
        parts.append("cpu: " + ", ".join(
            f"{p.comm} {p.pid} {percent(p.runq_ns, window_s):.0f}% runq" for p in runq))
    io: dict[str, int] = {}
    for s in profile.stacks:
        if s.state == "D" and s.reason.startswith("io_schedule"):
            io[s.comm] = io.get(s.comm, 0) + s.total_ns
    io_top = sorted(io.items(), key=lambda kv: -kv[1])[:top]
    io_top = [(comm, ns) for comm, ns in io_top if percent(ns, window_s) >= 1.0]
    if io_top:
        parts.append("io: " + ", ".join(
            f"{comm} {percent(ns, window_s):.0f}% D in io_schedule" for comm, ns in io_top))
    return "  ".join(parts)
