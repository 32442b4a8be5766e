"""Endings: bpf/endings.bpf.c on signal_generate, sched_process_exit and oom:mark_victim.

Signals are counted in the kernel per (sender, target, signal, result), drained every
interval, and each one also comes as a record with its sender's stacks through a bounded
ring buffer; each process's end is a record of a ring buffer of its own. Every record
dropped is counted (ktop/losses.py). Never imports Textual.
"""

from __future__ import annotations

import ctypes as ct
import time
from dataclasses import dataclass

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import (
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
    tracepoint_exists,
)
from ktop.collectors.bpfsys import RingBuffer
from ktop.collectors.btf import BTF_PATH, BtfError, KernelBtf
from ktop.collectors.maps import TwoGenerationProgram
from ktop.losses import kernel_names

PROGRAM = "endings.bpf.c"
MAP_SIGNALS = ("signals_0", "signals_1")
MAP_SIGNAL_EVENTS = "signal_events"
MAP_EXIT_EVENTS = "exit_events"
LOST_NAMES = kernel_names("endings")  # its `lost` array, as enum ending_lost orders it
REQUIRED_TRACEPOINTS = ["signal:signal_generate", "sched:sched_process_exit"]
# -D macro -> (struct, member path, size): what bpf/endings.bpf.c reads of the kernel's.
STRUCT_FIELDS = {
    "TASK_TGID": ("task_struct", "tgid", 4),
    "TASK_PID": ("task_struct", "pid", 4),
    "TASK_COMM": ("task_struct", "comm", 16),
    "TASK_MM": ("task_struct", "mm", 8),
    "TASK_SIGNAL": ("task_struct", "signal", 8),
    "TASK_GROUP_LEADER": ("task_struct", "group_leader", 8),
    "TASK_REAL_PARENT": ("task_struct", "real_parent", 8),
    "TASK_EXIT_CODE": ("task_struct", "exit_code", 4),
    "TASK_START_TIME": ("task_struct", "start_time", 8),
    "TASK_SUM_EXEC_RUNTIME": ("task_struct", "se.sum_exec_runtime", 8),
    "SIGNAL_FLAGS": ("signal_struct", "flags", 4),
    "SIGNAL_GROUP_EXIT_CODE": ("signal_struct", "group_exit_code", 4),
    "SIGNAL_SUM_SCHED_RUNTIME": ("signal_struct", "sum_sched_runtime", 8),
    "MM_START_CODE": ("mm_struct", "start_code", 8),
    "MM_END_CODE": ("mm_struct", "end_code", 8),
    "MM_EXE_FILE": ("mm_struct", "exe_file", 8),
    "FILE_DENTRY": ("file", "f_path.dentry", 8),
    "FILE_INODE": ("file", "f_inode", 8),
    "INODE_INO": ("inode", "i_ino", 8),
    "DENTRY_NAME": ("dentry", "d_name.name", 8),
    "DENTRY_PARENT": ("dentry", "d_parent", 8),
}
KSTACK_DEPTH, USTACK_DEPTH = 40, 32  # ENDING_*_DEPTH (bpf/endings.h)
EXE_DEPTH, EXE_NAME = 6, 32
ENDING_SIGNAL, ENDING_EXIT, ENDING_OOM = 1, 2, 3


def struct_offset_flags(btf: KernelBtf) -> list[str]:
    """-D flags with the offsets bpf/endings.bpf.c reads at, and the tracepoints' shapes."""
    flags = []
    for macro, (struct_name, path, size) in STRUCT_FIELDS.items():
        offset, actual = btf.member(struct_name, path)
        if actual != size:
            raise BtfError(f"{struct_name}.{path} is {actual} bytes, not {size}")
        flags.append(f"-D{macro}={offset}")
    if btf.tracepoint_arity("signal_generate") != 5:
        raise BtfError("signal_generate does not pass (sig, info, task, group, result)")
    # sched_process_exit passes group_dead since Linux 6.16: the process's last thread.
    flags.append(f"-DEXIT_GROUP_DEAD_ARG={int(btf.tracepoint_arity('sched_process_exit') >= 2)}")
    return flags


class SignalKey(ct.Structure):
    """struct signal_key in bpf/endings.h."""

    _fields_ = [("sender_pid", ct.c_uint32), ("target_pid", ct.c_uint32),
                ("sig", ct.c_int32), ("result", ct.c_int32), ("cgroup", ct.c_uint64),
                ("sender_comm", ct.c_char * 16), ("target_comm", ct.c_char * 16)]


