"""The CPU sampler's stacks on the real kernel (root): keyed by a hash of their frames, so a
stack keeps its key across intervals and generations and is read once; each generation's
stack maps hold one interval's stacks and are empty after its drain (nothing to collide
with, nothing left to fill them)."""

import os
import subprocess
import time

import pytest
from cpu_drains import counts_of

from ktop.collectors import cpu

KERNEL_DEPTH = 127  # a kernel stack map's frames per entry

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]


@pytest.fixture
def busy_sampler():
    sampler = cpu.CpuSampler(hz=499)
    sampler.start()
    busy = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=64k"],
                            stderr=subprocess.DEVNULL)
    yield sampler
    busy.kill()
    busy.wait()
    sampler.close()


def test_a_stack_met_again_in_either_generation_is_read_once(busy_sampler, monkeypatch):
    reads = []
    frames = cpu._DrainedStacks.frames

    def counted(self, key):
        if self._depth == KERNEL_DEPTH:  # kernel stacks, as `named` counts
            reads.append(key)
        return frames(self, key)

    monkeypatch.setattr(cpu._DrainedStacks, "frames", counted)
    named, read = [], []
    for _ in range(4):  # two of each generation
        time.sleep(0.5)
        reads.clear()
        drain = busy_sampler.drain()
        named.append(len({row.kernel for row in counts_of(drain) if row.kernel}))
        read.append(len(reads))
    assert named[-1] > 0, "no stacks were sampled"
    # dd's stacks recur: later intervals read only the stacks new to them, whichever
    # generation saw them first (the maps were emptied in between).
    assert sum(read[2:]) < sum(named[2:]), (read, named)
    assert busy_sampler.lost()["stack_missing"] == 0


def test_a_generations_stacks_are_gone_after_its_drain(busy_sampler):
    time.sleep(1.0)
    drained = busy_sampler._program.generation
    drain = busy_sampler.drain()
    assert sum(len(row.kernel) > 0 for row in counts_of(drain)) > 0, "no stacks were sampled"
    for name in (cpu.MAP_STACKS[drained], cpu.MAP_USER_STACKS[drained],
                 cpu.MAP_IDLE_STACKS[drained]):
        left = len(list(busy_sampler._program.table(name).keys()))
        assert left == 0, f"{name} still holds {left} entries after its drain"


def test_one_key_one_stack_in_every_interval(busy_sampler, monkeypatch):
    """Keys are hashes: two stacks under one key would show one's samples under the other's
    frames. Every key the kernel stack maps held in four intervals names the same frames each
    time, and the same frames always got the same key (the hash covers the frames, nothing
    else). (Kernel stacks: a user stack may hold a 0 frame, where reading stops.)"""
    drained = []

    def kept(table, _drained=cpu._drained_stacks):
        stacks = _drained(table)
        if table.name in cpu.MAP_STACKS:
            drained.append(stacks)
        return stacks

    monkeypatch.setattr(cpu, "_drained_stacks", kept)
    for _ in range(4):
        time.sleep(0.5)
        busy_sampler.drain()
    seen: dict[int, tuple] = {}
    for stacks in drained:
        for key in stacks._index:
            assert seen.setdefault(key, stacks.frames(key)) == stacks.frames(key)
    assert len(seen) > 10
    assert len(set(seen.values())) == len(seen)
