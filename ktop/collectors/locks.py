"""Lock contention: bpf/locks.bpf.c on lock:contention_begin/end, drained every interval."""

from __future__ import annotations

import ctypes as ct
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import (
    TRACEFS,
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
)
from ktop.collectors.bpfsys import attach_tracepoint, row_layout, task_name
from ktop.collectors.btf import BTF_PATH, BtfError, KernelBtf
from ktop.collectors.maps import TwoGenerationProgram, forget_entries
from ktop.losses import kernel_names

PROGRAM = "locks.bpf.c"
TRACEPOINTS = ["lock:contention_begin", "lock:contention_end"]
# Where an owner wakes the thread that waits for its lock, and where CPUs show their run queue.
WAKING_TRACEPOINT = "sched:sched_waking"
# The program of each tracepoint; names begin "on_lock_"/"on_contention_" so that BPF run time
# is told to this pane (ktop.registry), not to the waits pane's "on_sched_".
FUNCTIONS = {"lock:contention_begin": "on_contention_begin",
             "lock:contention_end": "on_contention_end", WAKING_TRACEPOINT: "on_lock_waking"}
# Map names, as bpf/locks.bpf.c declares them.
MAP_WAIT_TEMPLATE = "wait_template"
MAP_TASK_STARTS = "task_starts"
MAP_STACK_WAITS = ("stack_waits_0", "stack_waits_1")
MAP_LOCK_WAITS = ("lock_waits_0", "lock_waits_1")
MAP_TASK_WAITS = ("task_waits_0", "task_waits_1")
MAP_STACKS = ("stacks_0", "stacks_1")
MAP_USER_STACKS = ("user_stacks_0", "user_stacks_1")
MAP_OWNER_WAITS = ("owner_waits_0", "owner_waits_1")
MAP_LOCK_NAMES = "lock_names"
MAP_CPU_RQS = "cpu_rqs"
LOST_NAMES = kernel_names("locks")  # its `lost` array, as its C enum orders it
# enum lock_owner_kind in bpf/ktop.h
OWNER_NONE, OWNER_TASK, OWNER_READERS, OWNER_UNKNOWN, OWNER_UNTRACED = range(5)
# enum lock_name_kind
NAME_NONE, NAME_MMAP_LOCK, NAME_SIGLOCK, NAME_INODE_RWSEM = range(4)
PATH_NAME = 48  # LOCK_PATH_NAME: bytes of each dentry name in struct lock_name's path
RQ_CPUS = 256  # RQ_CPUS in bpf/locks.bpf.c: CPUs whose run queue is learned

# The kernel's struct members the owners and names need: -D macro -> (struct, member, size).
OWNER_FIELDS = {
    "MUTEX_OWNER_OFF": ("mutex", "owner", 8),
    "RWSEM_OWNER_OFF": ("rw_semaphore", "owner", 8),
    "TASK_PID_OFF": ("task_struct", "pid", 4),
    "TASK_TGID_OFF": ("task_struct", "tgid", 4),
    "TASK_COMM_OFF": ("task_struct", "comm", 16),
}
NAME_FIELDS = {
    "TASK_MM_OFF": ("task_struct", "mm", 8),
    "MM_MMAP_LOCK_OFF": ("mm_struct", "mmap_lock", 0),
    "TASK_SIGHAND_OFF": ("task_struct", "sighand", 8),
    "SIGHAND_SIGLOCK_OFF": ("sighand_struct", "siglock", 0),
    "TASK_SE_CFS_RQ_OFF": ("task_struct", "se.cfs_rq", 8),
    "CFS_RQ_RQ_OFF": ("cfs_rq", "rq", 8),
    "RQ_LOCK_OFF": ("rq", "__lock", 0),
    "INODE_RWSEM_OFF": ("inode", "i_rwsem", 0),
    "INODE_MAPPING_OFF": ("inode", "i_mapping", 8),
    "INODE_DATA_OFF": ("inode", "i_data", 0),
    "MAPPING_HOST_OFF": ("address_space", "host", 8),
    "INODE_INO_OFF": ("inode", "i_ino", 8),
    "INODE_SB_OFF": ("inode", "i_sb", 8),
    "SB_DEV_OFF": ("super_block", "s_dev", 4),
}
PATH_FIELDS = {
    "INODE_DENTRY_OFF": ("inode", "i_dentry", 8),
    "DENTRY_ALIAS_OFF": ("dentry", "d_u.d_alias", 0),
    "DENTRY_NAME_OFF": ("dentry", "d_name.name", 8),
    "DENTRY_PARENT_OFF": ("dentry", "d_parent", 8),
}
HIST_SLOTS = 40  # LOCK_HIST_SLOTS: slot k counts waits in [2^k, 2^(k+1)) ns, slot 0 [0, 2)
U64_MAX = 2**64 - 1

