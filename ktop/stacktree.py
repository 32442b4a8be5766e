"""Callers and callees trees of one function, folded from whole sampled stacks.

Callers (perf top -g, caller mode): the function at the root, each level the functions that
called the level above, with their share of the function's samples. Callees: the function at
the root, each level what it called, down to where the samples landed.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ktop.model import NOT_CODE, HotFunction, StackSample, UserFrame

TRUNCATED = "[truncated: deeper than the collected depth]"
CALLERS_DROPPED = "[callers not kept: a rare stack of the totals since start]"


def function_name(frame: str) -> str:
    """'vfs_read+0x9a' -> 'vfs_read'; a bare hex address stays as it is."""
    return frame.split("+", 1)[0]


@dataclass(slots=True)
class StackNode:
    name: str
    samples: int = 0
    user: bool = False  # a user-space frame (below the kernel frames)
    children: dict[str, StackNode] = field(default_factory=dict)

    def child(self, name: str, user: bool = False) -> StackNode:
        key = ("u:" if user else "k:") + name
        node = self.children.get(key)
        if node is None:
            node = self.children[key] = StackNode(name, user=user)
        return node

    def sorted_children(self) -> list[StackNode]:
        return sorted(self.children.values(), key=lambda n: (-n.samples, n.name))

    def to_json(self, total: int) -> dict[str, Any]:
        return {
            "symbol": self.name,
            "user": self.user,
            "samples": self.samples,
            "percent": round(100.0 * self.samples / total, 2) if total else 0.0,
            "children": [c.to_json(total) for c in self.sorted_children()],
        }


def _chain(stack: StackSample) -> list[tuple[str, bool]]:
    """Innermost-first frames as (name, is_user): kernel frames, then user frames."""
    chain = [(function_name(f), False) for f in stack.frames]
    if stack.truncated:
        chain.append((TRUNCATED, False))
    if stack.callers_dropped:
        chain.append((CALLERS_DROPPED, False))
    for frame in stack.user_frames:
        if frame.module == NOT_CODE:  # one node for every stack walk that went astray
            chain.append((NOT_CODE, True))
        elif "+" in frame.symbol:
            chain.append((frame.symbol.split("+", 1)[0], True))
        else:  # unnamed: say in which file, so "[unknown]" is not all the user learns
            module = frame.module if frame.module.startswith("[") else f"[{frame.module}]"
            chain.append((f"{frame.symbol} {module}", True))
    return chain


def callers_tree(function: str, stacks: Iterable[StackSample]) -> StackNode:
    """Stacks whose innermost frame is `function`, folded outward from it."""
    root = StackNode(function)
    for stack in stacks:
        if not stack.frames or function_name(stack.frames[0]) != function:
            continue
        root.samples += stack.samples
        node = root
        for name, user in _chain(stack)[1:]:
            node = node.child(name, user)
            node.samples += stack.samples
    return root


def callees_tree(function: str, stacks: Iterable[StackSample]) -> StackNode:
    """Stacks that pass through `function` (outermost occurrence), folded inward to the leaf."""
    root = StackNode(function)
    for stack in stacks:
        names = [function_name(f) for f in stack.frames]
        if function not in names:
            continue
        root.samples += stack.samples
        node = root
        # The outermost occurrence, so recursion counts once.
        position = len(names) - 1 - names[::-1].index(function)
        for name in reversed(names[:position]):
            node = node.child(name)
            node.samples += stack.samples
    return root


def processes_hitting(function: str, stacks: Iterable[StackSample]) -> list[tuple[int, str, int]]:
    """(pid, comm, samples) of the processes whose samples landed in `function`."""
    totals: dict[tuple[int, str], int] = {}
    for stack in stacks:
        if stack.frames and function_name(stack.frames[0]) == function:
            key = (stack.pid, stack.comm)
            totals[key] = totals.get(key, 0) + stack.samples
    return sorted(((p, c, n) for (p, c), n in totals.items()), key=lambda r: (-r[2], r[0]))


def unique_stacks(function: str, stacks: Iterable[StackSample]) -> list[StackSample]:
    """Every whole stack that landed in `function`, most samples first."""
    hits = [s for s in stacks if s.frames and function_name(s.frames[0]) == function]
    return sorted(hits, key=lambda s: -s.samples)


# A function that only calls (no sample landed in it) is listed when at least this share of
# the expected samples passed through it: at 4000 Hz a stack's every caller would otherwise
# be a row, each refresh.
CALLER_MIN_SHARE = 0.001


def hot_functions(stacks: Iterable[StackSample], expected_samples: float) -> tuple[HotFunction, ...]:
    """Samples folded by the function they landed in (the innermost kernel frame), most first;
    percent is the share of `expected_samples` (Hz x window x CPUs): of machine CPU time.
    Children counts the samples whose kernel stack holds the function anywhere (perf's
    --children), once per stack however often it recurs."""
    selfs, idle_selfs, children, idle_children = function_counts(stacks)
    return ranked_functions(selfs, set(idle_selfs), expected_samples, children, idle_children)


def function_counts(stacks: Iterable[StackSample]) -> tuple[Counter, Counter, Counter, Counter]:
    """Samples by the (function, module) they landed in and through each (Self and
    Children), and of each the idle task's idling: what the CPU aggregator counts per
    interval, from named stacks."""
    selfs: Counter = Counter()
    idle_selfs: Counter = Counter()
    passed: dict[frozenset, list[int]] = {}  # a stack's functions -> [all samples, idle samples]
    for stack in stacks:
        if not stack.frames:
            continue
        key = (function_name(stack.frames[0]), stack.modules[0] if stack.modules else "")
        selfs[key] += stack.samples
        if stack.idle:
            idle_selfs[key] += stack.samples
        counts = passed.setdefault(kernel_functions(stack.frames, stack.modules), [0, 0])
        counts[0] += stack.samples
        counts[1] += stack.samples if stack.idle else 0
    return (selfs, idle_selfs, *inclusive_counts(passed))


def kernel_functions(frames: Sequence[str], modules: Sequence[str]) -> frozenset:
    """The distinct (function, module) of a stack's kernel frames."""
    if not modules:
        modules = ("",) * len(frames)
    return frozenset((function_name(f), m) for f, m in zip(frames, modules))


