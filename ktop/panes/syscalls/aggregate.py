"""Fold drained syscall counts into the pane's profile over a window of recent seconds.

Replay goes through the same fold: `merge_profiles` rebuilds each recorded interval's counts
from its profile (`counts_of`) and sums them with the merge the live window uses."""

from __future__ import annotations

import errno as errno_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import add
from typing import TYPE_CHECKING

from ktop.aggregate.exited import crowded, fold_exited
from ktop.aggregate.window import Window, sum_lost
from ktop.model import UserFrame
from ktop.panes.syscalls.model import HIST_SLOTS, SlowSyscalls, SyscallProfile, SyscallStat
from ktop.panes.syscalls.table import errno_name, syscall_name
from ktop.symbolize.frames import KernelFrames

if TYPE_CHECKING:
    from ktop.panedef import PaneServices
    from ktop.panes.syscalls.collector import SyscallCollector, SyscallDrain
    from ktop.symbolize.kernel import Kallsyms

NOT_WALKED = -errno_module.ENOENT
# Why a slow call has no kernel stack, as its one frame says.
_MISSING_STACK = {
    NOT_WALKED: "[not walked: it never slept, or slept where a short call was expected]",
    -errno_module.ENOMEM: "[stack lost: map full]",
    -errno_module.EFAULT: "[no kernel stack]",
}
SLOW_KEPT = 1000  # slow-call entries the totals since start keep; the rarest merge past it
RARE_STACKS = "[rare stacks not kept]"

# (pid, tid, comm, cgroup, syscall, errno)
CallKey = tuple[int, int, str, str, str, str]
SlowKey = tuple[int, int, str, str, str, str, tuple[str, ...], tuple[UserFrame, ...]]


@dataclass(slots=True)
class Calls:
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * HIST_SLOTS)

    def add(self, count: int, total_ns: int, max_ns: int, hist: Sequence[int]) -> None:
        self.count += count
        self.total_ns += total_ns
        if max_ns > self.max_ns:
            self.max_ns = max_ns
        if any(hist):
            self.hist = list(map(add, self.hist, hist))

    def merged(self, other: Calls) -> Calls:
        self.add(other.count, other.total_ns, other.max_ns, other.hist)
        return self

    def copy(self) -> Calls:
        return Calls(self.count, self.total_ns, self.max_ns, list(self.hist))


@dataclass(slots=True)
class SyscallCounts:
    """One interval's or several: calls per thread, syscall and errno; slow calls by stack."""

    calls: dict[CallKey, Calls] = field(default_factory=dict)
    slow: dict[SlowKey, Calls] = field(default_factory=dict)

    def merge(self, other: SyscallCounts) -> None:
        for mine, theirs in ((self.calls, other.calls), (self.slow, other.slow)):
            for key, calls in theirs.items():
                entry = mine.get(key)  # type: ignore[call-overload]
                if entry is None:
                    mine[key] = calls.copy()  # type: ignore[index]
                else:
                    entry.merged(calls)


