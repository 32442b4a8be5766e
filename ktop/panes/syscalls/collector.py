"""Syscalls: bpf/syscalls.bpf.c on the raw tracepoints sys_enter / sys_exit (and sched_switch,
for where slow calls slept), drained every interval. Never imports Textual."""

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
)
from ktop.collectors.bpfsys import BpfMap, attach_raw_tracepoint, task_name
from ktop.collectors.btf import BTF_PATH, BtfError, KernelBtf
from ktop.collectors.maps import TwoGenerationProgram
from ktop.losses import kernel_names, note_names
from ktop.panes.syscalls.model import HIST_SLOTS
from ktop.panes.syscalls.table import ABIS

PROGRAM = "syscalls.bpf.c"
# Raw tracepoints, attached in this order: sched_switch first (it only reads what enter
# wrote), exit before enter, so that no call is entered unseen by an attached exit (an exit
# whose entry was not seen is counted as such).
FUNCTIONS = {
    "sc_sched_switch": "sched_switch",
    "sc_sys_exit": "sys_exit",
    "sc_sys_enter": "sys_enter",
}
TRACEPOINTS = ["raw_syscalls:sys_enter", "raw_syscalls:sys_exit", "sched:sched_switch"]
MAP_COUNTS = ("counts_0", "counts_1")
MAP_SLOW = ("slow_0", "slow_1")
MAP_STACKS = "stacks"
MAP_USER_STACKS = "user_stacks"
MAP_HASH_SEED = "hash_seed"
LOST_NAMES = kernel_names("syscalls")  # its `lost` array, as enum syscalls_lost orders it
NOT_LOSSES = note_names("syscalls")
DEFAULT_SLOW_NS = 1_000_000  # a call from 1 ms on is slow: its stacks are walked
NOT_WALKED = -2  # -ENOENT: where the call slept was not walked (it never slept, or predicted short)
STACKS_REMEMBERED = 8192

# struct sc_key / sc_slow_key / sc_stat (bpf/syscalls.h)
_KEY = struct.Struct("<IIHHI")
_SLOW_KEY = struct.Struct("<IIIHHqqQ16s")
_STAT_WORDS = 3 + HIST_SLOTS  # count, total, max, hist; then the identity:
_IDENTITY = struct.Struct("<IIQ16s")  # tgid, pad, cgroup, comm
_VALUE_WORDS = _STAT_WORDS + _IDENTITY.size // 8


class CallCounts(NamedTuple):
    """One thread's calls of one number under one errno (0: succeeded) in an interval."""

    pid: int
    tid: int
    comm: str
    cgroup: str
    nr: int
    abi: str  # one of table.ABIS
    err: int
    count: int
    total_ns: int
    max_ns: int
    hist: tuple[int, ...]  # HIST_SLOTS


class SlowCalls(NamedTuple):
    pid: int
    tid: int
    comm: str
    cgroup: str
    nr: int
    abi: str
    err: int
    kernel: tuple[int, ...]  # where it first slept, innermost first; () if not known
    kernel_error: int  # 0, or -errno (NOT_WALKED)
    user: tuple[int, ...]
    user_error: int
    count: int
    total_ns: int
    max_ns: int
    hist: tuple[int, ...]


@dataclass(frozen=True)
class SyscallDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    calls: tuple[CallCounts, ...]
    slow: tuple[SlowCalls, ...]
    lost: dict[str, int]  # cumulative since start, by reason
    notes: dict[str, int]


class StackTable:
    """Stacks by key (a hash of their frames), read from a map the program adds to and this
    empties at each drain: each read once, remembered while the map's keys are named (past
    STACKS_REMEMBERED the older half is forgotten). A key not found reads as no frames, and
    is counted."""

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


def _abi(value: int) -> str:
    return ABIS[value] if value < len(ABIS) else "x64"


def _summed(values: bytes, cpus: int,
            ) -> list[tuple[int, int, int, tuple[int, ...], tuple[int, int, bytes]]]:
    """Per-CPU sc_stat values (cpus of them a key, back to back): (count, total, max, hist,
    (tgid, cgroup, comm) of a CPU that counted some)."""
    words = array("Q", values)
    rows = []
    step = _VALUE_WORDS * cpus
    identity = (0, 0, b"")
    for base in range(0, len(words), step):
        count = total = top = 0
        hist = [0] * HIST_SLOTS
        for cpu in range(cpus):
            at = base + cpu * _VALUE_WORDS
            if not words[at]:
                continue
            count += words[at]
            total += words[at + 1]
            top = max(top, words[at + 2])
            hist = [a + b for a, b in zip(hist, words[at + 3:at + _STAT_WORDS])]
            tgid, _, cgroup, comm = _IDENTITY.unpack_from(values, (at + _STAT_WORDS) * 8)
            identity = (tgid, cgroup, comm)
        rows.append((count, total, top, tuple(hist), identity))
    return rows


