"""Fold drained CPU samples into the hot-functions profile over a window of recent seconds."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from ktop.aggregate.exited import crowded, fold_exited, forget_addresses
from ktop.aggregate.window import Window, sum_lost
from ktop.collectors.cpu import MAX_STACK_DEPTH, CpuDrain, StackRow
from ktop.collectors.procstat import CpuTicks, merge_times, ticks_of
from ktop.model import EXITED_PID, OWN_USER_STACK, BuiltOnRead, CpuProfile, StackSample, UserFrame
from ktop.stacktree import function_counts, function_name, inclusive_counts, ranked_functions
from ktop.symbolize.kernel import IdleClassifier, Kallsyms

if TYPE_CHECKING:
    from ktop.collectors.cpu import CpuSampler
    from ktop.panedef import PaneServices

# Resolves one process's user addresses while it is alive: (pid, addresses) -> frames.
UserResolver = Callable[[int, Sequence[int]], Sequence[UserFrame]]
# Kernel address -> "file:line" from a debug vmlinux, or None.
LineLookup = Callable[[int], "str | None"]

# Drains between sweeps of the rows an aggregator knows the numbers of (see CpuAggregator).
ROWS_FORGOTTEN_EVERY = 10
# Whole stacks the totals since start keep. Distinct stacks never stop coming (at 4000 Hz
# ~25 a second, a new innermost instruction under known callers; at 99 Hz under process
# churn ~6, a new path through fork, exec and exit), each ~1.5 KB: past this many, the
# rarest keep only the function they landed in (a fold every 10 s takes them down to 3/4 of
# it). Self and Children are counted per function and stay exact; the window is never cut.
STACKS_KEPT = 1000
# Cut entries (one per process and function) the totals keep: long-lived processes land in
# new functions without end, and each exited command keeps its own. Past this many, the
# rarest merge across processes into one per function (OTHER_PROCESSES); Self and Children
# stay exact, only the process those rare samples came from is not kept.
CUT_KEPT = 500
OTHER_PROCESSES = "[rare: processes merged]"
# Kernel stacks whose functions stay named once no stack number holds them (a new process
# on a known kernel path finds them): under churn most numbers are forgotten within
# seconds, and each named set of functions is 0.7-2.3 KB.
NAMED_SPARE = 256
CUT = "callers dropped"  # ends the identity of a cut stack (a row's identity ends in a bool)


class _StackKey(NamedTuple):
    """What a stack number stands for. Kernel frames stay addresses until the stacks are
    read (kallsyms does not change); user frames are named at once, while the process lives.
    (A named tuple: at 4000 Hz some 800 new stacks an interval, made in C.)"""

    pid: int
    comm: str
    kernel: tuple[int, ...]  # innermost first
    user_frames: tuple[UserFrame, ...]
    user_mode: bool
    idle: bool
    function: tuple[str, str] | None  # (function, module) of the innermost kernel frame
    sources: tuple[str, ...]  # file:line per kernel frame, with a debug vmlinux
    cgroup: str = ""
    callers_dropped: bool = False  # a rare stack of the totals: the function it landed in
    truncated: bool = False  # as deep as the sampler walks: outer frames may be missing


class _StackIds:
    """Each distinct stack numbered once, by its raw addresses: the window counts samples by
    number (its counters hash small ints, in C), and a stack seen again finds its number in
    one lookup. Stacks whose addresses differ but whose names agree are merged when read."""

    def __init__(self) -> None:
        self.numbers: dict[tuple, int] = {}  # identity -> number
        self.keys: dict[int, _StackKey] = {}
        self._identities: dict[int, tuple] = {}
        self._next = 0
        # The functions of each stack's kernel frames, named once (for Children): one set
        # object for all the stacks that hold the same functions.
        self.functions: dict[int, frozenset] = {}
        self.idle: set[int] = set()  # the numbers of the idle task's stacks in idle functions
        # Kernel addresses -> their functions: ~6 stacks (pids, user stacks) share each kernel
        # stack at 4000 Hz, so each is named once, not once per stack that holds it.
        self._by_kernel: dict[tuple[int, ...], frozenset] = {}
        # Each distinct set of functions, once: stacks that differ only in instructions (at
        # 4000 Hz most new stacks are a new leaf instruction under known callers) share it,
        # where each held a copy (~430 bytes) for as long as the totals keep the stack.
        self._function_sets: dict[frozenset, frozenset] = {}
        # How many numbered stacks each pid has: whether any process they name has exited
        # is asked per pid, not found by walking every stack (see CpuAggregator.fold_exited).
        self.pids: Counter = Counter()
        self.cut = 0  # numbers of cut stacks (the totals hold every one: keep_only drops the rest)

    def add(self, identity: tuple, key: _StackKey) -> int:
        number = self.numbers[identity] = self._next
        self.keys[number], self._identities[number] = key, identity
        self.pids[key.pid] += 1
        self.cut += key.callers_dropped
        self._next += 1
        return number

    def number(self, identity: tuple, key: _StackKey) -> int:
        found = self.numbers.get(identity)
        return self.add(identity, key) if found is None else found

    def keep_only(self, used: set[int]) -> None:
        """Forget the numbers no counter holds any more (folded, or out of the window)."""
        for gone in [n for n in self.keys if n not in used]:
            pid = self.keys[gone].pid
            self.cut -= self.keys[gone].callers_dropped
            self.pids[pid] -= 1
            if not self.pids[pid]:
                del self.pids[pid]
            del self.keys[gone], self.numbers[self._identities.pop(gone)]
            self.functions.pop(gone, None)
            self.idle.discard(gone)
        if len(self._by_kernel) > len(self.functions) + NAMED_SPARE:
            self._by_kernel = {self.keys[n].kernel: f for n, f in self.functions.items()}
            self._function_sets = {f: f for f in self._by_kernel.values()}

    def functions_of(self, number: int, function_at: Callable[[int], tuple[str, str]]) -> frozenset:
        found = self.functions.get(number)
        if found is None:
            kernel = self.keys[number].kernel
            found = self._by_kernel.get(kernel)
            if found is None:
                found = frozenset(map(function_at, kernel))
                found = self._by_kernel[kernel] = self._function_sets.setdefault(found, found)
            self.functions[number] = found
            if self.keys[number].idle:
                self.idle.add(number)
        return found


@dataclass(slots=True)
class _Samples:
    """Samples of one interval or several: by stack, and /proc/stat's ticks over them."""

    stacks: Counter = field(default_factory=Counter)
    ticks: CpuTicks = field(default_factory=CpuTicks)
    # Samples through each (function, module) of the kernel stacks, and the idle task's
    # idling among them: counted per interval, so a refresh only sums the window's.
    children: Counter = field(default_factory=Counter)
    idle_children: Counter = field(default_factory=Counter)
    # Samples whose innermost kernel frame is each (function, module) (perf's Self), the idle
    # task's idling among them, and the user-mode and idling samples: also per interval, so
    # a refresh does not walk the window's thousands of stacks to count them.
    selfs: Counter = field(default_factory=Counter)
    idle_selfs: Counter = field(default_factory=Counter)
    user: int = 0
    idle: int = 0

    def merge(self, other: _Samples) -> None:
        self.stacks.update(other.stacks)
        self.ticks = self.ticks + other.ticks
        self.children.update(other.children)
        self.idle_children.update(other.idle_children)
        self.selfs.update(other.selfs)
        self.idle_selfs.update(other.idle_selfs)
        self.user += other.user
        self.idle += other.idle

    def subtract(self, other: _Samples) -> None:
        for mine, theirs in ((self.stacks, other.stacks), (self.children, other.children),
                             (self.idle_children, other.idle_children),
                             (self.selfs, other.selfs), (self.idle_selfs, other.idle_selfs)):
            mine.subtract(theirs)
            for key in theirs:
                if mine[key] <= 0:
                    del mine[key]
        self.ticks = self.ticks - other.ticks
        self.user -= other.user
        self.idle -= other.idle


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
        # The sampler's rows -> their numbers, by identity (StackRow). Rows not met for
        # ROWS_FORGOTTEN_EVERY to twice that many drains are dropped: the sampler makes new
        # ones for the same keys after emptying its maps, and the old would be kept forever.
        self._rows: dict[StackRow, int] = {}
        self._rows_before: dict[StackRow, int] = {}
        self._drained = 0
        # Each (function, module) once, for the sets of functions to share (as many as the
        # kernel functions met; an address no symbol covers is not kept).
        self._functions: dict[tuple[str, str], tuple[str, str]] = {}

    def _function_at(self, address: int) -> tuple[str, str]:
        """(function, module) of a kernel address, as a stack's leaf is named."""
        resolved = self._kallsyms.lookup(address)  # memoized there
        if resolved is None:
            return f"{address:#x}", "[unknown]"
        function = (resolved.name, resolved.module)
        return self._functions.setdefault(function, function)

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
        counted: dict[int, int] = {}  # (a dict: a Counter's missing keys cost a call each)
        rows = self._rows
        number_of = rows.get
        for row, samples in zip(drain.rows, drain.samples):
            number = number_of(row)
            if number is None:
                number = rows[row] = self._number(row)
            counted[number] = counted.get(number, 0) + samples
        self._drained += 1
        if self._drained % ROWS_FORGOTTEN_EVERY == 0:
            self._rows_before, self._rows = self._rows, {}
        stacks = Counter(counted)
        children, idle_children = self._children(stacks)
        self._window.add(drain.start, drain.end, _Samples(
            stacks, drain.ticks, children, idle_children, *self._selfs(stacks)), drain.lost)
        # Cut as soon as past the cap (~200 new stacks a second under churn), not at the next
        # fold: what is cut then was held up to 10 s, thousands of stacks at a time.
        if len(self._window.total.stacks) - self._ids.cut > STACKS_KEPT:
            self._forget_dropped(self._drop_rare_callers(self._window.total.stacks))

    def _number(self, row: StackRow) -> int:
        """The number of a row first met since the last sweep: the one it had before, or that
        of the stacks it names (the sampler makes new rows for the same keys after emptying
        its maps, and a test's drains are new rows each time)."""
        number = self._rows_before.get(row)
        if number is None:
            identity = row.identity()
            number = self._ids.numbers.get(identity)
            if number is None:
                number = self._ids.add(identity, self._stack_key(row))
        return number

    def _children(self, stacks: Counter) -> tuple[Counter, Counter]:
        """One interval's samples through each kernel function (perf's Children)."""
        ids = self._ids
        known = ids.functions.get
        passed: dict[frozenset, list[int]] = {}  # the functions of a stack -> [samples, idle]
        for number, n in stacks.items():
            functions = known(number)
            if functions is None:  # (an empty set, of a stack with no kernel frames, is known)
                functions = ids.functions_of(number, self._function_at)
            counts = passed.get(functions)
            if counts is None:
                passed[functions] = [n, 0]
            else:
                counts[0] += n
        for number in ids.idle & stacks.keys():
            passed[ids.functions[number]][1] += stacks[number]
        return inclusive_counts(passed)

    def _selfs(self, stacks: Counter) -> tuple[Counter, Counter, int, int]:
        """One interval's samples by innermost kernel function (and the idle task's idling
        among them), and its user-mode and idling samples."""
        keys = self._ids.keys
        selfs: dict[tuple[str, str], int] = {}
        idle_selfs: dict[tuple[str, str], int] = {}
        user = idle = 0
        for number, n in stacks.items():
            key = keys[number]
            if key.user_mode:
                user += n
            elif key.idle:
                idle += n
            function = key.function
            if function is not None:
                selfs[function] = selfs.get(function, 0) + n
                if key.idle:
                    idle_selfs[function] = idle_selfs.get(function, 0) + n
        return Counter(selfs), Counter(idle_selfs), user, idle

    def _stack_key(self, row: StackRow) -> _StackKey:
        kernel = row.kernel
        user_frames: tuple[UserFrame, ...] = ()
        if row.own:  # ktop's own: the sampler walked no user stack
            user_frames = (OWN_USER_STACK,)
        elif row.user and self._resolve_user and row.pid:
            user_frames = tuple(self._resolve_user(row.pid, row.user))  # memoized per process
        function = None
        if kernel:
            text, module = self._frame(kernel[0])
            function = (function_name(text), module)
        return _StackKey(
            pid=row.pid,
            comm=row.comm,
            kernel=kernel,
            user_frames=user_frames,
            user_mode=row.user_mode,
            idle=row.pid == 0 and bool(kernel) and self._idle.is_idle(kernel[0]),
            function=function,
            # The line table reads the debug ELF: only ever from this thread.
            sources=tuple(self._source(a, i == 0) for i, a in enumerate(kernel))
            if self._source_line
            else (),
            cgroup=row.cgroup,
            truncated=len(kernel) >= MAX_STACK_DEPTH,
        )

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: one entry per command for processes that have exited, and
        past STACKS_KEPT the rarest stacks cut to the function they landed in. Once crowded, the
        totals stay crowded while the processes that fill them live: the stacks are walked
        for the exited only when a process they name has exited (12,800 stacks: 9 ms a fold
        for nothing, every 10 s)."""
        stacks = self._window.total.stacks
        folded = False
        if crowded(stacks) and any(pid > 0 and not is_alive(pid) for pid in self._ids.pids):
            keys = self._ids.keys

            def exited(number: int, pid: int) -> int:
                key = keys[number]
                return self._number_of(key._replace(
                    pid=pid, user_frames=forget_addresses(key.user_frames)))

            fold_exited(stacks, is_alive, lambda n: keys[n].pid, exited, operator.add)
            folded = True
        cut = self._drop_rare_callers(stacks)
        self._forget_dropped(self._merge_rare_cuts(stacks) or cut or folded)

    def _forget_dropped(self, changed: bool) -> None:
        """After the totals folded or cut: the numbers and rows no count holds any more go."""
        if changed:
            stacks = self._window.total.stacks
            self._ids.keep_only(set(stacks) | set(self._window.recent().stacks))
            kept = self._ids.keys
            self._rows = {row: n for row, n in self._rows.items() if n in kept}
            self._rows_before = {row: n for row, n in self._rows_before.items() if n in kept}

    def _drop_rare_callers(self, stacks: Counter) -> bool:
        """Past STACKS_KEPT whole stacks in the totals, the rarest (fewest samples) keep only
        the function their samples landed in: one entry per process (command, once exited)
        and function, which says its callers were not kept. (Per instruction, these entries
        grew without end too: a new instruction a second under churn.) True if any was cut."""
        keys = self._ids.keys
        whole = [n for n in stacks if not keys[n].callers_dropped]
        if len(whole) <= STACKS_KEPT:
            return False
        whole.sort(key=stacks.__getitem__)
        for number in whole[:len(whole) - STACKS_KEPT * 3 // 4]:
            key = keys[number]
            cut = self._number_of(key._replace(
                kernel=tuple(map(self._function_start, key.kernel[:1])), user_frames=(),
                sources=(), callers_dropped=True, truncated=False))
            stacks[cut] += stacks.pop(number)
        return True

    def _merge_rare_cuts(self, stacks: Counter) -> bool:
        """Past CUT_KEPT cut entries of processes, the rarest (down to 3/4 of it) merge into
        one entry per function for all processes (OTHER_PROCESSES, as if exited). The idle
        task's idling stays its own (it is shown or hidden as idle). True if any merged."""
        keys = self._ids.keys
        cut = [n for n in stacks if keys[n].callers_dropped and keys[n].comm != OTHER_PROCESSES
               and not keys[n].idle]
        if len(cut) <= CUT_KEPT:
            return False
        cut.sort(key=stacks.__getitem__)
        for number in cut[:len(cut) - CUT_KEPT * 3 // 4]:
            merged = self._number_of(keys[number]._replace(pid=EXITED_PID, comm=OTHER_PROCESSES))
            stacks[merged] += stacks.pop(number)
        return True

    def _number_of(self, key: _StackKey) -> int:
        """The number of a key the totals made (folded or cut), not a sampled row's: by its
        named user frames, and marked when cut (a row's identity ends in a bool)."""
        identity = (key.pid, key.comm, key.kernel, key.user_frames, key.user_mode, key.cgroup,
                    *((CUT,) if key.callers_dropped else ()))
        return self._ids.number(identity, key)

    def _function_start(self, address: int) -> int:
        resolved = self._kallsyms.lookup(address)
        return address - resolved.offset if resolved else address

    def profile(self, cumulative: bool = False, latest: bool = False) -> CpuProfile:
        """The window's profile, or the totals since start, or (latest) the newest interval's
        alone, as a recording keeps it."""
        if latest:
            samples, window_s = self._window.latest()
            cumulative = False
        else:
            samples, window_s = self._window.counts(cumulative)
        return build_profile(samples, window_s, self.hz, self.cpus,
                             self._window.lost(cumulative, latest), cumulative,
                             self._ids.keys, self._frame, self.line_info)


def _stack_samples(
    counted: list[tuple[_StackKey, int]], name: Callable[[int], tuple[str, str]]
) -> tuple[StackSample, ...]:
    """The stacks with kernel or user frames, named, those named alike merged, most samples
    first."""
    merged: dict[tuple, int] = {}
    for key, samples in counted:
        named = [name(a) for a in key.kernel]
        if key.callers_dropped:  # the function alone: its instructions were merged
            named = [(function_name(text), module) for text, module in named]
        if not named and not key.user_frames:
            continue
        identity = (key.pid, key.comm, tuple(n[0] for n in named), tuple(n[1] for n in named),
                    key.user_frames, key.truncated, key.idle, key.sources,
                    key.cgroup, key.callers_dropped)
        merged[identity] = merged.get(identity, 0) + samples
    return tuple(
        StackSample(pid=pid, comm=comm, samples=samples, frames=frames, modules=modules,
                    sources=sources, user_frames=user_frames, truncated=truncated, idle=idle,
                    cgroup=cgroup, callers_dropped=dropped)
        for (pid, comm, frames, modules, user_frames, truncated, idle, sources, cgroup,
             dropped), samples
        in sorted(merged.items(), key=lambda kv: -kv[1])
    )


def build_profile(
    samples: _Samples,
    window_s: float,
    hz: int,
    cpus: int,
    lost: dict[str, int],
    cumulative: bool,
    keys: dict[int, _StackKey],
    name: Callable[[int], tuple[str, str]],
    line_info: str = "",
) -> CpuProfile:
    """samples: counted by stack number, with the sums per function its intervals made;
    keys: the key of each number; name: a kernel address's (symbol+0xoff, module). The hot
    functions are counted now; the StackSamples are built when first read, from the keys
    and counts taken here (the keys of stacks folded later are gone by then)."""
    stacks = samples.stacks
    counted = list(zip(map(keys.__getitem__, stacks), stacks.values()))
    idle, user = samples.idle, samples.user
    total = sum(stacks.values())
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
        functions=ranked_functions(samples.selfs, set(samples.idle_selfs), hz * window_s * cpus,
                                   samples.children, samples.idle_children),
        stacks=BuiltOnRead(lambda: _stack_samples(counted, name)),
        times=samples.ticks.shares(),
        line_info=line_info,
    )


