"""Per-process CPU from psutil, as top and htop compute it: 100% is one CPU."""

from __future__ import annotations

import os
import pwd
import time

import psutil

from ktop.model import ProcessRow

# psutil status -> the letter top shows.
_STATE_LETTERS = {
    psutil.STATUS_RUNNING: "R",
    psutil.STATUS_SLEEPING: "S",
    psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_STOPPED: "T",
    psutil.STATUS_TRACING_STOP: "t",
    psutil.STATUS_ZOMBIE: "Z",
    psutil.STATUS_DEAD: "X",
    psutil.STATUS_WAKING: "W",
    psutil.STATUS_IDLE: "I",
    psutil.STATUS_PARKED: "P",
}
_ATTRS = ["pid", "name", "uids", "status", "num_threads", "memory_info", "cpu_times", "create_time"]


def task_exists(pid: int) -> bool:
    """A process or thread still running: threads have a /proc/TID too, just unlisted."""
    return os.path.exists(f"/proc/{pid}")


class ProcessCollector:
    pane = "processes"

    def __init__(self) -> None:
        # pid -> (create_time, user+system seconds, system seconds) at the previous refresh;
        # create_time tells a reused pid from the process we measured before.
        self._previous: dict[int, tuple[float, float, float]] = {}
        self._previous_time = 0.0
        self._users: dict[int, str] = {}
        self._cmdlines: dict[tuple[int, float], str] = {}

    def start(self) -> None:
        self.collect()

    def _user_name(self, uid: int) -> str:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    def collect(self) -> tuple[ProcessRow, ...]:
        now = time.monotonic()
        elapsed = now - self._previous_time if self._previous_time else 0.0
        current: dict[int, tuple[float, float, float]] = {}
        rows = []
        for proc in psutil.process_iter(_ATTRS, ad_value=None):
            info = proc.info
            times = info["cpu_times"]
            if times is None or info["create_time"] is None:
                continue  # vanished between listing and reading: gone from this frame
            total, system = times.user + times.system, times.system
            current[info["pid"]] = (info["create_time"], total, system)
            before = self._previous.get(info["pid"])
            cpu = sys = 0.0
            if before and before[0] == info["create_time"] and elapsed > 0:
                cpu = max(0.0, 100.0 * (total - before[1]) / elapsed)
                sys = max(0.0, 100.0 * (system - before[2]) / elapsed)
            memory = info["memory_info"]
            uids = info["uids"]
            rows.append(
                ProcessRow(
                    pid=info["pid"],
                    comm=info["name"] or "?",
                    user=self._user_name(uids.real) if uids else "?",
                    state=_STATE_LETTERS.get(info["status"], "?"),
                    cpu_percent=round(cpu, 1),
                    sys_percent=round(sys, 1),
                    threads=info["num_threads"] or 0,
                    rss_bytes=memory.rss if memory else 0,
                    cmdline=self._cmdline(proc, info["create_time"]),
                )
            )
        self._previous, self._previous_time = current, now
        live = {(pid, c[0]) for pid, c in current.items()}
        self._cmdlines = {k: v for k, v in self._cmdlines.items() if k in live}
        rows.sort(key=lambda r: (-r.cpu_percent, r.pid))
        return tuple(rows)

    def _cmdline(self, proc: psutil.Process, create_time: float) -> str:
        """Read once per process: a command line rarely changes and costs a syscall."""
        key = (proc.pid, create_time)
        if key not in self._cmdlines:
            try:
                self._cmdlines[key] = " ".join(proc.cmdline())
            except (psutil.Error, OSError):
                self._cmdlines[key] = ""
        return self._cmdlines[key]

    def close(self) -> None:
        self._previous.clear()
