"""Run-queue time per process without BPF: the kernel's own run_delay (CONFIG_SCHED_INFO),
from /proc/PID/task/TID/schedstat ("on-CPU ns, run-queue ns, timeslices"), summed over a
process's threads. /proc/PID/schedstat is the main thread's alone, so a process of one
thread is read there; one of several threads reads each thread's file. Each file is read
through a descriptor kept open, as /proc/PID/stat is. The Processes pane asks only for
processes that ran in the interval: run_delay grows only when a waiting thread gets a CPU.
"""

from __future__ import annotations

import os

from ktop.collectors.procfiles import KeptFds, kept_fds, pread_record

_SCHEDSTAT_MAX = 128


def parse_run_delay(text: bytes) -> int | None:
    fields = text.split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


class RunDelays:
    """Each process's run-queue ns since the last time it was asked about."""

    def __init__(self, proc: str = "/proc", kept: KeptFds | None = None) -> None:
        self._proc = proc
        # pid -> {tid: its schedstat, kept open}: a read is then one pread, not an open, a
        # read and a close through Python's file object (7 system calls, ~25 us).
        self._fds: dict[int, dict[int, int]] = {}
        self._kept = kept if kept is not None else kept_fds()
        # (pid, start) -> {tid: run_delay at the last ask}
        self._last: dict[tuple[int, int], dict[int, int]] = {}

    def _tids(self, pid: int, threads: int) -> list[int]:
        if threads <= 1:
            return [pid]
        try:
            return [int(tid) for tid in os.listdir(f"{self._proc}/{pid}/task")]
        except (OSError, ValueError):
            return []

    def _read(self, pid: int, threads: int) -> dict[int, int]:
        """run_delay of each of the process's threads, through descriptors kept open; a
        thread's descriptor keeps naming it, and fails once it has exited."""
        kept = self._fds.pop(pid, {})
        fds: dict[int, int] = {}
        delays: dict[int, int] = {}
        tids = self._tids(pid, threads)
        for tid in kept.keys() - set(tids):  # threads gone since: their room is free first
            self._close(kept.pop(tid))
        for tid in tids:
            fd = kept.pop(tid, None)
            text = None
            if fd is not None:
                try:
                    text = pread_record(fd, _SCHEDSTAT_MAX)
                    fds[tid] = fd
                except OSError:
                    self._close(fd)
                    fd = None
            if fd is None:
                # One thread: /proc/PID/schedstat is the main thread's own.
                path = f"{self._proc}/{pid}/" + ("schedstat" if threads <= 1
                                                 else f"task/{tid}/schedstat")
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    text = pread_record(fd, _SCHEDSTAT_MAX)
                except OSError:
                    os.close(fd)
                    continue
                kept_fd = self._kept.keep(fd)  # closed when there is no room
                if kept_fd is not None:
                    fds[tid] = kept_fd
            value = parse_run_delay(text or b"")
            if value is not None:
                delays[tid] = value
        if fds:
            self._fds[pid] = fds
        return delays

    def _close(self, fd: int) -> None:
        self._kept.release(fd)

    def delta_ns(self, pid: int, start: int, threads: int, born: bool = False) -> int | None:
        """Run-queue ns the process's threads gained since the last ask (None the first
        time, unless it was born since: then from zero; None if unreadable); a thread new
        since then counts from zero."""
        now = self._read(pid, threads)
        before = self._last.get((pid, start), {} if born else None)
        self._last[(pid, start)] = now
        if before is None or not now:
            return None
        return sum(max(0, value - before.get(tid, 0)) for tid, value in now.items())

    def forget(self, live: set[tuple[int, int]]) -> None:
        """Drop what is kept of processes no longer alive."""
        for key in [k for k in self._last if k not in live]:
            del self._last[key]
        pids = {pid for pid, _ in live}
        for pid in [p for p in self._fds if p not in pids]:
            for fd in self._fds.pop(pid).values():
                self._close(fd)

    def close(self) -> None:
        for fds in self._fds.values():
            for fd in fds.values():
                self._close(fd)
        self._fds.clear()
