"""A recording whose two halves differ in known ways, for the compare tests (no root).

Records 0-59 are calm, 60-119 busy, one second each; 100 Hz on one CPU, so a function's CPU%
is its samples a record. Per record:

  pane       calm (0-59)                          busy (60-119)
  functions  calm_func 10, steady_func 20         steady_func 20, spike_func 40
  locks      calm_lock 2 ms, steady_lock 1 ms     steady_lock 3 ms, hot_lock 5 ms
  I/O        dd 100 sda W 1 MiB                    dd 100 sda W 4 MiB, tar 200 sda R 2 MiB
  processes  dd 100 10%, calmd 300 5%             dd 100 50%, tar 200 20%
  waits      dd 100 runq 100 ms                   dd 100 runq 300 ms + D 200 ms, tar 200 D 100 ms
  endings    dd 100 SIGPIPE, calmd 300 SIGUSR1    dd 100 SIGPIPE, tar 200 SIGSEGV (each its own)
             calmd 300 exit 0                     tar 200 SIGSEGV (core dumped)
"""

from __future__ import annotations

from ktop.model import (
    BlockProfile,
    CpuProfile,
    CpuTimes,
    DiskStats,
    IoProcess,
    IoSubmitStack,
    LockCaller,
    LockProfile,
    LockStack,
    LockTask,
    ProcessRow,
    Snapshot,
    StackSample,
    WaitProcess,
    WaitProfile,
    WaitStack,
)
from ktop.panes.endings.model import Ending, EndingsProfile, SignalCount, SignalSent
from ktop.panes.syscalls.model import SlowSyscalls, SyscallProfile, SyscallStat
from ktop.record.fileformat import RecordWriter
from ktop.stacktree import hot_functions

START = 1767268245.0  # 2026-01-01 11:50:45 UTC (the tests run with TZ=UTC)
BUSY = 60  # the first busy record
RECORDS = 120
HZ = 100
MIB = 1 << 20
KERNEL = "[kernel.kallsyms]"


def _cpu(busy: bool) -> CpuProfile:
    def stack(pid: int, comm: str, samples: int, leaf: str, caller: str) -> StackSample:
        return StackSample(pid=pid, comm=comm, samples=samples,
                           frames=(f"{leaf}+0x10", f"{caller}+0x20", "do_syscall_64+0x71"),
                           modules=(KERNEL,) * 3)

    if busy:
        stacks = (stack(100, "dd", 20, "steady_func", "vfs_write"),
                  stack(100, "dd", 30, "spike_func", "vfs_write"),
                  stack(200, "tar", 10, "spike_func", "vfs_read"))
    else:
        stacks = (stack(100, "dd", 20, "steady_func", "vfs_write"),
                  stack(300, "calmd", 10, "calm_func", "vfs_read"))
    total = sum(s.samples for s in stacks)
    return CpuProfile(sample_hz=HZ, cpus=1, window_s=1.0, cumulative=False, total_samples=total,
                      idle_samples=0, kernel_samples=total, user_samples=0, lost={},
                      functions=hot_functions(stacks, HZ), stacks=stacks,
                      times=CpuTimes(user=5.0, kernel=total, idle=95.0 - total, ticks=100))


def _caller(name: str, type_: str, ms: int, pid: int, comm: str) -> LockCaller:
    ns = ms * 1_000_000
    frames = (f"{name}+0x10", "do_syscall_64+0x71")
    return LockCaller(caller=f"{name}+0x10", type=type_, contended=ms, total_wait_ns=ns,
                      max_wait_ns=1_000_000, min_wait_ns=1_000_000,
                      stacks=(LockStack(frames, ms, ns, 1_000_000),),
                      tasks=(LockTask(pid, comm, ms, ns, 1_000_000),))


def _locks(busy: bool) -> LockProfile:
    if busy:
        callers = (_caller("hot_lock", "rwsem", 5, 200, "tar"),
                   _caller("steady_lock", "spinlock", 3, 100, "dd"))
    else:
        callers = (_caller("calm_lock", "mutex", 2, 300, "calmd"),
                   _caller("steady_lock", "spinlock", 1, 100, "dd"))
    return LockProfile(events=sum(c.contended for c in callers), lost={}, callers=callers,
                       locks=(), tasks=tuple(t for c in callers for t in c.tasks), window_s=1.0)


def _io(pid: int, comm: str, rw: str, mib: int) -> IoProcess:
    requests = mib * 4
    return IoProcess(pid=pid, comm=comm, disk="sda", major=8, minor=0, rw=rw, requests=requests,
                     bytes=mib * MIB, avg_lat_ms=1.0, avg_queue_ms=0.1,
                     stacks=(IoSubmitStack(("submit_bio+0x10", f"{comm}_io_path+0x20"),
                                           requests),))


def _blockio(busy: bool) -> BlockProfile:
    processes = ((_io(100, "dd", "W", 4), _io(200, "tar", "R", 2)) if busy
                 else (_io(100, "dd", "W", 1),))
    reads = sum(p.requests for p in processes if p.rw == "R")
    writes = sum(p.requests for p in processes if p.rw == "W")
    disk = DiskStats("sda", 8, 0, reads, writes,
                     sum(p.bytes for p in processes if p.rw == "R"),
                     sum(p.bytes for p in processes if p.rw == "W"), 1.0)
    return BlockProfile(lost={}, disks=(disk,), processes=processes, requests=(), window_s=1.0)


