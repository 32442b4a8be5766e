"""Memory: bpf/memory.bpf.c on the vmscan and compaction raw tracepoints (reclaim and
compaction stalls, kswapd awake), drained every interval. Never imports Textual."""

from __future__ import annotations

import os
import struct
import time
from array import array
from dataclasses import dataclass
from typing import NamedTuple

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import (
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
    tracepoint_exists,
)
from ktop.collectors.bpfsys import BpfMap, attach_raw_tracepoint, task_name
from ktop.collectors.maps import TwoGenerationProgram
from ktop.losses import kernel_names, note_names

PROGRAM = "memory.bpf.c"
HIST_SLOTS = 32  # MEM_HIST_SLOTS: slot k holds stalls of [2^k, 2^(k+1)) ns, the last longer
KINDS = ("direct_reclaim", "memcg_reclaim", "compaction", "kswapd")  # enum mem_kind
# Raw tracepoints, ends attached before begins (an end whose begin was not seen is counted as
# such; a begin whose end is not attached would be kept for nothing). The group is for
# tracefs' check.
FUNCTIONS = {
    "on_direct_reclaim_end": ("vmscan", "mm_vmscan_direct_reclaim_end"),
    "on_direct_reclaim_begin": ("vmscan", "mm_vmscan_direct_reclaim_begin"),
    "on_memcg_reclaim_end": ("vmscan", "mm_vmscan_memcg_reclaim_end"),
    "on_memcg_reclaim_begin": ("vmscan", "mm_vmscan_memcg_reclaim_begin"),
    "on_compaction_end": ("compaction", "mm_compaction_end"),
    "on_compaction_begin": ("compaction", "mm_compaction_begin"),
    "on_kswapd_sleep": ("vmscan", "mm_vmscan_kswapd_sleep"),
    "on_kswapd_wake": ("vmscan", "mm_vmscan_kswapd_wake"),
}
REQUIRED = ["vmscan:mm_vmscan_direct_reclaim_begin", "vmscan:mm_vmscan_direct_reclaim_end"]
MAP_COUNTS = ("counts_0", "counts_1")
MAP_STACKS = "stacks"
MAP_USER_STACKS = "user_stacks"
MAP_HASH_SEED = "hash_seed"
LOST_NAMES = kernel_names("memory")  # its `lost` array, as enum memory_lost orders it
NOT_LOSSES = note_names("memory")
STACKS_REMEMBERED = 8192
FLAG_KTHREAD = 1

# struct mem_key / mem_stat (bpf/memory.h)
_KEY = struct.Struct("<IIHHIQqq16s")
_STAT_WORDS = 4 + HIST_SLOTS


class Stalls(NamedTuple):
    """One thread's stalls of one kind at one pair of stacks in an interval."""

    pid: int
    tid: int
    comm: str
    cgroup: str
    kind: str  # one of KINDS
    kthread: bool  # a kernel thread's (kswapd, kcompactd): nobody's stall
    kernel: tuple[int, ...]  # innermost first; () if not walked
    user: tuple[int, ...]
    stalls: int  # how many
    total_ns: int
    max_ns: int
    reclaimed: int  # pages
    hist: tuple[int, ...]


@dataclass(frozen=True)
class MemoryDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    stalls: tuple[Stalls, ...]
    lost: dict[str, int]  # cumulative since start, by reason
    notes: dict[str, int]


class StackTable:
    """Stacks by key (a hash of their frames), read from a map the program adds to and this
    empties at each drain: each read once, remembered while the map's keys are named."""

    def __init__(self) -> None:
        self.missing = 0
        self._now: dict[int, tuple[int, ...]] = {}
        self._before: dict[int, tuple[int, ...]] = {}

    def take(self, table: BpfMap) -> None:
        keys, values = table.drain_columns()
        if len(self._now) + len(keys) > STACKS_REMEMBERED:
            self._before, self._now = self._now, {}
        depth = table.value_size // 8
        words = array("Q", values)
        for i, key in enumerate(array("q", b"".join(keys))):
            frames = words[i * depth:(i + 1) * depth].tolist()
            end = frames.index(0) if 0 in frames else depth
            self._now[key] = tuple(frames[:end])

    def read(self, key: int) -> tuple[int, ...]:
        if key < 0:
            return ()
        frames = self._now.get(key)
        if frames is None:
            frames = self._before.get(key)
            if frames is None:
                self.missing += 1
                return ()
            self._now[key] = frames
        return frames