# The record layouts bpf/ktop.h hard-codes: (field, offset, size) per tracepoint.
_EXPECTED_FIELDS = {
    "contention_begin": (("lock_addr", 8, 8), ("flags", 16, 4)),
    "contention_end": (("lock_addr", 8, 8), ("ret", 16, 4)),
}
_FIELD_RE = re.compile(r"field:[^;]*?(\w+)(?:\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);")


@dataclass(frozen=True, slots=True)
class StackWaits:
    """Waits counted in the kernel for one (kernel stack, lock type)."""

    flags: int  # LCB_F_* of the first begin
    kernel: tuple[int, ...]  # innermost first; () when the stack could not be kept
    kernel_error: int  # 0, or the -errno of bpf_get_stackid (-EEXIST: collision)
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int
    hist: tuple[int, ...]  # HIST_SLOTS log2 slots of wait time


@dataclass(frozen=True, slots=True)
class LockWaits:
    """Waits for one (lock address, lock type)."""

    address: int
    flags: int
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int


@dataclass(frozen=True, slots=True)
class TaskWaits:
    """Waits of one thread at one (kernel stack, user stack, lock type)."""

    tid: int
    tgid: int  # the process: user addresses are in its address space
    comm: str
    flags: int
    kernel: tuple[int, ...]
    kernel_error: int
    user: tuple[int, ...]  # raw user addresses, innermost first, for symbolizing later
    user_error: int  # -EFAULT for kernel threads
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int
    cgroup: str = ""  # the thread's cgroup v2 path ("/system.slice/x.service")


@dataclass(frozen=True, slots=True)
class OwnerWaits:
    """Waits for one sleeping lock, charged to who held it when each wait began."""

    address: int
    flags: int
    owner_kind: int  # OWNER_*
    owner_tid: int  # 0 unless owner_kind is OWNER_TASK
    owner_tgid: int
    owner_comm: str
    owner_kernel: tuple[int, ...]  # the owner's stack when it woke the waiter; () if unseen
    owner_kernel_error: int  # -ENODATA: not seen waking it; -ESTALE: taken before a drain
    kernel: tuple[int, ...]  # the waiter's stack
    kernel_error: int
    contended: int
    total_ns: int
    max_ns: int
    min_ns: int


@dataclass(frozen=True, slots=True)
class LockName:
    """What a lock address is, as the BPF program found it (struct lock_name)."""

    kind: int  # NAME_*
    pid: int = 0  # the process of an mm or sighand
    comm: str = ""
    ino: int = 0
    dev: int = 0  # kernel dev_t: major << 20 | minor
    path: tuple[str, ...] = ()  # dentry names from the inode up, innermost first


@dataclass(frozen=True, slots=True)
class LockDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    stacks: tuple[StackWaits, ...]
    locks: tuple[LockWaits, ...]
    tasks: tuple[TaskWaits, ...]
    lost: dict[str, int]  # cumulative since start, by reason
    owners: tuple[OwnerWaits, ...] = ()
    names: dict[int, LockName] | None = None  # lock address -> name, for the drained locks
    run_queues: dict[int, int] | None = None  # address of a CPU's run-queue lock -> CPU
    notes: tuple[str, ...] = ()  # why owners or names are left out on this kernel


def require_lock_tracepoints(root: str = TRACEFS) -> None:
    require_tracepoints(
        TRACEPOINTS, "needs Linux >= 5.19; lock contention cannot be traced on this kernel", root
    )


