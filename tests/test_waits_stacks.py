"""The waits collector's stacks read by key: what is remembered of them, and what they read as."""

from __future__ import annotations

import gc
import random
import tracemalloc
from array import array

from ktop.collectors.waits import HashedStacks

DEPTH = 127  # words a stack map's value holds (the program's user stack depth)


class _StackMap:
    """A stack map as drain_columns() reads it: the keys, then the values back to back."""

    value_size = DEPTH * 8

    def __init__(self, stacks: dict[int, list[int]]) -> None:
        self._stacks = stacks

    def drain_columns(self) -> tuple[list[bytes], bytes]:
        keys = [array("q", [key]).tobytes() for key in self._stacks]
        values = b"".join(array("Q", frames + [0] * (DEPTH - len(frames))).tobytes()
                          for frames in self._stacks.values())
        self._stacks = {}
        return keys, values


def _user_stacks(count: int, frames: int) -> dict[int, list[int]]:
    rng = random.Random(7)
    return {key: [rng.randrange(0x7F0000000000, 0x7FFFFFFFFFFF) for _ in range(frames)]
            for key in range(1, count + 1)}


def test_a_user_stack_reads_as_its_frames_to_the_first_empty_word():
    stacks = _user_stacks(3, 12)
    stacks[4] = [0x7F0000001000 + i for i in range(DEPTH)]  # as deep as the map keeps
    remembered = HashedStacks(kernel=False)
    remembered.take(_StackMap({key: list(frames) for key, frames in stacks.items()}))
    for key, frames in stacks.items():
        assert remembered.read(key) == tuple(frames)
    assert remembered.read(99) == () and remembered.missing == 1
    remembered.take(_StackMap({}))  # not in the map any more: still remembered
    assert remembered.read(1) == tuple(stacks[1])


def test_remembered_user_stacks_hold_their_words_not_an_int_a_frame():
    """A user address is an int object of its own (ASLR: no two processes share them), 32
    bytes beside the tuple's 8: 8,192 remembered stacks of 20 frames held ~7 MiB that way."""
    stacks = _user_stacks(2000, 20)
    table = _StackMap(stacks)
    remembered = HashedStacks(kernel=False)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        remembered.take(table)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    frames = sum(len(f) for f in stacks.values())
    assert held < frames * 16, f"{held / frames:.0f} bytes a frame"
    assert remembered.read(2000) == tuple(stacks[2000])
