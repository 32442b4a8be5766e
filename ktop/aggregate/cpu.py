"""Fold drained CPU samples into the hot-functions profile over a window of recent seconds."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ktop.aggregate.exited import crowded, fold_exited, forget_addresses
from ktop.aggregate.window import Window
from ktop.collectors.cpu import MAX_STACK_DEPTH, CpuDrain
from ktop.collectors.procstat import CpuTicks
from ktop.model import CpuProfile, StackSample, UserFrame
from ktop.stacktree import hot_functions
from ktop.symbols import IdleClassifier, Kallsyms

# Resolves one process's user addresses while it is alive: (pid, addresses) -> frames.
UserResolver = Callable[[int, Sequence[int]], Sequence[UserFrame]]
# Kernel address -> "file:line" from a debug vmlinux, or None.
LineLookup = Callable[[int], "str | None"]


KEYS_KEPT = 10  # intervals a stack stays named after it was last seen


@dataclass(frozen=True)
class _StackKey:
    pid: int
    comm: str
    frames: tuple[str, ...]
    modules: tuple[str, ...]
    sources: tuple[str, ...]
    user_frames: tuple[UserFrame, ...]
    truncated: bool
    idle: bool
    user_mode: bool


class _StackIds:
    """Each distinct stack key numbered once. The window counts samples by number: its
    counters hash small ints, in C, where hashing nine tuples in Python on every update
    (some 12,000 an interval at 4000 Hz) was a fifth of the aggregation."""

    def __init__(self) -> None:
        self._ids: dict[_StackKey, int] = {}
        self.keys: dict[int, _StackKey] = {}
        self._next = 0

    def number(self, key: _StackKey) -> int:
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self._next
            self.keys[found] = key
            self._next += 1
        return found

    def keep_only(self, used: set[int]) -> None:
        """Forget the numbers no counter holds any more (folded, or out of the window)."""
        for gone in [n for n in self.keys if n not in used]:
            del self._ids[self.keys.pop(gone)]


@dataclass
class _Samples:
    """Samples of one interval or several: by stack, and /proc/stat's ticks over them."""

    stacks: Counter = field(default_factory=Counter)
    ticks: CpuTicks = field(default_factory=CpuTicks)

    def merge(self, other: _Samples) -> None:
        self.stacks.update(other.stacks)
        self.ticks = self.ticks + other.ticks

    def subtract(self, other: _Samples) -> None:
        self.stacks.subtract(other.stacks)
        for key in other.stacks:
            if self.stacks[key] <= 0:
                del self.stacks[key]
        self.ticks = self.ticks - other.ticks