def check_record_layout(root: str = TRACEFS) -> None:
    """bpf/ktop.h reads the records at fixed offsets: refuse to load if tracefs says otherwise."""
    for event, expected in _EXPECTED_FIELDS.items():
        path = os.path.join(root, "events", "lock", event, "format")
        try:
            with open(path) as f:
                fields = {m[1]: (int(m[2]), int(m[3])) for m in _FIELD_RE.finditer(f.read())}
        except OSError as e:
            raise Unavailable(f"cannot read {path}: {e.strerror}") from None
        for name, offset, size in expected:
            if fields.get(name) != (offset, size):
                raise Unavailable(
                    f"lock:{event} has an unexpected layout ({name} at {fields.get(name)}, "
                    f"expected {(offset, size)}): this kernel needs a newer ktop"
                )


def _offset_flags(btf: KernelBtf, fields: dict[str, tuple[str, str, int]]) -> list[str]:
    flags = []
    for macro, (struct_name, path, size) in fields.items():
        offset, actual = btf.member(struct_name, path)
        if size and actual != size:
            raise BtfError(f"{struct_name}.{path} is {actual} bytes, not {size}")
        flags.append(f"-D{macro}={offset}")
    return flags


def owner_name_flags(btf_path: str = BTF_PATH) -> tuple[list[str], list[str]]:
    """(-D flags for bpf/locks.bpf.c, notes): owners and names are each traced only when the
    kernel's BTF has every member they read; a note says which part is left out and why."""
    try:
        btf = KernelBtf.load(btf_path)
    except (OSError, BtfError) as e:
        reason = e.strerror if isinstance(e, OSError) else str(e)
        return [], [f"lock owners and names left out: no kernel BTF ({btf_path}: {reason})"]
    flags: list[str] = []
    notes: list[str] = []
    for what, fields, macro in (("owners", OWNER_FIELDS, "-DOWNERS=1"),
                                ("names", NAME_FIELDS, "-DNAMES=1")):
        try:
            flags += [*_offset_flags(btf, fields), macro]
        except BtfError as e:
            notes.append(f"lock {what} left out: {e} (kernel BTF)")
    if "-DNAMES=1" in flags:
        try:
            flags += [*_offset_flags(btf, PATH_FIELDS), "-DINODE_PATHS=1"]
        except BtfError as e:
            notes.append(f"directory paths of i_rwsem locks left out: {e} (kernel BTF)")
    return flags, notes