def stall_rows(keys: list[bytes], values: bytes) -> list[tuple]:
    """(key fields..., count, total, max, reclaimed, hist) of each mem_key / mem_stat."""
    words = array("Q", values)
    rows = []
    for i, raw in enumerate(keys):
        at = i * _STAT_WORDS
        stat = words[at:at + _STAT_WORDS]
        rows.append((*_KEY.unpack(raw), stat[0], stat[1], stat[2], stat[3],
                     tuple(stat[4:_STAT_WORDS])))
    return rows


class MemoryCollector:
    pane = "memory"

    def __init__(self, user_stacks: bool = True, cgroups: CgroupNames | None = None,
                 map_entries: dict[str, int] | None = None) -> None:
        self._user_stacks = user_stacks
        self._map_entries = dict(map_entries or {})
        self._cgroups = cgroups or shared_names()
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float] | None = None
        self._last = 0.0
        self._kernel = StackTable()
        self._user = StackTable()
        self.attached: tuple[str, ...] = ()  # the tracepoints this kernel has, attached

    @property
    def programs(self) -> dict[str, int]:
        return dict(self._program.program.programs) if self._program else {}

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_tracepoints(REQUIRED, "the vmscan tracepoints, Linux >= 2.6.36")
        program = load_program(
            PROGRAM,
            [f"-DUSER_STACKS={int(self._user_stacks)}",
             *(f"-D{name}={int(size)}" for name, size in self._map_entries.items())],
            {name: "RAW_TRACEPOINT" for name in FUNCTIONS},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        seed = self._program.table(MAP_HASH_SEED)
        seed[0] = seed.Leaf(int.from_bytes(os.urandom(8), "little"))
        if self._program.table(MAP_COUNTS[0]).key_size != _KEY.size:
            self.close()
            raise Unavailable("bpf/memory.h and the collector disagree on counts' key")
        attached = []
        try:
            for function, (group, tracepoint) in FUNCTIONS.items():
                if not tracepoint_exists(group, tracepoint):
                    continue  # (compaction: CONFIG_COMPACTION; the pane says what it read)
                program.keep(attach_raw_tracepoint(program.programs[function], tracepoint))
                attached.append(f"{group}:{tracepoint}")
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the vmscan tracepoints: {e.strerror}") from None
        self.attached = tuple(attached)
        self._last = time.monotonic()

    def end_interval(self) -> None:
        assert self._program is not None, "start() first"
        self._ended = self._program.swap()

    def drain(self) -> MemoryDrain:
        assert self._program is not None, "start() first"
        program = self._program
        old, end = self._ended or program.swap()
        self._ended = None
        self._kernel.take(program.table(MAP_STACKS))
        self._user.take(program.table(MAP_USER_STACKS))
        stalls = self._stalls(program.table(MAP_COUNTS[old]))
        lost = self.lost()
        notes = {name: lost.pop(name) for name in NOT_LOSSES}
        drain = MemoryDrain(self._last, end, tuple(stalls), lost, notes)
        self._last = end
        return drain

    def _stalls(self, table: BpfMap) -> list[Stalls]:
        keys, values = table.drain_columns()
        if not keys:
            return []
        cgroup_name = self._cgroups.name
        kernel, user = self._kernel.read, self._user.read
        rows = []
        for (tgid, tid, kind, flags, _pad, cgroup, kstack, ustack, comm, count, total, top,
             reclaimed, hist) in stall_rows(keys, values):
            rows.append(Stalls(tgid, tid, task_name(comm), cgroup_name(cgroup),
                               KINDS[kind] if kind < len(KINDS) else "?",
                               bool(flags & FLAG_KTHREAD), kernel(kstack), user(ustack),
                               count, total, top, reclaimed, hist))
        return rows

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["stack_missing"] = self._kernel.missing + self._user.missing
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
