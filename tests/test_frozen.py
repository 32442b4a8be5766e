"""quick_init: frozen rows built fast, still frozen, with the dataclass's own signature."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from ktop.frozen import quick_init
from ktop.model import WaitWaker


@quick_init
@dataclass(frozen=True, slots=True)
class Row:
    name: str
    count: int = 1
    seen: tuple[int, ...] = field(default_factory=tuple)
    notes: dict[str, int] = field(default_factory=dict)


def test_a_quick_row_takes_the_same_arguments_and_defaults_as_the_dataclass():
    assert Row("a") == Row(name="a", count=1, seen=(), notes={})
    assert Row("a", 3, (1,)).seen == (1,)
    assert Row("a").notes is not Row("a").notes  # a factory's default is made each time
    with pytest.raises(TypeError):
        Row()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Row("a", nothing=1)  # type: ignore[call-arg]


def test_a_quick_row_stays_frozen_hashable_and_copyable():
    row = Row("a", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.count = 3  # type: ignore[misc]
    assert dataclasses.replace(row, count=3) == Row("a", 3)
    assert pickle.loads(pickle.dumps(row)) == row
    waker = WaitWaker(pid=1, comm="w", frames=("futex_wake+0x1",), count=2, total_ns=3)
    assert hash(waker) == hash(WaitWaker(1, "w", ("futex_wake+0x1",), 2, 3))


def test_only_frozen_slotted_dataclasses_are_taken():
    @dataclass(frozen=True)
    class Plain:
        x: int

    with pytest.raises(TypeError, match="Plain: quick_init is for frozen, slotted"):
        quick_init(Plain)
