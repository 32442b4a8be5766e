"""Reading BPF maps through bcc, the same way for every collector."""

from __future__ import annotations

import ctypes as ct
import time
from array import array
from typing import Any


def drain_hash(table: Any) -> list:
    """Batch lookup-and-delete (one syscall per batch); per-key fallback on old kernels."""
    try:
        return list(table.items_lookup_and_delete_batch())
    except Exception:  # bcc raises bare Exception when the kernel lacks batch operations
        items = list(table.items())
        for key, _ in items:
            try:
                del table[key]
            except KeyError:
                pass
        return items


def read_stack(table: Any, stack_id: int) -> tuple[int, ...]:
    """A stack map entry's addresses, innermost first, up to the first empty slot.

    (bcc's own walker assumes 127 slots; some of our stack maps hold fewer.) The entry is
    read as one array of machine words: a Python loop over 127 ctypes slots cost 25 us."""
    words = array("Q", bytes(table[table.Key(stack_id)]))
    try:
        depth = words.index(0)
    except ValueError:
        depth = len(words)
    return tuple(words[:depth])


def clear_stack_map(table: Any) -> None:
    """Empty a stack map. bcc 0.26's StackTrace.clear() does nothing: delete key by key,
    with the syscalls made directly (bcc's iteration builds Python objects per key)."""
    from bcc.libbcc import lib  # noqa: PLC0415 - only collectors import bcc

    fd, key = table.map_fd, ct.c_uint32()
    ids = []
    found = lib.bpf_get_next_key(fd, None, ct.byref(key))
    while found == 0:
        ids.append(key.value)
        found = lib.bpf_get_next_key(fd, ct.byref(key), ct.byref(key))
    for stack_id in ids:
        key.value = stack_id
        lib.bpf_delete_elem(fd, ct.byref(key))


class _ProgInfo(ct.Structure):
    """struct bpf_prog_info (include/uapi/linux/bpf.h), up to recursion_misses (5.12+)."""

    _fields_ = [
        ("type", ct.c_uint32), ("id", ct.c_uint32), ("tag", ct.c_uint8 * 8),
        ("jited_prog_len", ct.c_uint32), ("xlated_prog_len", ct.c_uint32),
        ("jited_prog_insns", ct.c_uint64), ("xlated_prog_insns", ct.c_uint64),
        ("load_time", ct.c_uint64), ("created_by_uid", ct.c_uint32),
        ("nr_map_ids", ct.c_uint32), ("map_ids", ct.c_uint64), ("name", ct.c_char * 16),
        ("ifindex", ct.c_uint32), ("gpl_compatible", ct.c_uint32),
        ("netns_dev", ct.c_uint64), ("netns_ino", ct.c_uint64),
        ("nr_jited_ksyms", ct.c_uint32), ("nr_jited_func_lens", ct.c_uint32),
        ("jited_ksyms", ct.c_uint64), ("jited_func_lens", ct.c_uint64),
        ("btf_id", ct.c_uint32), ("func_info_rec_size", ct.c_uint32),
        ("func_info", ct.c_uint64), ("nr_func_info", ct.c_uint32),
        ("nr_line_info", ct.c_uint32), ("line_info", ct.c_uint64),
        ("jited_line_info", ct.c_uint64), ("nr_jited_line_info", ct.c_uint32),
        ("line_info_rec_size", ct.c_uint32), ("jited_line_info_rec_size", ct.c_uint32),
        ("nr_prog_tags", ct.c_uint32), ("prog_tags", ct.c_uint64),
        ("run_time_ns", ct.c_uint64), ("run_cnt", ct.c_uint64),
        ("recursion_misses", ct.c_uint64),
    ]


assert _ProgInfo.recursion_misses.offset == 208, "struct bpf_prog_info changed shape"


def recursion_misses(prog_fd: int) -> int:
    """Times the kernel skipped this program (re-entered on one CPU); 0 if it cannot say."""
    try:
        from bcc.libbcc import lib  # noqa: PLC0415 - only collectors import bcc
    except ImportError:
        return 0
    info = _ProgInfo()
    size = ct.c_uint32(ct.sizeof(info))
    try:
        if lib.bpf_obj_get_info(prog_fd, ct.byref(info), ct.byref(size)) != 0:
            return 0
    except AttributeError:
        return 0
    return int(info.recursion_misses) if size.value >= _ProgInfo.recursion_misses.offset + 8 else 0


def program_misses(program: Any) -> int:
    """Skipped runs of every loaded function of a bcc program (events it never saw)."""
    return sum(recursion_misses(fn.fd) for fn in program.funcs.values())


def flip_generation(table: Any, generation: int) -> float:
    """Point the programs at the other map generation; the time of the flip ends the interval.

    A program that read the old generation just before may still be writing it: wait a
    moment before draining (programs run for microseconds)."""
    table[table.Key(0)] = table.Leaf(generation)
    flipped = time.monotonic()
    time.sleep(0.001)
    return flipped


def sum_lost(table: Any, names: tuple[str, ...]) -> dict[str, int]:
    """A per-CPU array of loss counters, summed over CPUs, by the reasons' names in order."""
    return {name: sum(int(v) for v in table[table.Key(i)]) for i, name in enumerate(names)}


class StackReader:
    """Reads the stacks of one drained generation, each id once. An id whose entry is gone
    (cleared or overwritten under us) reads as no frames and is counted, never invented."""

    def __init__(self) -> None:
        self.missing = 0  # cumulative
        self._read: dict[tuple[int, int], tuple[int, ...]] = {}

    def next_drain(self) -> None:
        self._read.clear()  # ids are only meaningful within one generation

    def read(self, table: Any, stack_id: int) -> tuple[int, ...]:
        if stack_id < 0:
            return ()
        key = (id(table), stack_id)
        if key not in self._read:
            try:
                self._read[key] = read_stack(table, stack_id)
            except KeyError:
                self.missing += 1
                self._read[key] = ()
        return self._read[key]


# Every collector's program declares these two maps under these names.
MAP_GENERATION = "generation"  # one u32: which generation the programs fill now
MAP_LOST = "lost"  # per-CPU counters, indexed by the program's enum of loss reasons


class TwoGenerationProgram:
    """A loaded bcc program whose per-interval maps come in two generations (`name_0`,
    `name_1`): the BPF programs fill one while user space drains and empties the other."""

    def __init__(self, program: Any, lost_names: tuple[str, ...]) -> None:
        self.program = program
        self.generation = 0
        self.stacks = StackReader()
        self._lost_names = lost_names

    def table(self, name: str) -> Any:
        return self.program[name.encode()]  # bcc wants bytes and warns about str

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
        self.program.cleanup()