def thread_started_after(tid: int, time_ns: int) -> bool:
    """True if thread `tid` is gone, or is a newer thread that took the id after `time_ns`
    (CLOCK_BOOTTIME, as the BPF program stamps begins): a wait recorded for it never ends."""
    try:
        with open(f"/proc/{tid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    # Field 22 (starttime, clock ticks since boot), counted after the parenthesised comm.
    start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
    start_ns = start_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return start_ns > time_ns + 20_000_000  # two ticks of slack: starttime is in ticks


def _drained(table) -> tuple[dict, dict, Iterator[tuple[tuple, tuple]]]:  # noqa: ANN001
    """A map emptied, as (key, value) rows of plain fields, with each field's place in them
    (one struct call a map: bpfsys.RowLayout, not a ctypes object and lookup a field)."""
    keys, values = table.drain_columns()
    k, v = row_layout(table.Key), row_layout(table.Leaf)
    return k.index, v.index, zip(k.rows(b"".join(keys)), v.rows(values))


def _wait_fields(value: dict, prefix: str = "") -> tuple[int, int, int, int]:
    """Where a value's wait counts (struct lock_wait: count, total, max, min) lie in its rows."""
    return tuple(value[prefix + name] for name in ("count", "total_ns", "max_ns", "min_ns"))


class LockCollector:
    pane = "locks"

    def __init__(
        self, interval_s: float = 1.0, user_stacks: bool = True, pass_on: bool = True,
        cgroups: CgroupNames | None = None, btf_path: str = BTF_PATH,
    ) -> None:
        """interval_s: how often drain() will be called (waits are summed per interval in the
        kernel, so the maps' sizes do not depend on it). user_stacks: also record each
        waiter's user stack (about 2 us per contention here). pass_on: let `perf record` and
        other perf users of the lock tracepoints see the events too; off hides them.
        btf_path: the kernel's BTF, where lock owners' and names' struct offsets come from."""
        self._interval_s = interval_s
        self._user_stacks = user_stacks
        self._pass_on = pass_on
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float] | None = None  # by end_interval(): (generation, end)
        self._last = 0.0
        self._stale_begins = 0
        self._cgroups = cgroups or shared_names()
        self._btf_path = btf_path
        self._notes: tuple[str, ...] = ()
        self._rq_lock_offset: int | None = None
        self._run_queues: dict[int, int] = {}

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_lock_tracepoints()
        check_record_layout()
        extra, notes = owner_name_flags(self._btf_path)
        self._notes = tuple(notes)
        self._rq_lock_offset = next(
            (int(f.split("=")[1]) for f in extra if f.startswith("-DRQ_LOCK_OFF=")), None)
        tracepoints = ["lock:contention_end", "lock:contention_begin"]
        if extra:
            tracepoints.insert(0, WAKING_TRACEPOINT)
        program = load_program(
            PROGRAM,
            [f"-DUSER_STACKS={int(self._user_stacks)}", f"-DPASS_ON={int(self._pass_on)}",
             *extra],
            {FUNCTIONS[t]: "TRACEPOINT" for t in tracepoints},
        )
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        template = self._program.table(MAP_WAIT_TEMPLATE)
        leaf = template.Leaf()
        leaf.wait.min_ns = U64_MAX  # so the first wait of a new aggregate sets min
        template[0] = leaf
        try:
            # End first: every begin seen then has its end seen, so no start is left behind.
            for tracepoint in tracepoints:
                function = FUNCTIONS[tracepoint]
                program.keep(attach_tracepoint(program.programs[function], tracepoint, TRACEFS))
        except OSError as e:
            self.close()
            raise Unavailable(
                f"cannot attach the lock contention tracepoints: {e.strerror}"
            ) from None
        self._last = time.monotonic()

    def end_interval(self) -> None:
        """End the interval now; the next drain() reads it (the engine ends every pane's
        before it reads any, so they cover the same span)."""
        assert self._program is not None, "start() first"
        self._ended = self._program.swap()

    def drain(self) -> LockDrain:
        """Swap map generations, then read and empty the one the program just left."""
        assert self._program is not None, "start() first"
        old, end = self._ended or self._program.swap()
        self._ended = None
        kernel_stacks = self._program.table(MAP_STACKS[old])
        user_stacks = self._program.table(MAP_USER_STACKS[old])
        walk = self._program.stacks.read
        cgroup_name = self._cgroups.name

        k, v, rows = _drained(self._program.table(MAP_STACK_WAITS[old]))
        flags, kstack, hist = k["flags"], k["kstack"], v["hist"]
        count, total, max_ns, min_ns = _wait_fields(v, "wait.")
        stack_rows = [
            StackWaits(
                flags=key[flags],
                kernel=walk(kernel_stacks, key[kstack], kernel=True),
                kernel_error=min(0, key[kstack]),
                contended=value[count],
                total_ns=value[total],
                max_ns=value[max_ns],
                min_ns=value[min_ns],
                hist=value[hist],
            )
            for key, value in rows
        ]
        k, v, rows = _drained(self._program.table(MAP_LOCK_WAITS[old]))
        lock, flags = k["lock"], k["flags"]
        count, total, max_ns, min_ns = _wait_fields(v)
        lock_rows = [
            LockWaits(
                address=key[lock],
                flags=key[flags],
                contended=value[count],
                total_ns=value[total],
                max_ns=value[max_ns],
                min_ns=value[min_ns],
            )
            for key, value in rows
        ]
        k, v, rows = _drained(self._program.table(MAP_TASK_WAITS[old]))
        tid, tgid, comm, flags = k["tid"], k["tgid"], k["comm"], k["flags"]
        kstack, ustack, cgroup = k["kstack"], k["ustack"], k["cgroup"]
        count, total, max_ns, min_ns = _wait_fields(v)
        task_rows = [
            TaskWaits(
                tid=key[tid],
                tgid=key[tgid],
                comm=task_name(key[comm]),
                flags=key[flags],
                kernel=walk(kernel_stacks, key[kstack], kernel=True),
                kernel_error=min(0, key[kstack]),
                user=walk(user_stacks, key[ustack]),
                user_error=min(0, key[ustack]),
                contended=value[count],
                total_ns=value[total],
                max_ns=value[max_ns],
                min_ns=value[min_ns],
                cgroup=cgroup_name(key[cgroup]),
            )
            for key, value in rows
        ]
        owner_rows = self._drain_owners(old, kernel_stacks)
        self._program.stacks.tidy(kernel_stacks)
        self._program.stacks.tidy(user_stacks)
        self._age_starts()
        drain = LockDrain(
            self._last, end, tuple(stack_rows), tuple(lock_rows), tuple(task_rows), self.lost(),
            owners=owner_rows, names=self._names(row.address for row in lock_rows),
            run_queues=self._learn_run_queues(), notes=self._notes,
        )
        self._last = end
        return drain


    def _drain_owners(self, old: int, kernel_stacks: Any) -> tuple[OwnerWaits, ...]:
        assert self._program is not None
        if MAP_OWNER_WAITS[old] not in self._program.program.maps:
            return ()
        walk = self._program.stacks.read
        k, v, rows = _drained(self._program.table(MAP_OWNER_WAITS[old]))
        lock, flags, kind = k["lock"], k["flags"], k["owner_kind"]
        owner_tid, owner_tgid, owner_comm = k["owner_tid"], k["owner_tgid"], k["owner_comm"]
        owner_kstack, kstack = k["owner_kstack"], k["kstack"]
        count, total, max_ns, min_ns = _wait_fields(v)
        return tuple(
            OwnerWaits(
                address=key[lock],
                flags=key[flags],
                owner_kind=key[kind],
                owner_tid=key[owner_tid],
                owner_tgid=key[owner_tgid],
                owner_comm=task_name(key[owner_comm]),
                owner_kernel=walk(kernel_stacks, key[owner_kstack], kernel=True),
                owner_kernel_error=min(0, key[owner_kstack]),
                kernel=walk(kernel_stacks, key[kstack], kernel=True),
                kernel_error=min(0, key[kstack]),
                contended=value[count],
                total_ns=value[total],
                max_ns=value[max_ns],
                min_ns=value[min_ns],
            )
            for key, value in rows
        )

    def _names(self, addresses: Iterable[int]) -> dict[int, LockName]:
        """The names the program found for these lock addresses (looked up one by one: a
        drain names the few locks it saw, not the whole cache)."""
        assert self._program is not None
        maps = self._program.program.maps
        if MAP_LOCK_NAMES not in maps:
            return {}
        table = maps[MAP_LOCK_NAMES]
        names = {}
        for address in set(addresses):
            try:
                value = table[table.Key(address)]
            except KeyError:
                continue
            if value.kind == NAME_NONE:
                continue
            # The field read as bytes stops at the first name's NUL: take the whole array.
            field = type(value).path
            raw = ct.string_at(ct.addressof(value) + field.offset, field.size)
            depth = min(value.depth, len(raw) // PATH_NAME)
            names[address] = LockName(
                kind=value.kind, pid=value.pid, comm=value.comm.decode(errors="replace"),
                ino=value.ino, dev=value.dev,
                path=tuple(raw[i * PATH_NAME:(i + 1) * PATH_NAME].split(b"\0", 1)[0]
                           .decode(errors="replace") for i in range(depth)),
            )
        return names

    def _learn_run_queues(self) -> dict[int, int]:
        """Address of each CPU's run-queue lock -> CPU, as the CPUs have shown it so far."""
        assert self._program is not None
        maps = self._program.program.maps
        if self._rq_lock_offset is None or MAP_CPU_RQS not in maps:
            return {}
        if len(self._run_queues) < (os.cpu_count() or 1):
            table = maps[MAP_CPU_RQS]
            for cpu in range(min(RQ_CPUS, os.cpu_count() or 1)):
                rq = table[table.Key(cpu)]
                if rq:
                    self._run_queues[rq + self._rq_lock_offset] = cpu
        return dict(self._run_queues)

    def _age_starts(self) -> None:
        """Drop begins whose thread is gone: their end will never come (the map is bounded,
        and this keeps it from filling with leftovers)."""
        self._stale_begins += forget_entries(
            self._program.table(MAP_TASK_STARTS),
            lambda key, value: value.lock and thread_started_after(key.value, value.time_ns))

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["stale_begin"] = self._stale_begins
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
