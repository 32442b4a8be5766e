"""Stacks that differ only in the offsets of the same functions, merged as `perf report` shows
them: one stack per call path, not one per instruction the sample or wait happened to land on.

Pure functions over frame strings ("symbol+0xoff"), shared by every drill-down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from ktop.model import IoSubmitStack, LockStack, LockUserStack, StackSample, UserFrame
from ktop.stacktree import function_name

T = TypeVar("T")


def call_path(frames: Iterable[str]) -> tuple[str, ...]:
    """The functions of a stack, offsets dropped: what merged stacks have in common."""
    return tuple(function_name(f) for f in frames)


def group_by_call_path(items: Iterable[T], key: Callable[[T], object]) -> list[list[T]]:
    """Items whose `key` (built with call_path) is equal, in the order each path first came."""
    groups: dict[object, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def merged_frames(variants: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """One stack for stacks of the same call path: a frame keeps its offset where every
    variant has the same one, and reads as the bare function where they differ."""
    first = variants[0]
    return tuple(
        frame if all(v[i] == frame for v in variants[1:]) else function_name(frame)
        for i, frame in enumerate(first)
    )


def merge_cpu_stacks(stacks: Sequence[StackSample]) -> list[tuple[StackSample, int]]:
    """Stacks of one process whose kernel and user frames differ only in offsets, as one
    (with how many there were), most samples first."""
    merged = []
    for group in group_by_call_path(
        stacks,
        lambda s: (s.pid, s.comm, s.truncated, s.callers_dropped, call_path(s.frames),
                   call_path(f.symbol for f in s.user_frames)),
    ):
        first = group[0]
        users = merged_frames([[f.symbol for f in s.user_frames] for s in group])
        merged.append((
            replace(
                first,
                samples=sum(s.samples for s in group),
                frames=merged_frames([s.frames for s in group]),
                sources=tuple(
                    source if all(s.sources[i] == source for s in group if s.sources) else ""
                    for i, source in enumerate(first.sources)
                ),
                user_frames=tuple(UserFrame(name, f.module)
                                  for name, f in zip(users, first.user_frames)),
            ),
            len(group),
        ))
    return sorted(merged, key=lambda pair: -pair[0].samples)


def merge_lock_stacks(stacks: Sequence[LockStack]) -> list[tuple[LockStack, int]]:
    """Kernel stacks of the same functions as one (with how many there were), most wait first."""
    merged = [
        (LockStack(merged_frames([s.frames for s in group]),
                   sum(s.contended for s in group), sum(s.total_wait_ns for s in group),
                   max(s.max_wait_ns for s in group)), len(group))
        for group in group_by_call_path(stacks, lambda s: call_path(s.frames))
    ]
    return sorted(merged, key=lambda pair: -pair[0].total_wait_ns)


def merge_lock_user_stacks(stacks: Sequence[LockUserStack]) -> list[tuple[LockUserStack, int]]:
    merged = []
    for group in group_by_call_path(stacks, lambda s: call_path(f.symbol for f in s.frames)):
        names = merged_frames([[f.symbol for f in s.frames] for s in group])
        frames = tuple(UserFrame(name, f.module) for name, f in zip(names, group[0].frames))
        merged.append((LockUserStack(frames, sum(s.contended for s in group),
                                     sum(s.total_wait_ns for s in group)), len(group)))
    return sorted(merged, key=lambda pair: -pair[0].total_wait_ns)


def merge_io_stacks(stacks: Sequence[IoSubmitStack]) -> list[tuple[IoSubmitStack, int]]:
    merged = [
        (IoSubmitStack(merged_frames([s.frames for s in group]), sum(s.requests for s in group)),
         len(group))
        for group in group_by_call_path(stacks, lambda s: call_path(s.frames))
    ]
    return sorted(merged, key=lambda pair: -pair[0].requests)


