"""Fold drained waits into the off-CPU profile over a window of recent seconds.

The same counts serve replay: `merge_waits` rebuilds each recorded interval's counts from
its WaitProfile and sums them with the merge the live window uses, so a replayed window is
the live window of those intervals, not a second copy of the fold.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import add
from typing import TYPE_CHECKING

from ktop.aggregate import exited
from ktop.aggregate.exited import crowded, fold_exited
from ktop.aggregate.window import Window, sum_lost
from ktop.collectors.waits import (
    HIST_SLOTS,
    NOT_WALKED,
    NOT_WALKED_LONG,
    BlockedStack,
    WaitDrain,
    WalkMinimums,
)
from ktop.model import UserFrame, WaitProcess, WaitProfile, WaitStack, WaitWaker
from ktop.symbolize.frames import TRACING_DEPTH, KernelFrames
from ktop.symbolize.kernel import Kallsyms

if TYPE_CHECKING:
    from ktop.collectors.waits import WaitCollector
    from ktop.panedef import PaneServices

# Frames of the tracing machinery above the scheduler, cut from every stack.
_TRACING_PREFIXES = (
    "bpf_prog_", "bpf_trampoline_", "bpf_trace_run", "__bpf_trace_", "__traceiter_",
    "trace_sched_", "perf_trace_", "perf_tp_event", "perf_swevent", "__perf_",
)
# The scheduler's own functions: a wait's reason is the first frame past them. io_schedule
# is kept, with its caller: "I/O" is the reason, what waited for it the detail.
_SCHEDULER = frozenset({
    "__schedule", "schedule", "schedule_timeout", "schedule_hrtimeout_range",
    "schedule_hrtimeout_range_clock", "schedule_hrtimeout", "schedule_preempt_disabled",
    "preempt_schedule", "preempt_schedule_common", "preempt_schedule_irq",
    "preempt_schedule_notrace", "__cond_resched", "_cond_resched", "schedule_idle",
    "schedule_timeout_interruptible", "schedule_timeout_uninterruptible",
    "schedule_timeout_killable", "schedule_timeout_idle", "__x64_sys_sched_yield",
    "do_sched_yield", "rt_mutex_schedule", "schedule_rtlock",
})
_IO_SCHEDULE = frozenset({"io_schedule", "io_schedule_timeout", "bit_wait_io"})
# Why a stack is missing, as its reason says it.
_MISSING_STACK = {
    NOT_WALKED: "[not walked: a short wait]",
    NOT_WALKED_LONG: "[not walked: a long wait predicted short]",
    -errno.EEXIST: "[stack lost: collision]",
    -errno.ENOMEM: "[stack lost: map full]",
    -errno.EFAULT: "[no kernel stack]",
}
# Stacks the totals since start keep whole; past this many the rarest merge into one entry
# per (process, state) that says so. Their time stays in every total.
WAIT_STACKS_KEPT = 1000
RARE_STACKS = "[rare stacks not kept]"
NAMED_KEPT = 4096  # kernel stacks named lately, blocked and wakers each (caches)


def function_of(frame: str) -> str:
    """'do_nanosleep+0x4a' -> 'do_nanosleep'."""
    return frame.split("+", 1)[0]


def reason_of(frames: Sequence[str]) -> str:
    """The first meaningful blocking frame: past the tracing code and the scheduler's own
    functions; io_schedule named with the function that waited for the I/O."""
    functions = [function_of(f) for f in frames]
    for i, name in enumerate(functions):
        if name in _SCHEDULER or name.startswith(_TRACING_PREFIXES):
            continue
        if name in _IO_SCHEDULE:
            callers = [f for f in functions[i + 1:] if f not in _IO_SCHEDULE]
            return f"io_schedule ← {callers[0]}" if callers else "io_schedule"
        return name
    return functions[-1] if functions else ""


# x86's interrupt entries (arch/x86/include/asm/idtentry.h): DECLARE_IDTENTRY_IRQ and
# _SYSVEC make asm_common_interrupt, asm_spurious_interrupt, asm_sysvec_*; NMIs are
# asm_exc_nmi*. Every other asm_exc_* is an exception (asm_exc_page_fault, asm_exc_int3...):
# it runs in the task's own context, so its wake-ups are the task's (an OOM kill's).
_HARDIRQ_ENTRIES = ("asm_common_interrupt", "asm_spurious_interrupt", "asm_sysvec_")
_NMI_ENTRIES = ("asm_exc_nmi",)


def interrupt_of(waker_frames: Sequence[str]) -> str:
    """'[softirq]', '[hardirq]' or '[nmi]' for a wake-up whose stack ends in an interrupt's
    entry (KernelNamer cut it there), '' for a task's own (an exception's among them)."""
    if not waker_frames or not _is_interrupt_entry(waker_frames[-1]):
        return ""
    functions = {function_of(f) for f in waker_frames}
    if functions & {"handle_softirqs", "__do_softirq"}:
        return "[softirq]"
    return "[nmi]" if waker_frames[-1].startswith(_NMI_ENTRIES) else "[hardirq]"


def hist_slot_range(slot: int) -> tuple[int, int]:
    """The microseconds a slot holds, both ends inclusive: slot 0 under 1 us."""
    return (0, 0) if slot == 0 else (1 << (slot - 1), (1 << slot) - 1)


class KernelNamer:
    """Kernel stacks to frames (tracing frames cut), cached with what a fold asks of them:
    a blocked stack's reason, a waker's interrupt. Each cache keeps the NAMED_KEPT newest
    stacks: past that, the older half goes (emptied whole, a working set of more stacks
    than that was named again and again, every interval)."""

    def __init__(self, kallsyms: Kallsyms) -> None:
        self._frames = KernelFrames(kallsyms)
        self._blocked: dict[tuple[int, ...], tuple[tuple[str, ...], str]] = {}
        self._wakers: dict[tuple[int, ...], tuple[tuple[str, ...], str]] = {}
        # Wakers in interrupts by their addresses down to the interrupt's entry, and the
        # lengths those come in (a few: one per interrupt path).
        self._interrupts: dict[tuple[int, ...], tuple[tuple[str, ...], str]] = {}
        self._interrupt_lengths: list[int] = []

    def blocked(self, addresses: tuple[int, ...]) -> tuple[tuple[str, ...], str]:
        """A blocked stack's frames and its reason."""
        named = self._blocked.get(addresses)
        if named is None:
            _make_room(self._blocked)
            frames = self._name(addresses)
            named = self._blocked[addresses] = (frames, reason_of(frames))
        return named

    def waker(self, addresses: tuple[int, ...]) -> tuple[tuple[str, ...], str]:
        """A waker's frames and the interrupt it ran in ("" for a task's own)."""
        named = self._wakers.get(addresses)
        if named is not None:
            return named
        # A waker in an interrupt is a new stack for each instruction the interrupt landed
        # on, its frames the same down to the interrupt's entry: known by those addresses.
        for length in self._interrupt_lengths:
            named = self._interrupts.get(addresses[:length])
            if named is not None:
                return named
        frames, end = self._frames.named_until(addresses, _is_interrupt_entry)
        named = (frames, interrupt_of(frames))
        if named[1] and end >= TRACING_DEPTH:  # (the frames' tracing cut looks that deep)
            _make_room(self._interrupts)
            self._interrupts[addresses[:end]] = named
            if end not in self._interrupt_lengths and len(self._interrupt_lengths) < 16:
                self._interrupt_lengths.append(end)
        else:
            _make_room(self._wakers)
            self._wakers[addresses] = named
        return named

    def _name(self, addresses: tuple[int, ...]) -> tuple[str, ...]:
        """Innermost first, the tracing frames cut (the BPF program's own among them, hex
        when the kernel names no BPF symbols, as every other pane cuts them). (A waker's
        are named only down to the interrupt it ran in: what it interrupted says nothing
        about it, and a new instruction interrupted is a new stack.)"""
        return self._frames.without_tracing(addresses)[1]


