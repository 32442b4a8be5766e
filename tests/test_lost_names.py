"""The loss names ktop shows come from tuples that follow bpf/ktop.h's enums by hand: a
reason added, removed or moved in the C header must fail here, not show under a wrong name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ktop.collectors import blockio, cpu, locks

HEADER = Path(__file__).resolve().parent.parent / "bpf" / "ktop.h"


def enum_members(name: str) -> list[str]:
    """The members of `enum name` in ktop.h, in order, without the final *_NR."""
    body = re.search(rf"enum {name} \{{(.*?)\}};", HEADER.read_text(), re.S)
    assert body, f"enum {name} is not in {HEADER}"
    text = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
    members = [m.strip() for m in text.split(",") if m.strip()]
    assert members[-1].endswith("_NR"), members
    return members[:-1]


@pytest.mark.parametrize("enum, prefix, names", [
    ("cpu_lost", "CPU_LOST_", cpu.LOST_NAMES),
    ("lock_lost", "LOCK_LOST_", locks.LOST_NAMES),
    ("blk_lost", "BLK_LOST_", blockio.LOST_NAMES),
])
def test_loss_names_follow_the_c_enum_in_order(enum, prefix, names):
    members = enum_members(enum)
    assert len(names) == len(members)
    for member, name in zip(members, names):
        # Each word of the C name is in the shown name: KSTACK_FULL -> kstack_map_full.
        words = member.removeprefix(prefix).lower().split("_")
        assert set(words) <= set(name.split("_")), (member, name)