def _merge_rare(slow: dict[SlowKey, Calls]) -> None:
    """Past SLOW_KEPT slow-call entries, the rarest (least time) down to 3/4 of it merge into
    one per (process, thread, syscall, errno) that says so."""
    whole = [(c.total_ns, key) for key, c in slow.items() if key[6] != (RARE_STACKS,)]
    if len(whole) <= SLOW_KEPT:
        return
    whole.sort(key=lambda entry: entry[0])
    for _, key in whole[:len(whole) - SLOW_KEPT * 3 // 4]:
        rare_key = (*key[:6], (RARE_STACKS,), ())
        rare = slow.get(rare_key)
        if rare is None:
            rare = slow[rare_key] = Calls()
        rare.merged(slow.pop(key))


class SyscallAggregator:
    def __init__(self, kallsyms: Kallsyms | None, window_s: float = 5.0,
                 resolve_user: Callable[[int, Sequence[int]], Sequence[UserFrame]] | None = None,
                 slow_ns: int = 0) -> None:
        self._frames = KernelFrames(kallsyms)
        self._named: dict[tuple[int, ...], tuple[str, ...]] = {}
        self._resolve_user = resolve_user
        self._window = Window(window_s, SyscallCounts, SyscallCounts.merge)
        self._notes: dict[str, int] = {}
        self.slow_ns = slow_ns

    def add(self, drain: SyscallDrain) -> None:
        self._window.add(drain.start, drain.end, self.fold(drain), drain.lost)
        self._notes = dict(drain.notes)

    def _kernel(self, addresses: tuple[int, ...], error: int) -> tuple[str, ...]:
        if not addresses:
            missing = _MISSING_STACK.get(error, f"[no stack: {error}]")
            return (missing,)
        named = self._named.get(addresses)
        if named is None:
            if len(self._named) > 4096:
                self._named.clear()
            named = self._named[addresses] = self._frames.without_tracing(addresses)[1]
        return named

    def fold(self, drain: SyscallDrain) -> SyscallCounts:
        counts = SyscallCounts()
        calls, slow = counts.calls, counts.slow
        for row in drain.calls:
            key = (row.pid, row.tid, row.comm, row.cgroup, syscall_name(row.nr, row.abi),
                   errno_name(row.err) if row.err else "")
            entry = calls.get(key)
            if entry is None:
                entry = calls[key] = Calls()
            entry.add(row.count, row.total_ns, row.max_ns, row.hist)
        resolve = self._resolve_user
        for s in drain.slow:
            user: tuple[UserFrame, ...] = ()
            if s.user and resolve is not None:
                user = tuple(resolve(s.pid, s.user))
            slow_key = (s.pid, s.tid, s.comm, s.cgroup, syscall_name(s.nr, s.abi),
                        errno_name(s.err) if s.err else "", self._kernel(s.kernel, s.kernel_error),
                        user)
            entry = slow.get(slow_key)
            if entry is None:
                entry = slow[slow_key] = Calls()
            entry.add(s.count, s.total_ns, s.max_ns, s.hist)
        return counts

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: one entry per command (and thread -1) for exited processes."""
        total = self._window.total
        if crowded(total.calls, total.slow):
            fold_exited(total.calls, is_alive, lambda key: key[0],
                        lambda key, pid: (pid, pid, *key[2:]), Calls.merged)
            fold_exited(total.slow, is_alive, lambda key: key[0],
                        lambda key, pid: (pid, pid, *key[2:]), Calls.merged)
        _merge_rare(total.slow)

    def profile(self, cumulative: bool = False, latest: bool = False) -> SyscallProfile:
        counts, span = self._window.latest() if latest else self._window.counts(cumulative)
        return build_profile(counts, span, self._window.lost(cumulative, latest), self._notes,
                             self.slow_ns)


def build_profile(counts: SyscallCounts, window_s: float, lost: dict[str, int],
                  notes: dict[str, int], slow_ns: int) -> SyscallProfile:
    calls = tuple(
        SyscallStat(pid=pid, tid=tid, comm=comm, cgroup=cgroup, syscall=syscall, errno=err,
                    count=c.count, total_ns=c.total_ns, max_ns=c.max_ns, hist=tuple(c.hist))
        for (pid, tid, comm, cgroup, syscall, err), c in sorted(
            counts.calls.items(), key=lambda kv: (-kv[1].total_ns, kv[0]))
    )
    slow = tuple(
        SlowSyscalls(pid=pid, tid=tid, comm=comm, cgroup=cgroup, syscall=syscall, errno=err,
                     frames=frames, user=user, count=c.count, total_ns=c.total_ns,
                     max_ns=c.max_ns, hist=tuple(c.hist))
        for (pid, tid, comm, cgroup, syscall, err, frames, user), c in sorted(
            counts.slow.items(), key=lambda kv: (-kv[1].total_ns, kv[0][:6]))
    )
    return SyscallProfile(calls=calls, slow=slow, lost=dict(lost), notes=dict(notes),
                          slow_ns=slow_ns, window_s=window_s)


def counts_of(profile: SyscallProfile) -> SyscallCounts:
    """The counts a profile was built from (a recorded interval's, for replay)."""
    counts = SyscallCounts()
    for c in profile.calls:
        key = (c.pid, c.tid, c.comm, c.cgroup, c.syscall, c.errno)
        counts.calls.setdefault(key, Calls()).add(c.count, c.total_ns, c.max_ns, c.hist)
    for s in profile.slow:
        slow_key = (s.pid, s.tid, s.comm, s.cgroup, s.syscall, s.errno, s.frames, s.user)
        counts.slow.setdefault(slow_key, Calls()).add(s.count, s.total_ns, s.max_ns, s.hist)
    return counts


def merge_profiles(profiles: Sequence[SyscallProfile]) -> SyscallProfile:
    """Recorded intervals summed as the live window sums them; losses (each record's own)
    summed, notes (cumulative) from the newest."""
    counts = SyscallCounts()
    for profile in profiles:
        counts.merge(counts_of(profile))
    newest = profiles[-1] if profiles else SyscallProfile((), (), {})
    return build_profile(counts, sum(p.window_s for p in profiles),
                         sum_lost(p.lost for p in profiles), dict(newest.notes), newest.slow_ns)


def build(source: PaneServices) -> tuple[SyscallCollector, SyscallAggregator]:
    """The syscalls pane's collector and aggregator (ktop.registry)."""
    from ktop.panes.syscalls.collector import DEFAULT_SLOW_NS, SyscallCollector  # noqa: PLC0415

    return SyscallCollector(DEFAULT_SLOW_NS), SyscallAggregator(
        source.kallsyms(), source.options.window_s, resolve_user=source.resolve_user,
        slow_ns=DEFAULT_SLOW_NS)