def _is_interrupt_entry(frame: str) -> bool:
    return frame.startswith(_HARDIRQ_ENTRIES) or frame.startswith(_NMI_ENTRIES)


def _make_room(cache: dict) -> None:
    """Drop the older half of a full cache (a dict keeps insertion order)."""
    if len(cache) >= NAMED_KEPT:
        for key in list(itertools.islice(cache, NAMED_KEPT // 2)):
            del cache[key]


ProcKey = tuple[int, str, str]  # (pid, comm, cgroup)
StackKey = tuple[int, str, str, str, tuple[str, ...], tuple[UserFrame, ...]]
WakerKey = tuple[int, str, tuple[str, ...]]


def _trimmed(hist: Sequence[int]) -> tuple[int, ...]:
    """A histogram as the window keeps it: without its trailing empty slots (most waits fill
    a few low slots of HIST_SLOTS; a list of all of them was ~300 bytes per process per
    interval), a tuple. The collector's come trimmed already."""
    if not hist or hist[-1]:
        return tuple(hist)
    end = len(hist)
    while end and not hist[end - 1]:
        end -= 1
    return tuple(hist[:end])


def _hist_sum(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Two trimmed histograms added slot by slot (still trimmed: counts are never negative)."""
    if len(a) < len(b):
        a, b = b, a
    return (*map(add, a, b), *a[len(b):])


def _full(hist: tuple[int, ...]) -> tuple[int, ...]:
    """A trimmed histogram as profiles show it: HIST_SLOTS slots."""
    return hist + (0,) * (HIST_SLOTS - len(hist))


@dataclass(slots=True)
class _Times:
    on_cpu_ns: int = 0
    runq_ns: int = 0
    runq_count: int = 0
    blocked_ns: list[int] = field(default_factory=lambda: [0, 0, 0])
    blocked_count: int = 0
    runq_hist: tuple[int, ...] = ()  # trimmed (see _trimmed)

    def merge(self, other: _Times) -> _Times:
        self.on_cpu_ns += other.on_cpu_ns
        self.runq_ns += other.runq_ns
        self.runq_count += other.runq_count
        self.blocked_ns = list(map(add, self.blocked_ns, other.blocked_ns))
        self.blocked_count += other.blocked_count
        self.runq_hist = _hist_sum(self.runq_hist, other.runq_hist)
        return self

    def copy(self) -> _Times:
        return _Times(self.on_cpu_ns, self.runq_ns, self.runq_count, list(self.blocked_ns),
                      self.blocked_count, self.runq_hist)


@dataclass(slots=True)
class _Blocked:
    reason: str
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    hist: tuple[int, ...] = ()  # trimmed (see _trimmed)
    wakers: dict[WakerKey, list[int]] = field(default_factory=dict)  # -> [count, total_ns]
    sampled_every: int = 0  # some of its waits were a 1 in N sample, scaled (WaitStack's)

    def add(self, count: int, total_ns: int, max_ns: int, hist: Sequence[int]) -> None:
        self.count += count
        self.total_ns += total_ns
        if max_ns > self.max_ns:
            self.max_ns = max_ns
        self.hist = _hist_sum(self.hist, _trimmed(hist))

    def add_waker(self, key: WakerKey, count: int, total_ns: int) -> None:
        entry = self.wakers.get(key)
        if entry is None:
            self.wakers[key] = [count, total_ns]
        else:
            entry[0] += count
            entry[1] += total_ns

    def merge(self, other: _Blocked) -> _Blocked:
        self.add(other.count, other.total_ns, other.max_ns, other.hist)
        for key, (count, total) in other.wakers.items():
            self.add_waker(key, count, total)
        if other.sampled_every > self.sampled_every:
            self.sampled_every = other.sampled_every
        return self

    def copy(self) -> _Blocked:
        return _Blocked(self.reason, self.count, self.total_ns, self.max_ns, self.hist,
                        {key: list(entry) for key, entry in self.wakers.items()},
                        self.sampled_every)


def _times(row: BlockedStack, factor: float) -> BlockedStack:
    """A row's counts (time, waits, histogram) times `factor`, rounded."""
    return row._replace(total_ns=round(row.total_ns * factor), count=round(row.count * factor),
                        hist=_trimmed([round(n * factor) for n in row.hist]))


def _stratum(row: BlockedStack) -> tuple | None:
    """The group a row's scaling is within: (pid, comm, cgroup, state, ended long), for a
    sample (scale N) and for the not-walked rows its unsampled peers are in; None for others."""
    if row.scale > 1:
        return (row.pid, row.comm, row.cgroup, row.state, row.long_end)
    if not row.kernel and row.kernel_error in (NOT_WALKED, NOT_WALKED_LONG):
        return (row.pid, row.comm, row.cgroup, row.state, row.kernel_error == NOT_WALKED_LONG)
    return None


def scale_samples(rows: Sequence[BlockedStack]) -> list[BlockedStack]:
    """The rows of one drain with the sampled ones (scale N: a random 1 in N of their kind
    of wait walked) counted N times, and what that adds taken from the not-walked rows of the
    same process, command, cgroup and state, which counted the other N-1: each process's
    totals stay what the kernel counted. Waits predicted short that ended long are scaled
    apart from those that ended short (a few long ones scaled against many short ones made the
    estimate swing). Where the samples stand for more than the not-walked rows hold (chance),
    they are scaled by less, so that nothing is counted twice."""
    extra: dict[tuple, float] = {}  # stratum -> time the scaling adds
    lumped: dict[tuple, int] = {}  # -> not-walked time
    for row in rows:
        stratum = _stratum(row)
        if stratum is None:
            continue
        if row.scale > 1:
            extra[stratum] = extra.get(stratum, 0) + row.total_ns * (row.scale - 1)
        else:
            lumped[stratum] = lumped.get(stratum, 0) + row.total_ns
    if not extra:
        return list(rows)
    out = []
    for row in rows:
        stratum = _stratum(row)
        added = extra.get(stratum) if stratum is not None else None
        if stratum is None or added is None:
            out.append(row)
            continue
        used = min(1.0, lumped.get(stratum, 0) / added) if added else 0.0
        if row.scale > 1:
            out.append(_times(row, 1 + (row.scale - 1) * used))
        else:
            left = 1 - added * used / lumped[stratum]
            if left > 1e-9:
                out.append(_times(row, left))
    return out


@dataclass(slots=True)
class WaitCounts:
    """Waits of one interval or several: times per process, blocked waits per stack."""

    procs: dict[ProcKey, _Times] = field(default_factory=dict)
    stacks: dict[StackKey, _Blocked] = field(default_factory=dict)

    def merge(self, other: WaitCounts) -> None:
        procs, stacks = self.procs, self.stacks
        for key, times in other.procs.items():
            mine = procs.get(key)
            if mine is None:
                procs[key] = times.copy()
            else:
                mine.merge(times)
        for stack_key, blocked in other.stacks.items():
            mine_b = stacks.get(stack_key)
            if mine_b is None:
                stacks[stack_key] = blocked.copy()
            else:
                mine_b.merge(blocked)


def _merged_times(into: _Times, other: _Times) -> _Times:
    return into.merge(other)


def _merged_blocked(into: _Blocked, other: _Blocked) -> _Blocked:
    return into.merge(other)


def _merged_waker(into: list[int], other: list[int]) -> list[int]:
    return [into[0] + other[0], into[1] + other[1]]


def _merge_rare_stacks(stacks: dict[StackKey, _Blocked]) -> None:
    """Past WAIT_STACKS_KEPT stacks, the rarest (least time) down to 3/4 of it merge into
    one entry per (process, state)."""
    whole = [(b.total_ns, key) for key, b in stacks.items() if b.reason != RARE_STACKS]
    if len(whole) <= WAIT_STACKS_KEPT:
        return
    whole.sort(key=lambda entry: entry[0])
    for _, key in whole[:len(whole) - WAIT_STACKS_KEPT * 3 // 4]:
        rare_key = (*key[:4], (RARE_STACKS,), ())
        rare = stacks.get(rare_key)
        if rare is None:
            rare = stacks[rare_key] = _Blocked(RARE_STACKS)
        rare.merge(stacks.pop(key))


class WaitAggregator:
    def __init__(
        self,
        kallsyms: Kallsyms,
        window_s: float = 5.0,
        resolve_user: Callable[[int, Sequence[int]], Sequence[UserFrame]] | None = None,
        min_walk: WalkMinimums | None = None,
    ) -> None:
        self._resolve_user = resolve_user
        self.namer = KernelNamer(kallsyms)
        self._window = Window(window_s, WaitCounts, WaitCounts.merge)
        self._notes: dict[str, int] = {}
        self._min_walk = min_walk or WalkMinimums(0, 0)  # carried into profiles: unknown
        self._walk_every = (0, 1)  # the latest drain's

    def add(self, drain: WaitDrain) -> None:
        self._window.add(drain.start, drain.end, self.fold(drain), drain.lost)
        self._notes = dict(drain.notes)
        self._walk_every = drain.walk_every

    def fold(self, drain: WaitDrain) -> WaitCounts:
        counts = WaitCounts()
        procs, stacks = counts.procs, counts.stacks
        for process in drain.processes:
            key = (process.pid, process.comm, process.cgroup)
            times = _Times(
                process.on_cpu_ns, process.runq_ns, process.runq_count,
                list(process.blocked_ns), sum(process.blocked_count), _trimmed(process.runq_hist),
            )
            mine = procs.get(key)
            if mine is None:
                procs[key] = times
            else:
                mine.merge(times)
        resolve_user = self._resolve_user
        # A thread blocked in one place is a row per waker stack: its user stack is named
        # once a drain (~80 distinct of ~1,600 rows under churn).
        users: dict[tuple[int, tuple[int, ...]], tuple[UserFrame, ...]] = {}
        for row in scale_samples(drain.stacks):
            frames, reason = self._kernel(row)
            user: tuple[UserFrame, ...] = ()
            if row.user and resolve_user is not None:
                named = users.get((row.pid, row.user))
                if named is None:
                    named = users[row.pid, row.user] = tuple(resolve_user(row.pid, row.user))
                user = named
            stack_key = (row.pid, row.comm, row.cgroup, row.state, frames, user)
            blocked = stacks.get(stack_key)
            if blocked is None:
                stacks[stack_key] = _Blocked(reason, row.count, row.total_ns, row.max_ns,
                                       _trimmed(row.hist), {self._waker(row): [row.count, row.total_ns]},
                                       row.scale)
            else:
                blocked.add(row.count, row.total_ns, row.max_ns, row.hist)
                blocked.add_waker(self._waker(row), row.count, row.total_ns)
                if row.scale > blocked.sampled_every:
                    blocked.sampled_every = row.scale
        return counts

    def _waker(self, row: BlockedStack) -> WakerKey:
        if not row.waker_kernel:
            return (row.waker_pid, row.waker_comm, ())
        frames, interrupt = self.namer.waker(row.waker_kernel)
        if interrupt:  # the task it interrupted did not wake anyone
            return (0, interrupt, frames)
        return (row.waker_pid, row.waker_comm, frames)

    def _kernel(self, row: BlockedStack) -> tuple[tuple[str, ...], str]:
        if not row.kernel:
            missing = _MISSING_STACK.get(row.kernel_error, f"[no stack: {row.kernel_error}]")
            return (missing,), missing
        return self.namer.blocked(row.kernel)

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: one entry per command for processes that have exited."""
        total = self._window.total
        if crowded(total.procs, total.stacks):
            fold_exited(total.procs, is_alive, lambda key: key[0],
                        lambda key, pid: (pid, *key[1:]), _merged_times)
            fold_exited(total.stacks, is_alive, lambda key: key[0],
                        lambda key, pid: (pid, *key[1:]), _merged_blocked)
        _merge_rare_stacks(total.stacks)
        # Each stack's wakers are keyed by pid too: a shell that waits for its children is
        # woken by each one as it exits, a new waker a child.
        if sum(len(blocked.wakers) for blocked in total.stacks.values()) >= exited.FOLD_AFTER:
            for blocked in total.stacks.values():
                fold_exited(blocked.wakers, is_alive, lambda key: key[0],
                            lambda key, pid: (pid, *key[1:]), _merged_waker)

    def profile(self, cumulative: bool = False, latest: bool = False) -> WaitProfile:
        """The window's profile, the totals since start, or the newest interval's alone."""
        counts, span = self._window.latest() if latest else self._window.counts(cumulative)
        return build_profile(counts, span, self._window.lost(cumulative, latest), self._notes,
                             self._min_walk, self._walk_every)


def _wakers(wakers: dict[WakerKey, list[int]]) -> tuple[WaitWaker, ...]:
    """Most time first."""
    if len(wakers) == 1:  # most stacks: one waker
        for (pid, comm, frames), (count, total) in wakers.items():
            return (WaitWaker(pid, comm, frames, count, total),)
    return tuple(
        WaitWaker(pid, comm, frames, count, total)
        for (pid, comm, frames), (count, total) in sorted(
            wakers.items(), key=lambda kv: (-kv[1][1], kv[0][:2]))
    )


def build_profile(counts: WaitCounts, window_s: float, lost: dict[str, int],
                  notes: dict[str, int], min_walk: WalkMinimums,
                  walk_every: tuple[int, int] = (0, 1)) -> WaitProfile:
    stacks = tuple(
        WaitStack(
            pid=pid, comm=comm, cgroup=cgroup, state=state, reason=b.reason, frames=frames,
            user=user, count=b.count, total_ns=b.total_ns, max_ns=b.max_ns, hist=_full(b.hist),
            wakers=_wakers(b.wakers), sampled_every=b.sampled_every,
        )
        for (pid, comm, cgroup, state, frames, user), b in sorted(
            counts.stacks.items(), key=lambda kv: (-kv[1].total_ns, kv[0][:5]))
    )
    # Each process's reason: the one with most blocked time over its stacks (a futex wait
    # from three user stacks is one reason); on a tie the first seen, the busiest stack's.
    reasons: dict[int, dict[str, int]] = {}
    for stack in stacks:
        if not stack.reason.startswith("["):
            per = reasons.setdefault(stack.pid, {})
            per[stack.reason] = per.get(stack.reason, 0) + stack.total_ns
    top = {pid: max(per, key=per.__getitem__) for pid, per in reasons.items()}
    processes = tuple(
        WaitProcess(
            pid=pid, comm=comm, cgroup=cgroup, on_cpu_ns=t.on_cpu_ns, runq_ns=t.runq_ns,
            runq_count=t.runq_count, blocked_s_ns=t.blocked_ns[0], blocked_d_ns=t.blocked_ns[1],
            blocked_other_ns=t.blocked_ns[2], blocked_count=t.blocked_count,
            runq_hist=_full(t.runq_hist), reason=top.get(pid, ""),
        )
        for (pid, comm, cgroup), t in sorted(
            counts.procs.items(),
            key=lambda kv: (-(kv[1].runq_ns + sum(kv[1].blocked_ns)), kv[0]))
    )
    return WaitProfile(processes=processes, stacks=stacks, lost=dict(lost), notes=dict(notes),
                       min_walk_us=min_walk.s_us, min_walk_d_us=min_walk.d_us,
                       short_walk_every=walk_every[0], long_walk_every=walk_every[1],
                       window_s=window_s)


def counts_of(profile: WaitProfile) -> WaitCounts:
    """The counts a profile was built from (a recorded interval's, for replay)."""
    counts = WaitCounts()
    for p in profile.processes:
        counts.procs[(p.pid, p.comm, p.cgroup)] = _Times(
            p.on_cpu_ns, p.runq_ns, p.runq_count,
            [p.blocked_s_ns, p.blocked_d_ns, p.blocked_other_ns], p.blocked_count,
            _trimmed(p.runq_hist),
        )
    for s in profile.stacks:
        blocked = _Blocked(s.reason, s.count, s.total_ns, s.max_ns, _trimmed(s.hist),
                           sampled_every=s.sampled_every)
        for w in s.wakers:
            blocked.add_waker((w.pid, w.comm, w.frames), w.count, w.total_ns)
        stack_key = (s.pid, s.comm, s.cgroup, s.state, s.frames, s.user)
        mine = counts.stacks.get(stack_key)
        if mine is None:
            counts.stacks[stack_key] = blocked
        else:
            mine.merge(blocked)
    return counts


def merge_profiles(profiles: Sequence[WaitProfile]) -> WaitProfile:
    """Recorded intervals' profiles summed as the live window sums their counts; losses (each
    record's own) summed, notes (cumulative) from the newest."""
    counts = WaitCounts()
    for profile in profiles:
        counts.merge(counts_of(profile))
    newest = profiles[-1] if profiles else WaitProfile((), (), {})
    return build_profile(counts, sum(p.window_s for p in profiles), sum_lost(p.lost for p in profiles),
                         dict(newest.notes),
                         WalkMinimums(newest.min_walk_us, newest.min_walk_d_us),
                         (newest.short_walk_every, newest.long_walk_every))


def build(source: PaneServices) -> tuple[WaitCollector, WaitAggregator]:
    """The waits pane's collector and aggregator (ktop.registry)."""
    from ktop.collectors.waits import WaitCollector  # noqa: PLC0415

    minimum = source.options.offcpu_min
    return WaitCollector(source.options.interval_s, min_walk=minimum), WaitAggregator(
        source.kallsyms(), source.options.window_s, resolve_user=source.resolve_user,
        min_walk=minimum,
    )