def inclusive_counts(passed: dict[Any, list[int]]) -> tuple[Counter, Counter]:
    """Samples, and idle samples, through each function, from [samples, idle samples] of each
    distinct set of functions a stack holds (many stacks share a set: counting sets first
    is cheaper)."""
    children: Counter = Counter()
    idle: Counter = Counter()
    for functions, (samples, idle_samples) in passed.items():
        for function in functions:
            children[function] += samples
        if idle_samples:
            for function in functions:
                idle[function] += idle_samples
    return children, idle


def ranked_functions(
    totals: dict[tuple[str, str], int],
    idle: set[tuple[str, str]],
    expected_samples: float,
    children: Mapping[tuple[str, str], int] | None = None,
    idle_children: Mapping[tuple[str, str], int] | None = None,
) -> tuple[HotFunction, ...]:
    """HotFunctions from samples by (function, module), most first; with `children` (samples
    through each function, `idle_children` those of the idle task idling), the functions
    samples only passed through too (Self 0), those with CALLER_MIN_SHARE of the expected
    samples or more."""
    children = children or {}
    idle_children = idle_children or {}
    rows = dict(totals)
    floor = CALLER_MIN_SHARE * expected_samples
    callers = {key for key, n in children.items() if key not in totals and n >= floor}
    rows.update((key, 0) for key in callers)
    # A caller is idle when every sample through it was the idle task idling.
    idle = idle | {key for key in callers if children[key] == idle_children.get(key, 0)}
    scale = 100.0 / expected_samples if expected_samples else 0.0
    return tuple(
        HotFunction(
            symbol=symbol,
            module=module,
            samples=samples,
            percent=samples * scale,
            idle=(symbol, module) in idle,
            children=inclusive,
            children_percent=inclusive * scale,
            idle_children=idle_children.get((symbol, module), 0),
        )
        for (symbol, module), samples, inclusive in sorted(
            ((key, n, max(children.get(key, n), n)) for key, n in rows.items()),
            key=lambda row: (-row[1], -row[2], row[0]),
        )
    )


@functools.lru_cache(maxsize=16384)  # the same frames come back in every stack, each refresh
def user_function(frame: UserFrame) -> tuple[str, str]:
    """(function, module) of a user frame; an unnamed one is its file's [unknown]."""
    if "+" in frame.symbol:
        return function_name(frame.symbol), frame.module
    return "[unknown]", frame.module


def user_functions(stacks: Iterable[StackSample], expected_samples: float) -> tuple[HotFunction, ...]:
    """Hot user-space functions, as perf top shows them beside kernel ones: Self the samples
    taken while running in the function (no kernel frames), Children those whose user stack
    holds it anywhere (a system call's caller too)."""
    totals: dict[tuple[str, str], int] = {}
    passed: dict[frozenset, list[int]] = {}
    for stack in stacks:
        frames = stack.user_frames
        if frames and frames[-1].module == NOT_CODE:
            frames = frames[:-1]  # the marker, always last
        if not frames:
            continue
        if not stack.frames:
            key = user_function(frames[0])
            totals[key] = totals.get(key, 0) + stack.samples
        counts = passed.get(functions := frozenset(map(user_function, frames)))
        if counts is None:
            passed[functions] = [stack.samples, 0]
        else:
            counts[0] += stack.samples
    return ranked_functions(totals, set(), expected_samples, *inclusive_counts(passed))


def comm_functions(
    stacks: Iterable[StackSample], expected_samples: float
) -> list[tuple[str, HotFunction]]:
    """(comm, function) rows, as `perf top --sort comm,sym`: where each command's samples
    landed, in the kernel or in user space; most samples first."""
    totals: dict[tuple[str, str, str], list] = {}
    for stack in stacks:
        if stack.frames:
            function = (function_name(stack.frames[0]), stack.modules[0] if stack.modules else "")
        elif stack.user_frames and stack.user_frames[0].module != NOT_CODE:
            function = user_function(stack.user_frames[0])
        else:
            continue
        row = totals.setdefault((stack.comm, *function), [0, stack.idle])
        row[0] += stack.samples
        row[1] = row[1] and stack.idle
    scale = 100.0 / expected_samples if expected_samples else 0.0
    return [
        (comm, HotFunction(symbol, module, n, n * scale, idle, n, n * scale))
        for (comm, symbol, module), (n, idle) in sorted(
            totals.items(), key=lambda kv: (-kv[1][0], kv[0])
        )
    ]
