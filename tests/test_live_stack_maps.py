"""Stack map entries are read once and kept while the map keeps them; the maps never fill.

These hold on the real kernel only if a stack map never replaces an entry under an id
(no BPF_F_REUSE_STACKID) and deleting entries works (bcc 0.26's StackTrace.clear() silently
did nothing; these tests are what would catch that).
"""

import os
import subprocess
import time

import pytest
from cpu_drains import counts_of

from ktop.collectors import bpfsys, maps

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]


@pytest.fixture
def busy_sampler():
    from ktop.collectors.cpu import CpuSampler  # noqa: PLC0415

    sampler = CpuSampler(hz=499)
    sampler.start()
    busy = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=64k"],
                            stderr=subprocess.DEVNULL)
    yield sampler
    busy.kill()
    sampler.close()


def test_a_stack_kept_across_intervals_still_names_the_same_entry(busy_sampler, monkeypatch):
    from ktop.collectors.cpu import MAP_STACKS  # noqa: PLC0415

    reads = []
    def counted(table, stack_id):
        if table.name in MAP_STACKS:  # kernel stacks, as `named` counts
            reads.append(stack_id)
        return bpfsys.stack_addresses(table, stack_id)

    monkeypatch.setattr(maps, "stack_addresses", counted)
    decoded = []
    monkeypatch.setattr(busy_sampler, "_row",
                        lambda *a, _row=busy_sampler._row: decoded.append(1) or _row(*a))
    named, read, rows, decodes = [], [], [], []
    for _ in range(4):  # two of each generation
        time.sleep(0.5)
        reads.clear()
        decoded.clear()
        drain = busy_sampler.drain()
        named.append(len({row.kernel for row in counts_of(drain) if row.kernel}))
        read.append(len(reads))
        rows.append(len(counts_of(drain)))
        decodes.append(len(decoded))
    assert named[-1] > 0, "no stacks were sampled"
    # dd's stacks recur: the later intervals read only the stacks that are new to them,
    # and decode only the counters' keys new to them.
    assert sum(read[2:]) < sum(named[2:]), (read, named)
    assert sum(decodes[2:]) < sum(rows[2:]), (decodes, rows)
    # Every id kept names, in the map now, exactly the stack read for it back then.
    reader = busy_sampler._program.stacks
    for generation in (0, 1):
        table = busy_sampler._program.table(MAP_STACKS[generation])
        kept = reader._known.get(table.fd, {})
        assert kept, f"{table.name} kept nothing"
        for stack_id, stack in kept.items():
            assert bpfsys.stack_addresses(table, stack_id) == stack


def test_a_crowded_stack_map_is_emptied_after_its_drain(busy_sampler, monkeypatch):
    from ktop.collectors.cpu import MAP_STACKS, MAP_USER_STACKS  # noqa: PLC0415

    monkeypatch.setattr(maps, "CROWDED", 0.0)  # any stack at all is a crowd
    time.sleep(1.0)
    drained_generation = busy_sampler._program.generation
    drain = busy_sampler.drain()
    assert sum(len(row.kernel) > 0 for row in counts_of(drain)) > 0, "no stacks were sampled"
    for name in (MAP_STACKS[drained_generation], MAP_USER_STACKS[drained_generation]):
        table = busy_sampler._program.table(name)
        left = len(list(table.keys()))
        assert left == 0, f"{name} still holds {left} stacks after its drain"
        assert busy_sampler._program.stacks._known[table.fd] == {}
    # The keys decoded for that generation named stacks by the ids just emptied.
    assert busy_sampler._rows[drained_generation] == {}