def _counted(profile: CpuProfile, ids: _StackIds, addresses: dict[tuple[str, str], int]) -> _Samples:
    """A recorded interval's profile back to the counts the live window keeps: each named
    kernel frame stands for an address of its own (`addresses`), each stack is numbered in
    `ids`, and the sums per function are counted from the stacks, as the sampler's are."""
    stacks: Counter = Counter()
    for s in profile.stacks:
        modules = s.modules or ("",) * len(s.frames)
        kernel = tuple(addresses.setdefault(frame, len(addresses))
                       for frame in zip(s.frames, modules))
        key = _StackKey(pid=s.pid, comm=s.comm, kernel=kernel, user_frames=s.user_frames,
                        user_mode=False, idle=s.idle, function=None, sources=s.sources,
                        cgroup=s.cgroup, callers_dropped=s.callers_dropped, truncated=s.truncated)
        stacks[ids.number(key, key)] += s.samples
    unnamed = profile.total_samples - sum(stacks.values())
    if unnamed > 0:  # samples of stacks with no frame at all: in the total, listed nowhere
        stacks[ids.number(_NO_FRAMES, _NO_FRAMES)] += unnamed
    selfs, idle_selfs, children, idle_children = function_counts(profile.stacks)
    return _Samples(stacks, ticks_of(profile.times), children, idle_children, selfs, idle_selfs,
                    profile.user_samples, profile.idle_samples)