def _process(pid: int, comm: str, cpu: float) -> ProcessRow:
    return ProcessRow(pid=pid, comm=comm, user="root", state="R", cpu_percent=cpu,
                      sys_percent=cpu, threads=1, rss_bytes=MIB, cmdline=comm)


def _wait(pid: int, comm: str, runq_ms: int, d_ms: int) -> tuple[WaitProcess, tuple[WaitStack, ...]]:
    ms = 1_000_000
    process = WaitProcess(pid=pid, comm=comm, cgroup="/", on_cpu_ns=100 * ms,
                          runq_ns=runq_ms * ms, runq_count=runq_ms, blocked_s_ns=0,
                          blocked_d_ns=d_ms * ms, blocked_other_ns=0,
                          blocked_count=d_ms, runq_hist=())
    stacks = (WaitStack(pid=pid, comm=comm, cgroup="/", state="D", reason="io_schedule",
                        frames=("io_schedule+0x10", f"{comm}_wait_path+0x20"), user=(),
                        count=d_ms, total_ns=d_ms * ms, max_ns=ms, hist=(), wakers=()),) if d_ms else ()
    return process, stacks


def _waits(busy: bool) -> WaitProfile:
    rows = [_wait(100, "dd", 300, 200), _wait(200, "tar", 0, 100)] if busy else [_wait(100, "dd", 100, 0)]
    return WaitProfile(processes=tuple(p for p, _ in rows),
                       stacks=tuple(s for _, stacks in rows for s in stacks), lost={}, window_s=1.0)


def _calls(pid: int, comm: str, count: int, errno: str = "") -> tuple[SyscallStat, SlowSyscalls]:
    ms = 1_000_000
    stat = SyscallStat(pid=pid, tid=pid, comm=comm, cgroup="/", syscall="read", errno=errno,
                       count=count, total_ns=count * 2 * ms, max_ns=3 * ms, hist=())
    slow = SlowSyscalls(pid=pid, tid=pid, comm=comm, cgroup="/", syscall="read", errno=errno,
                        frames=("schedule+0x10", f"{comm}_read_path+0x20"), user=(),
                        count=count, total_ns=count * 2 * ms, max_ns=3 * ms, hist=())
    return stat, slow


def _syscalls(busy: bool) -> SyscallProfile:
    rows = ([_calls(100, "dd", 300), _calls(200, "tar", 100, "EAGAIN")] if busy
            else [_calls(100, "dd", 100), _calls(300, "calmd", 10, "ENOENT")])
    return SyscallProfile(calls=tuple(c for c, _ in rows), slow=tuple(s for _, s in rows),
                          lost={}, slow_ns=1_000_000, window_s=1.0)


def _signal(at: float, pid: int, comm: str, signal: str, sig: int, code: str) -> SignalSent:
    """A signal a process sent itself (a write to a closed pipe, a fault, raise())."""
    return SignalSent(time=at, signal=signal, sig=sig, code=code, result="delivered",
                      sender_pid=pid, sender_tid=pid, sender_comm=comm, target_pid=pid,
                      target_tid=pid, target_comm=comm, cgroup="/",
                      kernel=("send_signal_locked+0x10", f"{comm}_signal_path+0x20"),
                      user=(f"{comm}_main+0x1a ({comm})",))


def _endings(busy: bool, at: float) -> EndingsProfile:
    if busy:
        signals = (_signal(at, 100, "dd", "SIGPIPE", 13, "SI_KERNEL"),
                   _signal(at, 200, "tar", "SIGSEGV", 11, "SEGV_MAPERR"))
        segv = signals[1]
        endings = (Ending(time=at, pid=200, ppid=1, comm="tar", cgroup="/",
                          how="SIGSEGV (core dumped)", exit_code=-1, signal="SIGSEGV",
                          lifetime_s=10.0, cpu_s=0.2, killer_pid=200, killer_comm="tar",
                          killer=segv),)
    else:
        signals = (_signal(at, 100, "dd", "SIGPIPE", 13, "SI_KERNEL"),
                   _signal(at, 300, "calmd", "SIGUSR1", 10, "SI_TKILL"))
        endings = (Ending(time=at, pid=300, ppid=1, comm="calmd", cgroup="/", how="exit 0",
                          exit_code=0, signal="", lifetime_s=10.0, cpu_s=0.1),)
    counts = tuple(SignalCount(signal=s.signal, sig=s.sig, result=s.result,
                               sender_pid=s.sender_pid, sender_comm=s.sender_comm,
                               target_pid=s.target_pid, target_comm=s.target_comm,
                               cgroup=s.cgroup, count=1) for s in signals)
    return EndingsProfile(lost={}, endings=endings, signals=signals, counts=counts,
                          exits=len(endings), oom_kills=0, window_s=1.0)


def record(i: int) -> Snapshot:
    busy = i >= BUSY
    processes = ((_process(100, "dd", 50.0), _process(200, "tar", 20.0)) if busy
                 else (_process(100, "dd", 10.0), _process(300, "calmd", 5.0)))
    return Snapshot(ktop_version="test", kernel="6.18.0-test", hostname="testhost",
                    taken_at=START + i, duration_s=1.0, headers="", cpu=_cpu(busy),
                    processes=processes, locks=_locks(busy), blockio=_blockio(busy),
                    waits=_waits(busy), syscalls=_syscalls(busy),
                    endings=_endings(busy, START + i))


def make_compare_recording(path, records: range = range(RECORDS)) -> str:
    writer = RecordWriter(str(path))
    for i in records:
        writer.append(record(i))
    writer.close()
    return str(path)
