"""The idle task's stacks, walked once and remembered in the kernel (bpf/cpu.bpf.c), on the
real kernel (root): the same stacks as walking every sample, and never an id of a stack
that user space emptied."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from conftest import root_only
from cpu_drains import counts_of

from ktop.collectors.cpu import CpuSampler
from ktop.symbolize.kernel import IdleClassifier, Kallsyms

pytestmark = [pytest.mark.live, root_only]

HZ = 99


@pytest.fixture(scope="module")
def idle():
    return IdleClassifier(Kallsyms.load())


def idling(drains, idle: IdleClassifier) -> tuple[Counter, int]:
    """Samples of the idle task idling by kernel stack, and those with no kernel stack."""
    stacks: Counter = Counter()
    empty = 0
    for drain in drains:
        for row in counts_of(drain):
            if row.pid != 0:
                continue
            if not row.kernel:
                empty += row.samples
            elif idle.is_idle(row.kernel[0]):
                stacks[row.kernel] += row.samples
    return stacks, empty


def sample(samplers: list[CpuSampler], seconds: float, every: float = 0.5) -> list[list]:
    for sampler in samplers:
        sampler.start()
    drains: list[list] = [[] for _ in samplers]
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(every)
            for mine, sampler in zip(drains, samplers):
                mine.append(sampler.drain())
    finally:
        for sampler in samplers:
            sampler.close()
    return drains


def test_remembered_idle_stacks_are_the_stacks_a_walk_finds(idle):
    # Two samplers on the same CPUs at once: one remembers the idle task's stacks, one walks
    # every sample.
    remembered, walked = sample(
        [CpuSampler(HZ, idle_code=idle.code_ranges()), CpuSampler(HZ)], seconds=3.0)
    kept, _ = idling(remembered, idle)
    found, _ = idling(walked, idle)
    assert sum(kept.values()) >= 20, "the machine never idled: nothing to compare"
    # Both saw the idle loop whole, down to where each CPU entered it.
    assert any(len(stack) >= 4 for stack in kept)
    # What was remembered is what a walk finds: every sample of it (a rare path seen by only
    # one of two independent samplers aside).
    same = sum(n for stack, n in kept.items() if stack in found)
    assert same >= 0.95 * sum(kept.values()), (kept, found)
    # And as many samples idled in each (independent timers: within noise).
    assert sum(kept.values()) == pytest.approx(sum(found.values()), rel=0.25)


def test_an_emptied_stack_map_forgets_the_idle_stacks_it_held(idle):
    # Every drain empties its generation's stack maps: a remembered key whose stack the map
    # no longer held would read back as an idle sample with no stack, counted missing.
    (drains,) = sample([CpuSampler(HZ, idle_code=idle.code_ranges())], seconds=3.0, every=0.3)
    stacks, empty = idling(drains, idle)
    assert sum(stacks.values()) >= 20, "the machine never idled: nothing to check"
    assert empty == 0
    assert drains[-1].lost["stack_missing"] == 0
