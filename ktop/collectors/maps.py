"""What every collector does with its program's maps: two generations, stacks, losses."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

from ktop.collectors.bpfsys import BpfMap, recursion_misses, stack_addresses
from ktop.collectors.loader import LoadedProgram

_MEMBARRIER = {"x86_64": 324, "aarch64": 283}.get(os.uname().machine)  # __NR_membarrier
_MEMBARRIER_CMD_GLOBAL = 1


def wait_for_programs() -> None:
    """Return once every BPF program running now has finished: one that read the old
    generation word just before a flip may still be adding to the old maps, and an add to
    an element already drained and deleted is lost without a trace. The kernel runs a
    (non-sleepable) program inside an RCU read-side section, and membarrier(GLOBAL) waits
    for an RCU grace period (8-16 ms here), however long the program was preempted or its
    vCPU stalled. Where membarrier refuses (nohz_full), a moment's sleep, as before."""
    if _MEMBARRIER is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(_MEMBARRIER, _MEMBARRIER_CMD_GLOBAL, 0, 0) == 0:
            return
    time.sleep(0.001)


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


def forget_entries(table: BpfMap, gone: Callable[[Any, Any], bool]) -> int:
    """Delete the entries `gone(key, value)` says will never be ended by the program (their
    thread exited unseen): a bounded map must not fill with leftovers. How many went."""
    forgotten = 0
    for key, value in list(table.items()):
        if gone(key, value):
            try:
                del table[key]
                forgotten += 1
            except KeyError:
                pass  # the program ended it meanwhile
    return forgotten


# A stack map is emptied when this share of its entries is taken (a new stack that hashes
# to a taken bucket is lost, counted as a collision), or after STACKS_KEPT_S (for entries
# ktop never heard of: a sample whose counter found no room). Each emptying means reading
# again every stack still in use: at 4000 Hz, emptying every 10 s doubled the stack reads
# (154 -> 71 an interval) and deleted ~200 entries an interval for nothing.
CROWDED = 1 / 32
STACKS_KEPT_S = 60.0
# Kernel addresses shared by the stacks read (see StackReader.read), at most this many (the
# kernel's text is a bounded set; more means an unusual machine, and sharing starts over).
ADDRESSES_SHARED = 32768
_ADDRESSES: dict[int, int] = {}  # every collector's (read in the one collect thread)


class SharedAddresses:
    """Each kernel address read, as one int object: stacks that differ in one frame share
    the others' (a 20-frame stack held ~640 bytes of ints of its own, and at 4000 Hz the
    totals since start gain ~25 new stacks a second, most a new innermost instruction under
    callers already seen). One table for every collector: the panes walk the same kernel
    paths (each pane's own table held the same addresses again, up to the bound each)."""

    def __init__(self, addresses: dict[int, int] | None = None) -> None:
        self._addresses = _ADDRESSES if addresses is None else addresses

    def __call__(self, stack: tuple[int, ...]) -> tuple[int, ...]:
        shared = self._addresses
        if len(shared) > ADDRESSES_SHARED:
            shared.clear()
        return tuple(map(shared.setdefault, stack, stack))


class StackReader:
    """Reads stack map entries by id, each once for as long as the map keeps it.

    A stack map never replaces an entry (ktop's programs do not pass BPF_F_REUSE_STACKID:
    a different stack hashing to a taken bucket gets -EEXIST), and only user space deletes
    entries. So an id names the same stack until ktop empties the map, and the names of the
    stacks a workload keeps coming back to are read once, not once per interval: at 4000 Hz
    that was 500 lookups and 1000 more system calls to empty the maps, every second.
    An id whose entry is gone reads as no frames and is counted, never invented."""

    def __init__(self) -> None:
        self.missing = 0  # cumulative
        self._known: dict[int, dict[int, tuple[int, ...]]] = {}  # map fd -> id -> stack
        self._emptied: dict[int, float] = {}  # map fd -> when
        self._shared = SharedAddresses()

    def read(self, table: BpfMap, stack_id: int, kernel: bool = False) -> tuple[int, ...]:
        """kernel: the stack's addresses are kernel text, each shared as one int object by
        every stack read that holds it (user addresses change with every new process)."""
        if stack_id < 0:
            return ()
        known = self._known.get(table.fd)
        if known is None:
            known = self._known[table.fd] = {}
        stack = known.get(stack_id)
        if stack is None:
            try:
                stack = stack_addresses(table, stack_id)
                stack = known[stack_id] = self._shared(stack) if kernel else stack
            except KeyError:
                self.missing += 1
                return ()
        return stack

    def tidy(self, table: BpfMap) -> bool:
        """Empty a stack map the programs are not filling now, once crowded or old; True
        when emptied (ids that named its stacks name nothing now)."""
        now = time.monotonic()
        known = self._known.get(table.fd, {})
        emptied = self._emptied.setdefault(table.fd, now)
        if len(known) > table.max_entries * CROWDED or now - emptied >= STACKS_KEPT_S:
            for stack_id in known:  # by id: no walk over the map to find them
                try:
                    del table[stack_id]
                except KeyError:
                    pass
            table.clear()  # any the program stored after the drain
            known.clear()
            self._emptied[table.fd] = now
            return True
        return False


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
