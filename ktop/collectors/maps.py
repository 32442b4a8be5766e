"""What every collector does with its program's maps: two generations, stacks, losses."""

from __future__ import annotations

import time

from ktop.collectors.bpfsys import BpfMap, recursion_misses, stack_addresses
from ktop.collectors.loader import LoadedProgram


def program_misses(program: LoadedProgram) -> int:
    """Skipped runs of every loaded function of a program (events it never saw)."""
    return sum(recursion_misses(fd) for fd in program.programs.values())


def flip_generation(table: BpfMap, generation: int) -> float:
    """Point the programs at the other map generation; the time of the flip ends the interval.

    A program that read the old generation just before may still be writing it: wait a
    moment before draining (programs run for microseconds)."""
    table[0] = generation
    flipped = time.monotonic()
    time.sleep(0.001)
    return flipped


def sum_lost(table: BpfMap, names: tuple[str, ...]) -> dict[str, int]:
    """A per-CPU array of loss counters, summed over CPUs, by the reasons' names in order."""
    counters = {key.value: sum(per_cpu) for key, per_cpu in table.snapshot()}
    return {name: counters.get(i, 0) for i, name in enumerate(names)}


class StackReader:
    """Reads the stacks of one drained generation, each id once. An id whose entry is gone
    (cleared or overwritten under us) reads as no frames and is counted, never invented."""

    def __init__(self) -> None:
        self.missing = 0  # cumulative
        self._read: dict[tuple[int, int], tuple[int, ...]] = {}

    def next_drain(self) -> None:
        self._read.clear()  # ids are only meaningful within one generation

    def read(self, table: BpfMap, stack_id: int) -> tuple[int, ...]:
        if stack_id < 0:
            return ()
        key = (table.fd, stack_id)
        if key not in self._read:
            try:
                self._read[key] = stack_addresses(table, stack_id)
            except KeyError:
                self.missing += 1
                self._read[key] = ()
        return self._read[key]


# Every collector's program declares these two maps under these names.
MAP_GENERATION = "generation"  # one u32: which generation the programs fill now
MAP_LOST = "lost"  # per-CPU counters, indexed by the program's enum of loss reasons


class TwoGenerationProgram:
    """A loaded program whose per-interval maps come in two generations (`name_0`,
    `name_1`): the BPF programs fill one while user space drains and empties the other."""

    def __init__(self, program: LoadedProgram, lost_names: tuple[str, ...]) -> None:
        self.program = program
        self.generation = 0
        self.stacks = StackReader()
        self._lost_names = lost_names

    def table(self, name: str) -> BpfMap:
        return self.program.maps[name]

    def swap(self) -> tuple[int, float]:
        """(the generation to drain now, the time the interval ended)."""
        drained = self.generation
        self.generation ^= 1
        end = flip_generation(self.table(MAP_GENERATION), self.generation)
        self.stacks.next_drain()
        return drained, end

    def lost(self) -> dict[str, int]:
        """Cumulative losses: the program's own counters, stacks gone before we read them,
        and runs the kernel skipped because another BPF program was running on that CPU."""
        totals = sum_lost(self.table(MAP_LOST), self._lost_names)
        totals["stack_missing"] = self.stacks.missing
        totals["recursion_misses"] = program_misses(self.program)
        return totals

    def close(self) -> None:
        self.program.close()
