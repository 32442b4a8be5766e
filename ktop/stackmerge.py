"""Stacks that differ only in the offsets of the same functions, merged as `perf report` shows
them: one stack per call path, not one per instruction the sample or wait happened to land on.

Pure functions over frame strings ("symbol+0xoff"), shared by every drill-down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

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