class SignalEvent(ct.Structure):
    """struct signal_event in bpf/endings.h."""

    _fields_ = [
        ("kind", ct.c_uint32), ("sig", ct.c_int32), ("code", ct.c_int32),
        ("result", ct.c_int32), ("group", ct.c_int32), ("sender_pid", ct.c_uint32),
        ("sender_tid", ct.c_uint32), ("target_pid", ct.c_uint32), ("target_tid", ct.c_uint32),
        ("kstack_bytes", ct.c_int32), ("ustack_bytes", ct.c_int32), ("exe_depth", ct.c_uint32),
        ("ts_ns", ct.c_uint64), ("cgroup", ct.c_uint64), ("start_code", ct.c_uint64),
        ("end_code", ct.c_uint64), ("exe_ino", ct.c_uint64),
        ("sender_comm", ct.c_char * 16), ("target_comm", ct.c_char * 16),
        ("exe", ct.c_char * (EXE_DEPTH * EXE_NAME)),
        ("kstack", ct.c_uint64 * KSTACK_DEPTH), ("ustack", ct.c_uint64 * USTACK_DEPTH),
    ]


class ExitEvent(ct.Structure):
    """struct exit_event in bpf/endings.h."""

    _fields_ = [("kind", ct.c_uint32), ("pid", ct.c_uint32), ("tid", ct.c_uint32),
                ("ppid", ct.c_uint32), ("status", ct.c_int32), ("pad", ct.c_uint32),
                ("ts_ns", ct.c_uint64), ("start_ns", ct.c_uint64), ("cpu_ns", ct.c_uint64),
                ("cgroup", ct.c_uint64), ("comm", ct.c_char * 16)]


class OomEvent(ct.Structure):
    """struct oom_event in bpf/endings.h."""

    _fields_ = [("kind", ct.c_uint32), ("victim_pid", ct.c_uint32),
                ("victim_tid", ct.c_uint32), ("invoker_pid", ct.c_uint32),
                ("ts_ns", ct.c_uint64), ("cgroup", ct.c_uint64),
                ("victim_comm", ct.c_char * 16), ("invoker_comm", ct.c_char * 16)]


assert ct.sizeof(SignalKey) == 56, "keep SignalKey in step with struct signal_key"
assert ct.sizeof(SignalEvent) == 888, "keep SignalEvent in step with struct signal_event"
assert ct.sizeof(ExitEvent) == 72, "keep ExitEvent in step with struct exit_event"
assert ct.sizeof(OomEvent) == 64, "keep OomEvent in step with struct oom_event"


@dataclass(frozen=True, slots=True)
class Executable:
    """The sender's executable as the kernel had it mapped: to name its own frames after
    it is gone (a process killed by its fault is, before any drain)."""

    path: str  # "" when its path was deeper than the program reads
    inode: int
    start_code: int  # its text's start, as mapped (mm->start_code)
    end_code: int


@dataclass(frozen=True, slots=True)
class SignalRecord:
    time: float  # unix time
    sig: int
    code: int
    result: int
    group: bool
    sender_pid: int
    sender_tid: int
    sender_comm: str
    target_pid: int
    target_tid: int
    target_comm: str
    cgroup: str
    kernel: tuple[int, ...]  # innermost first
    user: tuple[int, ...]
    exe: Executable | None


@dataclass(frozen=True, slots=True)
class ExitRecord:
    time: float  # unix time
    pid: int
    tid: int
    ppid: int
    comm: str
    status: int  # wait(2)'s
    lifetime_ns: int  # -1 unknown
    cpu_ns: int
    cgroup: str


@dataclass(frozen=True, slots=True)
class OomRecord:
    time: float
    victim_pid: int
    victim_tid: int
    victim_comm: str
    invoker_pid: int
    invoker_comm: str


@dataclass(frozen=True, slots=True)
class SignalTotal:
    sender_pid: int
    sender_comm: str
    target_pid: int
    target_comm: str
    sig: int
    result: int
    cgroup: str
    count: int


@dataclass(frozen=True, slots=True)
class EndingsDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    totals: tuple[SignalTotal, ...]
    signals: tuple[SignalRecord, ...]  # oldest first
    exits: tuple[ExitRecord, ...]
    ooms: tuple[OomRecord, ...]
    lost: dict[str, int]  # cumulative since start, by reason


def _comm(raw: bytes) -> str:
    return raw.decode(errors="replace")


def exe_path(names: list[str]) -> str:
    """A path from its names innermost first, as the program walks a dentry's parents up to
    its file system's root ("/"); "" when the walk stopped short of it."""
    if not names or names[-1] != "/":
        return ""
    return "/" + "/".join(reversed(names[:-1]))


def exe_names(raw: bytes, depth: int) -> list[str]:
    """The names the program read, EXE_NAME bytes each (ctypes would cut at the first NUL)."""
    return [raw[i * EXE_NAME:(i + 1) * EXE_NAME].split(b"\0", 1)[0].decode(errors="replace")
            for i in range(min(depth, EXE_DEPTH))]


def _frames(ips: ct.Array, returned: int) -> tuple[int, ...]:
    depth = max(0, returned) // 8
    return tuple(ip for ip in ips[:depth] if ip)