def compat_flag(btf: KernelBtf) -> list[str]:
    """-DTASK_TI_STATUS=offset of task_struct.thread_info.status: how the program tells a
    32-bit call (TS_COMPAT); none (every call read as 64-bit) where BTF lacks it."""
    try:
        offset, size = btf.member("task_struct", "thread_info.status")
    except BtfError:
        return []
    return [f"-DTASK_TI_STATUS={offset}"] if size == 4 else []


class SyscallCollector:
    pane = "syscalls"

    def __init__(self, slow_ns: int = DEFAULT_SLOW_NS, user_stacks: bool = True,
                 cgroups: CgroupNames | None = None,
                 map_entries: dict[str, int] | None = None) -> None:
        self.slow_ns = slow_ns
        self._user_stacks = user_stacks
        self._map_entries = dict(map_entries or {})
        self._cgroups = cgroups or shared_names()
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float] | None = None
        self._last = 0.0
        self._kernel = StackTable()
        self._user = StackTable()

    @property
    def programs(self) -> dict[str, int]:
        return dict(self._program.program.programs) if self._program else {}

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_tracepoints(TRACEPOINTS, "raw_syscalls and sched tracepoints, Linux >= 4.x")
        flags = []
        try:
            btf = KernelBtf.load(BTF_PATH)
            flags += compat_flag(btf)
            walk_sleeps = btf.tracepoint_arity("sched_switch") >= 4  # prev_state since 5.18
        except (OSError, BtfError):
            raise Unavailable(f"the syscalls pane needs the kernel's BTF ({BTF_PATH}: "
                              "CONFIG_DEBUG_INFO_BTF=y) for its task storage") from None
        program = load_program(
            PROGRAM,
            [f"-DSLOW_NS={int(self.slow_ns)}ULL", f"-DUSER_STACKS={int(self._user_stacks)}",
             *flags, *(f"-D{name}={int(size)}" for name, size in self._map_entries.items())],
            {name: "RAW_TRACEPOINT" for name in FUNCTIONS},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        seed = self._program.table(MAP_HASH_SEED)
        seed[0] = seed.Leaf(int.from_bytes(os.urandom(8), "little"))
        for table, size in ((MAP_COUNTS[0], _KEY.size), (MAP_SLOW[0], _SLOW_KEY.size)):
            if self._program.table(table).key_size != size:
                self.close()
                raise Unavailable(f"bpf/syscalls.h and the collector disagree on {table}'s key")
        try:
            for function, tracepoint in FUNCTIONS.items():
                if function == "sc_sched_switch" and not walk_sleeps:
                    continue
                program.keep(attach_raw_tracepoint(program.programs[function], tracepoint))
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the raw_syscalls tracepoints: {e.strerror}") from None
        self._last = time.monotonic()

    def end_interval(self) -> None:
        assert self._program is not None, "start() first"
        self._ended = self._program.swap()

    def drain(self) -> SyscallDrain:
        assert self._program is not None, "start() first"
        program = self._program
        old, end = self._ended or program.swap()
        self._ended = None
        self._kernel.take(program.table(MAP_STACKS))
        self._user.take(program.table(MAP_USER_STACKS))
        calls = self._calls(program.table(MAP_COUNTS[old]))
        slow = self._slow(program.table(MAP_SLOW[old]))
        lost = self.lost()
        notes = {name: lost.pop(name) for name in NOT_LOSSES}
        drain = SyscallDrain(self._last, end, tuple(calls), tuple(slow), lost, notes)
        self._last = end
        return drain

    def _calls(self, table: BpfMap) -> list[CallCounts]:
        keys, values = table.drain_columns()
        if not keys:
            return []
        cgroup_name = self._cgroups.name
        rows = []
        for raw, (count, total, top, hist, (tgid, cgroup, comm)) in zip(
                keys, _summed(values, table.cpus or 1)):
            if not count:
                continue
            tid, nr, abi, err, _ = _KEY.unpack(raw)
            rows.append(CallCounts(tgid, tid, task_name(comm), cgroup_name(cgroup), nr,
                                   _abi(abi), err, count, total, top, hist))
        return rows

    def _slow(self, table: BpfMap) -> list[SlowCalls]:
        keys, values = table.drain_columns()
        if not keys:
            return []
        cgroup_name = self._cgroups.name
        kernel, user = self._kernel.read, self._user.read
        rows = []
        for raw, (count, total, top, hist, _) in zip(keys, _summed(values, 1)):
            tgid, tid, nr, abi, err, kstack, ustack, cgroup, comm = _SLOW_KEY.unpack(raw)
            rows.append(SlowCalls(tgid, tid, task_name(comm), cgroup_name(cgroup), nr,
                                  _abi(abi), err, kernel(kstack), min(0, kstack), user(ustack),
                                  min(0, ustack), count, total, top, hist))
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
