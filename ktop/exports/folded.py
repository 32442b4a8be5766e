"""Folded stacks: one line per stack, `comm;user frames;kernel frames weight`, root first.

This is what Brendan Gregg's flamegraph.pl, speedscope, inferno and Grafana Pyroscope read
(the stackcollapse format). A line's frames are separated by `;` and its weight follows the
last space, so a frame name never holds `;` (written `:`, as stackcollapse-perf.pl does) nor
whitespace (written `_`), and control characters are written as visible escapes: a process
may name itself anything, and one name must not become two frames or a second line.

Weights, as bcc's profile -f and offcputime -f give them:
- cpu: samples (each is 1/Hz s of one CPU);
- locks: wait time in microseconds;
- io: bytes submitted; io-latency: completion latency in microseconds;
- offcpu: blocked time in microseconds (the waits pane's blocking stacks, as offcputime -f).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

from ktop.model import LockCaller, Snapshot, StackSample, UserFrame, WaitStack
from ktop.registry import folded_exports
from ktop.stacktree import function_name
from ktop.text import printable

FOLDED_OF = tuple(folded_exports())  # every pane's, as ktop.registry declares them
TRUNCATED_FRAME = "[truncated]"  # stands for the outer kernel frames past the collected depth
CALLERS_DROPPED_FRAME = "[callers not kept]"  # a rare stack of the totals: its function alone

_WHITESPACE = re.compile(r"\s")


def frame_name(text: str) -> str:
    """A name made safe for one folded frame: `;` -> `:`, whitespace -> `_`, controls escaped."""
    return _WHITESPACE.sub("_", printable(text).replace(";", ":")) or "[empty]"


def kernel_frames(frames: Iterable[str]) -> list[str]:
    """Innermost-first `symbol+0xoff` frames as function names, root first."""
    return [frame_name(function_name(frame)) for frame in reversed(tuple(frames))]


def user_frames(frames: Iterable[UserFrame]) -> list[str]:
    """Innermost-first user frames as function names, root first; an unnamed one says in
    which file it is, so `[unknown]` is not all a reader learns."""
    names = []
    for frame in reversed(tuple(frames)):
        if "+" in frame.symbol:
            names.append(frame_name(function_name(frame.symbol)))
        else:
            module = frame.module if frame.module.startswith("[") else f"[{frame.module}]"
            names.append(frame_name(f"{frame.symbol} {module}"))
    return names


def folded_stacks(snapshot: Snapshot, of: str = "cpu", include_idle: bool = False) -> Counter:
    """{"comm;frame;...;leaf": weight}: stacks that fold to the same line are summed."""
    exports = folded_exports()
    if of not in exports:
        raise ValueError(f"no folded stacks of {of!r}: choose one of {', '.join(exports)}")
    lines: Counter = Counter()
    _pane, export = exports[of]
    for frames, weight in export.stacks(snapshot, include_idle):
        if weight > 0:
            lines[";".join(frames)] += weight
    return lines


def to_folded(snapshot: Snapshot, of: str = "cpu", include_idle: bool = False) -> str:
    """The folded text, heaviest stack first (flame graph tools sort it themselves)."""
    lines = folded_stacks(snapshot, of, include_idle)
    return "".join(
        f"{stack} {weight}\n" for stack, weight in sorted(lines.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def cpu_stack_frames(stack: StackSample) -> list[str]:
    """comm, user frames, kernel frames: root first."""
    kernel = kernel_frames(stack.frames)
    truncated = [TRUNCATED_FRAME] if stack.truncated else []
    if stack.callers_dropped:
        truncated.append(CALLERS_DROPPED_FRAME)
    return [frame_name(stack.comm), *user_frames(stack.user_frames), *truncated, *kernel]


def cpu_stacks(snapshot: Snapshot, include_idle: bool) -> Iterator[tuple[list[str], int]]:
    if snapshot.cpu is None:
        return
    for stack in snapshot.cpu.stacks:
        if stack.idle and not include_idle:
            continue
        if stack.frames or stack.user_frames:
            yield cpu_stack_frames(stack), stack.samples


def lock_wait_stacks(snapshot: Snapshot, include_idle: bool) -> Iterator[tuple[list[str], int]]:
    if snapshot.locks is None:
        return
    for caller in snapshot.locks.callers:
        for frames, wait_ns in lock_stacks(caller):
            yield frames, round(wait_ns / 1000)


def lock_stacks(caller: LockCaller) -> Iterator[tuple[list[str], int]]:
    """(frames root first, wait ns) of a caller's stacks, by the task that waited. A file from
    before ktop kept tasks with their stacks has the stacks alone: their root is the comm
    when one command waited there, else the lock type."""
    if caller.task_stacks:
        for stack in caller.task_stacks:
            frames = [frame_name(stack.comm), *user_frames(stack.user_frames),
                      *kernel_frames(stack.frames)]
            yield frames, stack.total_wait_ns
        return
    comms = {task.comm for task in caller.tasks}
    root = frame_name(comms.pop()) if len(comms) == 1 else frame_name(f"[{caller.type}]")
    for stack in caller.stacks:
        yield [root, *kernel_frames(stack.frames)], stack.total_wait_ns


def offcpu_stacks(snapshot: Snapshot, include_idle: bool) -> Iterator[tuple[list[str], int]]:
    if snapshot.waits is None:
        return
    for stack in snapshot.waits.stacks:
        yield wait_stack_frames(stack), round(stack.total_ns / 1000)


def wait_stack_frames(stack: WaitStack) -> list[str]:
    """comm, user frames, kernel frames of a blocked wait: root first."""
    return [frame_name(stack.comm), *user_frames(stack.user), *kernel_frames(stack.frames)]
