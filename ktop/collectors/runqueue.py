"""Run-queue time per process without BPF: the kernel's own run_delay (CONFIG_SCHED_INFO),
from /proc/PID/task/TID/schedstat ("on-CPU ns, run-queue ns, timeslices"), summed over a
process's threads. /proc/PID/schedstat is the main thread's alone, so a process of one
thread is read there, through a descriptor kept open as /proc/PID/stat is; one of several
threads reads each thread's file. The Processes pane asks only for processes that ran in the
interval: run_delay grows only when a waiting thread gets a CPU.
"""

from __future__ import annotations

import os

_SCHEDSTAT_MAX = 128


def parse_run_delay(text: bytes) -> int | None:
    fields = text.split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


class RunDelays:
    """Each process's run-queue ns since the last time it was asked about."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self._fds: dict[int, int] = {}  # pid -> its kept-open schedstat (one thread)
        # (pid, start) -> {tid: run_delay at the last ask}
        self._last: dict[tuple[int, int], dict[int, int]] = {}

    def _read_kept(self, pid: int) -> int | None:
        fd = self._fds.pop(pid, None)
        if fd is None:
            try:
                fd = os.open(f"{self._proc}/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
        try:
            value = parse_run_delay(os.pread(fd, _SCHEDSTAT_MAX, 0))
        except OSError:  # exited: the descriptor names it still, and fails
            os.close(fd)
            return None
        self._fds[pid] = fd
        return value

    def _read_threads(self, pid: int) -> dict[int, int]:
        delays: dict[int, int] = {}
        try:
            tids = os.listdir(f"{self._proc}/{pid}/task")
        except OSError:
            return delays
        for tid in tids:
            try:
                with open(f"{self._proc}/{pid}/task/{tid}/schedstat", "rb") as f:
                    value = parse_run_delay(f.read(_SCHEDSTAT_MAX))
            except OSError:
                continue
            if value is not None:
                delays[int(tid)] = value
        return delays

    def delta_ns(self, pid: int, start: int, threads: int, born: bool = False) -> int | None:
        """Run-queue ns the process's threads gained since the last ask (None the first
        time, unless it was born since: then from zero; None if unreadable); a thread new
        since then counts from zero."""
        if threads <= 1:
            value = self._read_kept(pid)
            now = {pid: value} if value is not None else {}
        else:
            old = self._fds.pop(pid, None)
            if old is not None:
                os.close(old)
            now = self._read_threads(pid)
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
            os.close(self._fds.pop(pid))

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