_NO_FRAMES = _StackKey(pid=0, comm="", kernel=(), user_frames=(), user_mode=False, idle=False,
                       function=None, sources=())


def merge_profiles(profiles: Sequence[CpuProfile]) -> CpuProfile:
    """Recorded intervals, oldest first, as the live window sums them: each counted back,
    summed by the window's own merge, built by build_profile; losses (each record's own)
    summed."""
    ids = _StackIds()
    addresses: dict[tuple[str, str], int] = {}
    merged = _Samples()
    for profile in profiles:
        merged.merge(_counted(profile, ids, addresses))
    frames = {address: frame for frame, address in addresses.items()}
    newest = profiles[-1]
    built = build_profile(merged, sum(p.window_s for p in profiles), newest.sample_hz,
                          newest.cpus, sum_lost(p.lost for p in profiles), False, ids.keys, frames.__getitem__,
                          newest.line_info)
    if not all(p.times.ticks for p in profiles):  # recorded before ticks were kept
        built = replace(built, times=merge_times([p.times for p in profiles],
                                                 [p.window_s for p in profiles]))
    return built


def build(source: PaneServices) -> tuple[CpuSampler, CpuAggregator]:
    """The hot functions pane's sampler and aggregator (ktop.registry)."""
    from ktop.collectors import loader  # noqa: PLC0415
    from ktop.collectors.cpu import CpuSampler  # noqa: PLC0415

    options = source.options
    kallsyms = source.kallsyms()
    sampler = CpuSampler(options.hz, options.interval_s,
                         idle_code=IdleClassifier(kallsyms).code_ranges(),
                         compiler_pid=loader.compiler_pid())
    lines, line_info = source.kernel_lines()
    return sampler, CpuAggregator(
        kallsyms, sampler.hz, sampler.cpus, options.window_s, source.resolve_user,
        source_line=lines.lookup if lines else None, line_info=line_info,
    )