class CpuAggregator:
    def __init__(
        self,
        kallsyms: Kallsyms,
        hz: int,
        cpus: int,
        window_s: float = 5.0,
        resolve_user: UserResolver | None = None,
        source_line: LineLookup | None = None,
        line_info: str = "",
    ) -> None:
        self._kallsyms = kallsyms
        self._idle = IdleClassifier(kallsyms)
        self.hz, self.cpus = hz, cpus
        self._resolve_user = resolve_user
        self._source_line = source_line
        self.line_info = line_info
        self._window = Window(window_s, _Samples, _Samples.merge, _Samples.subtract)
        self._ids = _StackIds()
        # Stacks named lately, by raw addresses -> (number, the interval that last saw it).
        self._keys: dict[tuple, tuple[int, int]] = {}
        self._intervals = 0
        self._made_window: dict[int, StackSample] = {}
        self._made_cumulative: dict[int, StackSample] = {}
        self._lost: dict[str, int] = {}

    def _frame(self, address: int) -> tuple[str, str]:
        resolved = self._kallsyms.lookup(address)  # memoized there
        return (str(resolved), resolved.module) if resolved else (f"{address:#x}", "[unknown]")

    def _source(self, address: int, innermost: bool) -> str:
        """file:line of a frame; a return address points after the call, so step back one.
        (The line table memoizes its lookups.)"""
        if self._source_line is None:
            return ""
        return self._source_line(address if innermost else address - 1) or ""

    def add(self, drain: CpuDrain) -> None:
        stacks: Counter = Counter()
        self._intervals += 1
        keys = self._keys
        for row in drain.counts:
            # Most stacks come back within seconds: name each once while it does.
            raw = (row.pid, row.comm, row.kernel, row.user, row.user_mode)
            known = keys.get(raw)
            number = known[0] if known else self._ids.number(self._stack_key(row))
            keys[raw] = (number, self._intervals)
            stacks[number] += row.samples
        if self._intervals % KEYS_KEPT == 0:
            oldest = self._intervals - KEYS_KEPT
            self._keys = {raw: kept for raw, kept in keys.items() if kept[1] > oldest}
        self._window.add(drain.start, drain.end, _Samples(stacks, drain.ticks))
        self._lost = dict(drain.lost)

    def _stack_key(self, row) -> _StackKey:
        frames = [self._frame(a) for a in row.kernel]
        user_frames: tuple[UserFrame, ...] = ()
        if row.user and self._resolve_user and row.pid:
            user_frames = tuple(self._resolve_user(row.pid, row.user))
        return _StackKey(
            pid=row.pid,
            comm=row.comm,
            frames=tuple(f[0] for f in frames),
            modules=tuple(f[1] for f in frames),
            sources=tuple(self._source(a, i == 0) for i, a in enumerate(row.kernel))
            if self._source_line
            else (),
            user_frames=user_frames,
            truncated=len(row.kernel) >= MAX_STACK_DEPTH,
            idle=row.pid == 0 and bool(row.kernel) and self._idle.is_idle(row.kernel[0]),
            user_mode=row.user_mode,
        )

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: one entry per command for processes that have exited."""
        stacks = self._window.total.stacks
        if crowded(stacks):
            keys = self._ids.keys
            fold_exited(stacks, is_alive, lambda n: keys[n].pid,
                        lambda n, pid: self._ids.number(_exited(keys[n], pid)), operator.add)
            self._ids.keep_only(set(stacks) | set(self._window.recent().stacks)
                                | {number for number, _ in self._keys.values()})

    def profile(self, cumulative: bool = False, latest: bool = False) -> CpuProfile:
        """The window's profile, or the totals since start, or (latest) the newest interval's
        alone, as a recording keeps it."""
        if latest:
            samples, window_s = self._window.latest()
            return replace(build_profile(samples.stacks, window_s, self.hz, self.cpus, self._lost,
                                         samples.ticks, False, {}, self._ids.keys),
                           line_info=self.line_info)
        samples, window_s = self._window.counts(cumulative)
        made = self._made_cumulative if cumulative else self._made_window
        profile = build_profile(samples.stacks, window_s, self.hz, self.cpus, self._lost,
                                samples.ticks, cumulative, made, self._ids.keys)
        for key in [k for k in made if k not in samples.stacks]:  # gone from the window
            del made[key]
        return replace(profile, line_info=self.line_info)


def _sample(made: dict, number: int, key: _StackKey, samples: int) -> StackSample:
    sample = made.get(number)
    if sample is None or sample.samples != samples:
        sample = made[number] = StackSample(
            pid=key.pid,
            comm=key.comm,
            samples=samples,
            frames=key.frames,
            modules=key.modules,
            sources=key.sources,
            user_frames=key.user_frames,
            truncated=key.truncated,
            idle=key.idle,
        )
    return sample


def _exited(key: _StackKey, pid: int) -> _StackKey:
    return replace(key, pid=pid, user_frames=forget_addresses(key.user_frames))


def build_profile(
    stacks: Counter,
    window_s: float,
    hz: int,
    cpus: int,
    lost: dict[str, int],
    ticks: CpuTicks,
    cumulative: bool,
    made: dict[int, StackSample],
    keys: dict[int, _StackKey],
) -> CpuProfile:
    """stacks: samples by stack number; keys: the key of each number. made: the
    StackSamples of the previous build, reused where the count is the same (most stacks in
    a window keep theirs from one refresh to the next)."""
    key_of = keys.__getitem__
    total = sum(stacks.values())
    idle = user = 0
    for number, n in stacks.items():
        key = key_of(number)
        if key.user_mode:
            user += n
        elif key.idle:
            idle += n
    stack_rows = tuple(
        _sample(made, number, key, samples)
        for number, samples in sorted(stacks.items(), key=lambda kv: -kv[1])
        if (key := key_of(number)).frames or key.user_frames
    )
    functions = hot_functions(stack_rows, hz * window_s * cpus)
    return CpuProfile(
        sample_hz=hz,
        cpus=cpus,
        window_s=window_s,
        cumulative=cumulative,
        total_samples=total,
        idle_samples=idle,
        kernel_samples=total - idle - user,
        user_samples=user,
        lost=dict(lost),
        functions=functions,
        stacks=stack_rows,
        times=ticks.shares(),
    )
