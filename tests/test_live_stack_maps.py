"""Over a long run the stack maps must not fill: each drain empties the generation it read.

bcc 0.26's StackTrace.clear() silently does nothing; this test is what catches that.
"""

import os
import subprocess
import time

import pytest

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]


def test_cpu_sampler_empties_the_stack_maps_it_drained():
    from ktop.collectors.cpu import MAP_STACKS, MAP_USER_STACKS, CpuSampler

    sampler = CpuSampler(hz=499)
    sampler.start()
    busy = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=64k"],
                            stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        drained_generation = sampler._program.generation
        drain = sampler.drain()
        assert sum(len(row.kernel) > 0 for row in drain.counts) > 0, "no stacks were sampled"
        for name in (MAP_STACKS[drained_generation], MAP_USER_STACKS[drained_generation]):
            left = len(list(sampler._program.table(name).keys()))
            assert left == 0, f"{name} still holds {left} stacks after its drain"
    finally:
        busy.kill()
        sampler.close()