class EndingsCollector:
    pane = "endings"

    def __init__(self, cgroups: CgroupNames | None = None) -> None:
        self._program: TwoGenerationProgram | None = None
        self._rings: list[RingBuffer] = []
        self._ended: tuple[int, float] | None = None
        self._last = 0.0
        self._cgroups = cgroups or shared_names()
        self._signals: list[SignalRecord] = []
        self._exits: list[ExitRecord] = []
        self._ooms: list[OomRecord] = []
        self._unix_offset = 0.0

    def start(self) -> None:
        """Compile, load and attach; Unavailable says why not and what would fix it."""
        check_privileges()
        ensure_tracefs()
        require_tracepoints(REQUIRED_TRACEPOINTS, "Linux 3.x and later have them")
        try:
            cflags = struct_offset_flags(KernelBtf.load(BTF_PATH))
        except OSError:
            raise Unavailable(
                f"kernel has no BTF ({BTF_PATH}): the endings pane needs CONFIG_DEBUG_INFO_BTF=y"
            ) from None
        except BtfError as e:
            raise Unavailable(f"cannot read signals and exits on this kernel: {e}") from None
        cflags.append(f"-DHAVE_MARK_VICTIM={int(tracepoint_exists('oom', 'mark_victim'))}")
        # bcc attaches every RAW_TRACEPOINT_PROBE itself as it loads the program.
        self._program = TwoGenerationProgram(load_program(PROGRAM, cflags), LOST_NAMES)
        try:
            self._rings = [RingBuffer(self._program.table(MAP_SIGNAL_EVENTS)),
                           RingBuffer(self._program.table(MAP_EXIT_EVENTS))]
        except (OSError, ValueError) as e:
            self.close()
            raise Unavailable(f"cannot open the endings ring buffers: {e}") from None
        self._last = time.monotonic()

    def programs(self) -> dict[str, int]:
        """The loaded programs' descriptors (for their run time)."""
        return dict(self._program.program.programs) if self._program else {}

    def _unix(self, ts_ns: int) -> float:
        return ts_ns / 1e9 + self._unix_offset

    def _on_record(self, record: memoryview) -> None:
        kind = int.from_bytes(record[:4], "little")
        cgroup_name = self._cgroups.name
        if kind == ENDING_SIGNAL and len(record) >= ct.sizeof(SignalEvent):
            e = SignalEvent.from_buffer_copy(record)
            at = SignalEvent.exe.offset
            names = exe_names(bytes(record[at:at + EXE_DEPTH * EXE_NAME]), e.exe_depth)
            exe = Executable(exe_path(names), e.exe_ino, e.start_code, e.end_code) \
                if e.start_code else None
            self._signals.append(SignalRecord(
                time=self._unix(e.ts_ns), sig=e.sig, code=e.code, result=e.result,
                group=bool(e.group), sender_pid=e.sender_pid, sender_tid=e.sender_tid,
                sender_comm=_comm(e.sender_comm), target_pid=e.target_pid,
                target_tid=e.target_tid, target_comm=_comm(e.target_comm),
                cgroup=cgroup_name(e.cgroup), kernel=_frames(e.kstack, e.kstack_bytes),
                user=_frames(e.ustack, e.ustack_bytes), exe=exe))
        elif kind == ENDING_EXIT and len(record) >= ct.sizeof(ExitEvent):
            x = ExitEvent.from_buffer_copy(record)
            lifetime = x.ts_ns - x.start_ns if 0 < x.start_ns <= x.ts_ns else -1
            self._exits.append(ExitRecord(
                time=self._unix(x.ts_ns), pid=x.pid, tid=x.tid, ppid=x.ppid,
                comm=_comm(x.comm), status=x.status, lifetime_ns=lifetime, cpu_ns=x.cpu_ns,
                cgroup=cgroup_name(x.cgroup)))
        elif kind == ENDING_OOM and len(record) >= ct.sizeof(OomEvent):
            o = OomEvent.from_buffer_copy(record)
            self._ooms.append(OomRecord(self._unix(o.ts_ns), o.victim_pid, o.victim_tid,
                                        _comm(o.victim_comm), o.invoker_pid,
                                        _comm(o.invoker_comm)))

    def end_interval(self) -> None:
        """End the interval now; the next drain() reads it."""
        assert self._program is not None, "start() first"
        self._ended = self._program.swap()

    def drain(self) -> EndingsDrain:
        assert self._program is not None, "start() first"
        old, end = self._ended or self._program.swap()
        self._ended = None
        cgroup_name = self._cgroups.name
        totals = tuple(
            SignalTotal(key.sender_pid, _comm(key.sender_comm), key.target_pid,
                        _comm(key.target_comm), key.sig, key.result, cgroup_name(key.cgroup),
                        int(count.value if hasattr(count, "value") else count))
            for key, count in self._program.table(MAP_SIGNALS[old]).drain()
        )
        self._unix_offset = time.time() - time.monotonic()
        for ring in self._rings:
            ring.consume(self._on_record)
        drain = EndingsDrain(self._last, end, totals, tuple(self._signals),
                             tuple(self._exits), tuple(self._ooms), self.lost())
        self._signals, self._exits, self._ooms = [], [], []
        self._last = end
        return drain

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals.pop("stack_missing", None)  # its stacks come inline: none go missing
        return totals

    def close(self) -> None:
        for ring in self._rings:
            ring.close()
        self._rings = []
        if self._program is not None:
            self._program.close()
            self._program = None
