"""The CPU sampler's memory of stacks and counter keys, without a kernel: a stack drained
from its hash map read by key, and what is remembered bounded under churn."""

from __future__ import annotations

from array import array

from ktop.collectors.cpu import _DrainedStacks, _Remembered

KERNEL_DEPTH = 127


def drained(stacks: dict[int, tuple[int, ...]], depth: int = KERNEL_DEPTH) -> _DrainedStacks:
    """As the kernel hands a drained map over: 8-byte keys, then the values back to back,
    each cut by a 0 after its frames and an older walk's frames past it."""
    keys, values = [], b""
    for key, frames in stacks.items():
        keys.append(array("q", [key]).tobytes())
        words = [*frames, 0, *([0xDEAD] * depth)][:depth]
        values += array("Q", words).tobytes()
    return _DrainedStacks(keys, values, depth)


def test_a_stack_is_read_by_its_key_up_to_the_first_empty_slot():
    full = tuple(range(1, KERNEL_DEPTH + 1))
    stacks = drained({7: (0xFFFF1, 0xFFFF2), 1 << 62: (0xA,), 3: full})
    assert stacks.frames(7) == (0xFFFF1, 0xFFFF2)  # not the older walk's 0xDEAD behind it
    assert stacks.frames(1 << 62) == (0xA,)
    assert stacks.frames(3) == full  # as deep as the map keeps
    assert stacks.frames(8) is None  # not in this interval's map


def test_an_empty_map_holds_nothing():
    assert _DrainedStacks([], b"", KERNEL_DEPTH).frames(1) is None


def test_what_is_remembered_is_bounded_and_what_recurs_stays():
    remembered = _Remembered(kept=100)
    remembered["hot"] = "stack"
    for i in range(10_000):  # churn: a new key each time, never met again
        remembered[i] = i
        assert remembered.get("hot") == "stack"  # met again: never forgotten
    assert len(remembered) <= 2 * 100
    assert remembered.get(0) is None  # long gone
    assert remembered.get(9_999) == 9_999


def test_the_keys_remembered_are_sized_by_the_sampling_rate():
    """At 99 Hz on 2 CPUs an interval holds at most 198 keys, yet 8,192 were kept (twice over),
    under churn nearly all of processes long gone, each holding its stacks: a few intervals'
    worth is kept at low rates, the full count at high ones."""
    from ktop.collectors.cpu import ROWS_KEPT, STACKS_KEPT, CpuSampler

    low = CpuSampler(hz=99, interval_s=1.0)
    assert low._rows.kept <= 2048 and low._user_frames.kept <= 2048
    assert low._rows.kept >= 8 * 99 * low.cpus  # several intervals' worth still
    high = CpuSampler(hz=4000, interval_s=1.0)
    assert high._rows.kept == ROWS_KEPT and high._kernel_frames.kept == STACKS_KEPT
