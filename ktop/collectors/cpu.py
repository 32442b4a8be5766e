"""Kernel stack sampling: bpf/cpu.bpf.c on a cpu-clock perf event, drained every interval."""

from __future__ import annotations

import errno
import os
import secrets
import time
from array import array
from dataclasses import dataclass
from typing import Any

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors import loader
from ktop.collectors.bpfload import Unavailable, load_program
from ktop.collectors.bpfsys import BpfMap, attach_sampling
from ktop.collectors.maps import SharedAddresses, TwoGenerationProgram
from ktop.collectors.procstat import CpuTicks, read_cpu_ticks
from ktop.losses import kernel_names

PROGRAM = "cpu.bpf.c"
# Map names, as bpf/cpu.bpf.c declares them.
MAP_COUNTS = ("counts_0", "counts_1")
MAP_STACKS = ("stacks_0", "stacks_1")  # a hash of the frames -> the frames
MAP_USER_STACKS = ("user_stacks_0", "user_stacks_1")
MAP_IDLE_STACKS = ("idle_stacks_0", "idle_stacks_1")  # (cpu, ip, sp) -> key in MAP_STACKS
MAP_IDLE_CODE = "idle_code"
MAP_OWN_PIDS = "own_pids"  # [ktop, its BPF compiler or 0]
MAP_HASH_SEED = "hash_seed"
LOST_NAMES = kernel_names("functions")  # its `lost` array, as its C enum orders it
# Decoded counter keys, and stacks read, remembered while in use: past this many, those not
# met since the last time it was passed are forgotten (process churn never stops adding keys:
# at 4000 Hz ~2,000 new user stacks a second, each a few hundred bytes).
ROWS_KEPT = 8192
STACKS_KEPT = 4096
# An interval holds no more distinct keys than samples: at low rates the caps above are
# sized down to this many intervals' worth (a key met again is never forgotten between).
INTERVALS_REMEMBERED = 8
REMEMBERED_AT_LEAST = 1024


def remembered(cap: int, hz: int, cpus: int, interval_s: float) -> int:
    """How many decoded keys (or stacks) to keep: `cap` at high sampling rates, fewer at low
    ones, where thousands were only keys of processes long gone (each holds its stacks)."""
    per_interval = hz * cpus * max(interval_s, 0.1)
    return int(min(cap, max(REMEMBERED_AT_LEAST, INTERVALS_REMEMBERED * per_interval)))
MAX_STACK_DEPTH = 127  # PERF_MAX_STACK_DEPTH: a stack this deep may have been cut


class StackRow:
    """One in-kernel counter's key as read: who was sampled, and where. The sampler hands out
    the same object for the same key interval after interval (while it remembers the key), so
    an aggregator finds what it made of a row by identity, a pointer hash, instead of hashing
    its stacks again every interval (at 4000 Hz ~450 counters a second). Addresses are
    innermost first."""

    __slots__ = ("pid", "comm", "kernel", "user", "user_mode", "cgroup", "own")

    def __init__(self, pid: int, comm: str, kernel: tuple[int, ...], user: tuple[int, ...],
                 user_mode: bool, cgroup: str = "", own: bool = False) -> None:
        self.pid, self.comm, self.kernel, self.user = pid, comm, kernel, user
        self.user_mode = user_mode  # sampled while running user code: no kernel stack
        self.cgroup = cgroup  # the task's cgroup v2 path
        self.own = own  # ktop's own process or its compiler: the user stack was not walked

    def identity(self) -> tuple:
        """What the row says, for rows that are different objects but the same stacks."""
        return (self.pid, self.comm, self.kernel, self.user, self.user_mode, self.cgroup,
                self.own)

    def __repr__(self) -> str:
        return f"StackRow{self.identity()!r}"


@dataclass(frozen=True, slots=True)
class CpuDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    rows: tuple[StackRow, ...]  # one per counter
    samples: tuple[int, ...]  # the samples of each row, in the same order
    lost: dict[str, int]  # cumulative since start, by reason
    ticks: CpuTicks = CpuTicks()  # /proc/stat over the same span: the exact CPU time split


def _map_sizes(hz: int, cpus: int, interval_s: float) -> tuple[int, int, int]:
    """Counters and stacks of one interval: no more than its samples, and room for four
    intervals' worth, for a drain that comes late (a saturated machine delays it). The maps
    take memory only for what they hold; their size costs 16 bytes a bucket."""
    room = min(max(8192, int(hz * cpus * interval_s * 4)), 262144)
    return room, room, room


