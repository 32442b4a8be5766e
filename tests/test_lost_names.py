"""The loss names ktop shows come from one catalogue (ktop.losses) that follows every BPF C
enum of losses by hand: a reason added, removed or moved in any C file of bpf/ must fail
here, not show under a wrong name; and every loss a collector counts has its reason."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ktop import losses
from ktop.collectors import cpu, locks, waits
from ktop.panes.blockio import collector as blockio
from ktop.panes.endings import collector as endings
from ktop.panes.irqs import collector as irqs
from ktop.registry import PANES, bpf_panes
from ktop.ui.widgets.header import loss_lines

ROOT = Path(__file__).resolve().parent.parent
BPF = ROOT / "bpf"
COLLECTORS = ROOT / "ktop" / "collectors"
PANES_DIR = ROOT / "ktop" / "panes"
ENUM = re.compile(r"enum (\w+_lost) \{(.*?)\};", re.S)


def loss_enums() -> dict[str, list[str]]:
    """Every `enum *_lost` of every C file in bpf/ (headers and programs), its members in
    order without the final *_NR."""
    enums: dict[str, list[str]] = {}
    for path in sorted([*BPF.glob("*.h"), *BPF.glob("*.c")]):
        for name, body in ENUM.findall(path.read_text()):
            text = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
            members = [m.split("=")[0].strip() for m in text.split(",") if m.strip()]
            assert members[-1].endswith("_NR"), (path.name, name, members)
            assert name not in enums, f"enum {name} twice"
            enums[name] = members[:-1]
    return enums


def test_the_c_headers_hold_an_enum_of_losses_per_bpf_pane():
    enums = loss_enums()
    assert set(enums) == {"cpu_lost", "blk_lost", "lock_lost", "wait_lost",
                          "syscalls_lost", "ending_lost", "irqs_lost", "memory_lost"}, enums


def test_the_catalogue_follows_every_c_enum_in_order():
    """Each C enum is one pane's `lost` array, index by index; nothing in C left out, nothing
    in the catalogue that C does not count."""
    in_c = loss_enums()
    catalogued = {loss.enum for loss in losses.CATALOGUE if loss.enum}
    assert catalogued == {m for members in in_c.values() for m in members}
    for members in in_c.values():
        (pane,) = {loss.pane for loss in losses.CATALOGUE if loss.enum in members}
        by_enum = {loss.enum: loss.name for loss in losses.CATALOGUE if loss.pane == pane}
        assert losses.kernel_names(pane) == tuple(by_enum[m] for m in members), pane
        for member in members:
            # Each word of the C name is in the shown name: KSTACK_FULL -> kstack_map_full.
            words = member.split("_LOST_", 1)[1].lower().split("_")
            assert set(words) <= set(by_enum[member].split("_")), (member, by_enum[member])


@pytest.mark.parametrize("module, pane", [
    (cpu, "functions"), (locks, "locks"), (blockio, "blockio"), (waits, "waits"),
    (endings, "endings"),
    (irqs, "irqs"),
])
def test_each_collector_reads_its_lost_array_by_the_catalogue(module, pane):
    assert module.LOST_NAMES == losses.kernel_names(pane)


def test_the_waits_notes_are_the_catalogues():
    assert waits.NOT_LOSSES == losses.note_names("waits") == ("unseen_start",
                                                             "long_wait_unwalked")


def test_every_loss_a_collector_counts_in_python_is_catalogued():
    """The names the collectors add to their program's counters (`totals["name"] = ...`),
    and those the shared two-generation program adds for each of them."""
    shared = re.findall(r'totals\["(\w+)"\]', (COLLECTORS / "maps.py").read_text())
    assert shared == ["stack_missing", "recursion_misses"]
    for path, pane in ((COLLECTORS / "cpu.py", "functions"), (COLLECTORS / "locks.py", "locks"),
                       (PANES_DIR / "blockio" / "collector.py", "blockio"),
                       (COLLECTORS / "waits.py", "waits")):
        own = re.findall(r'totals\["(\w+)"\]', path.read_text())
        for name in [*shared, *own]:
            assert losses.loss(pane, name) is not None, (pane, name)
    engine = (ROOT / "ktop" / "engine.py").read_text()
    assert '"binary_unread"' in engine and losses.loss("functions", "binary_unread")


def test_every_catalogued_loss_is_explained_on_l_as_catalogued(recorded_snapshot):
    """L's line for each loss is its catalogue reason, never the fallback: the block I/O
    pane's totals_map_full, hist_map_full and stack_counts_map_full read "counted by the
    BPF program" while the header's reasons were written for other names."""
    by_pane = {spec.name: spec for spec in PANES}
    for spec in bpf_panes():
        lost = {loss.name: 1 for loss in losses.CATALOGUE if loss.pane == spec.name
                and not loss.note}
        assert lost, spec.name
        profile = dataclasses.replace(getattr(recorded_snapshot, spec.field) or _empty(spec),
                                      lost=lost)
        snapshot = dataclasses.replace(recorded_snapshot, **{spec.field: profile})
        lines = {(pane, name): (why, intact) for pane, name, _n, why, intact
                 in loss_lines(snapshot) if pane == by_pane[spec.name].numbered_title}
        for name in lost:
            why, intact = lines[(spec.numbered_title, name)]
            assert why == losses.reason(spec.name, name) != losses.UNKNOWN_REASON, name
            assert intact == losses.counts_intact(spec.name, name)


def _empty(spec):
    from ktop.model import WaitProfile
    from ktop.panes.endings.model import EndingsProfile
    from ktop.panes.syscalls.model import SyscallProfile

    if spec.name == "endings":
        return EndingsProfile(lost={}, endings=(), signals=(), counts=(), exits=0, oom_kills=0)
    if spec.name == "syscalls":
        return SyscallProfile(calls=(), slow=(), lost={})
    assert spec.name == "waits"  # the panes the recorded fixture lacks
    return WaitProfile(processes=(), stacks=(), lost={})