class _Remembered:
    """Values by key, those not asked for lately forgotten once there are too many: at
    most twice `kept` are held, and a key asked for again is never forgotten between."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self.now: dict = {}
        self.before: dict = {}

    def get(self, key: Any) -> Any:
        value = self.now.get(key)
        if value is None:
            value = self.before.pop(key, None)
            if value is not None:
                self.now[key] = value
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        if len(self.now) >= self.kept:
            self.before, self.now = self.now, {}
        self.now[key] = value

    def clear(self) -> None:
        self.now.clear()
        self.before.clear()

    def __len__(self) -> int:
        return len(self.now) + len(self.before)


class _DrainedStacks:
    """The stacks a generation's map held when drained, by key, each read only if asked
    for (most were met in earlier intervals)."""

    def __init__(self, keys: list[bytes], values: bytes, depth: int) -> None:
        self._index = dict(zip(array("q", b"".join(keys)), range(len(keys))))
        self._values = memoryview(values).cast("Q") if values else memoryview(b"")
        self._depth = depth

    def frames(self, key: int) -> tuple[int, ...] | None:
        i = self._index.get(key)
        if i is None:
            return None
        words = self._values[i * self._depth:(i + 1) * self._depth].tolist()
        try:
            return tuple(words[:words.index(0)])
        except ValueError:  # as deep as the map keeps: cut there
            return tuple(words)


def _drained_stacks(table: BpfMap) -> _DrainedStacks:
    keys, values = table.drain_columns()
    return _DrainedStacks(keys, values, table.value_size // 8)


class CpuSampler:
    pane = "functions"

    def __init__(self, hz: int = 99, interval_s: float = 1.0,
                 cgroups: CgroupNames | None = None,
                 idle_code: tuple[tuple[int, int], ...] = (), compiler_pid: int = 0) -> None:
        """idle_code: [start, end) addresses of the kernel's idle functions, where the idle
        task's stack is walked once and remembered (bpf/cpu.bpf.c). compiler_pid: ktop's BPF
        compiler process, still compiling the other panes' programs (0: none)."""
        self.hz = hz
        self._idle_code = idle_code
        self.cpus = os.cpu_count() or 1
        self._interval_s = interval_s
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float, CpuTicks] | None = None  # by end_interval()
        self._last = 0.0
        self._ticks = CpuTicks()
        # Each counter's key as the kernel wrote it -> its row: a workload's keys come back
        # interval after interval, and decoding one and reading its stacks cost 5 us (at
        # 4000 Hz, 300 keys a second). A key names its stacks by a hash of their frames, so
        # it means the same row for as long as it is remembered.
        self._rows = _Remembered(remembered(ROWS_KEPT, hz, self.cpus, interval_s))
        # The frames of each stack key met, kernel and user: each stack is read once.
        stacks_kept = remembered(STACKS_KEPT, hz, self.cpus, interval_s)
        self._kernel_frames = _Remembered(stacks_kept)
        self._user_frames = _Remembered(stacks_kept)
        self._shared = SharedAddresses()
        self.missing = 0  # stacks a counter named that no map held (cumulative)
        self._cgroups = cgroups or shared_names()
        # The processes whose user stacks the program does not walk (bpf/cpu.bpf.c).
        self.own_pid = os.getpid()
        self.compiler_pid = compiler_pid

    def start(self) -> None:
        counts, stacks, user_stacks = _map_sizes(self.hz, self.cpus, self._interval_s)
        program = load_program(
            PROGRAM,
            [
                f"-DCOUNTS_ENTRIES={counts}",
                f"-DSTACK_ENTRIES={stacks}",
                f"-DUSER_STACK_ENTRIES={user_stacks}",
            ],
            {"on_cpu_sample": "PERF_EVENT"},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        self._write_idle_code()
        self._program.table(MAP_HASH_SEED)[0] = secrets.randbits(64)
        own_pids = self._program.table(MAP_OWN_PIDS)
        own_pids[0], own_pids[1] = self.own_pid, self.compiler_pid
        if not self.compiler_pid:  # one starts only if a program is not in the cache
            loader.when_compiler_starts(self.compiler_started)
        loader.when_compiler_exits(self.compiler_exited)
        try:
            program.keep(*attach_sampling(program.programs["on_cpu_sample"], self.hz))
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the cpu-clock perf event: {e.strerror}") from None
        self._last = time.monotonic()
        self._ticks = read_cpu_ticks()

    def compiler_started(self, pid: int) -> None:
        """Its user stacks are clang's: not walked (told before it is asked to compile)."""
        program = self._program
        try:
            if program is not None and not self.compiler_pid:
                self.compiler_pid = pid
                program.table(MAP_OWN_PIDS)[1] = pid
        except OSError:  # closed meanwhile
            pass

    def compiler_exited(self) -> None:
        """Its pid may now name another process, whose user stacks must be walked."""
        program, self.compiler_pid = self._program, 0
        try:
            if program is not None:
                program.table(MAP_OWN_PIDS)[1] = 0
        except OSError:  # closed meanwhile (ktop quitting): nothing left to clear
            pass

    def _write_idle_code(self) -> None:
        """The ranges the program remembers idle stacks in; as many as it has room for (the
        rest are walked each sample, as any other)."""
        table = self._program.table(MAP_IDLE_CODE)
        code = table.Leaf()
        for i, (start, end) in enumerate(self._idle_code[:len(code.start)]):
            code.start[i], code.end[i] = start, end
        table[0] = code

    def end_interval(self) -> None:
        """End the interval now; the next drain() reads it (the engine ends every pane's
        before it reads any, so they cover the same span)."""
        assert self._program is not None, "start() first"
        self._ended = (*self._program.swap(), read_cpu_ticks())

    def drain(self) -> CpuDrain:
        """Swap map generations, then read and empty the one the program just left: its
        counters, the stacks first seen in its interval, and its idle task's cache."""
        assert self._program is not None, "start() first"
        old, end, ticks = self._ended or (*self._program.swap(), read_cpu_ticks())
        self._ended = None
        counts_map = self._program.table(MAP_COUNTS[old])
        keys, values = counts_map.drain_columns()
        # Emptied after each drain: a generation's maps hold one interval's stacks.
        kernel = _drained_stacks(self._program.table(MAP_STACKS[old]))
        user = _drained_stacks(self._program.table(MAP_USER_STACKS[old]))
        self._program.table(MAP_IDLE_STACKS[old]).drain_columns()
        samples = tuple(memoryview(values).cast("Q"))  # u64 counts, in the kernel's byte order
        known = self._rows
        rows = list(map(known.get, keys))
        if None in rows:  # keys not met lately (or not whole then)
            for i, row in enumerate(rows):
                if row is None:
                    row, whole = self._row(counts_map.Key.from_buffer_copy(keys[i]), kernel,
                                           user)
                    # (A row whose stack or cgroup was not found is counted, and looked for
                    # again next time.)
                    if whole:
                        known[keys[i]] = row
                    rows[i] = row
        drain = CpuDrain(self._last, end, tuple(rows), samples, self.lost(),
                         ticks - self._ticks)
        self._last, self._ticks = end, ticks
        return drain

    def _frames(self, key: int, drained: _DrainedStacks, remembered: _Remembered,
                kernel: bool) -> tuple[int, ...] | None:
        """A stack's frames by its key, innermost first: () for an error (-errno), None when
        neither this interval's map nor memory holds it."""
        if key < 0:
            return ()
        frames = remembered.get(key)
        if frames is None:
            frames = drained.frames(key)
            if frames is None:
                return None
            if kernel:
                frames = self._shared(frames)
            remembered[key] = frames
        return frames

    def _row(self, decoded: Any, kernel: _DrainedStacks,
             user: _DrainedStacks) -> tuple[StackRow, bool]:
        """A counter's key with its stacks read and its cgroup named, and whether all of it
        was found (both stacks there to read, the cgroup known)."""
        kstack, ustack = decoded.kstack, decoded.ustack
        kernel_frames = self._frames(kstack, kernel, self._kernel_frames, True)
        user_frames = self._frames(ustack, user, self._user_frames, False)
        missing = (kernel_frames is None) + (user_frames is None)
        self.missing += missing
        cgroup = self._cgroups.name(decoded.cgroup)
        row = StackRow(decoded.pid, decoded.comm.decode(errors="replace"),
                       kernel_frames or (), user_frames or (),
                       kstack == -errno.EFAULT, cgroup, ustack == -errno.ENOENT)
        return row, not missing and self._cgroups.knows(decoded.cgroup)

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["stack_missing"] = self.missing
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
