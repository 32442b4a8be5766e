"""The processes pane's rows: the JSON contract (decoded by ktop.codec from these hints).

ktop.model's Snapshot holds them (its `processes` and `tasks`)."""

from __future__ import annotations

from dataclasses import dataclass

from ktop.frozen import quick_init


@quick_init
@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    comm: str
    user: str
    state: str  # one letter as in top: R S D Z T I
    cpu_percent: float  # 100 = one CPU
    sys_percent: float
    threads: int
    rss_bytes: int
    cmdline: str = ""
    cgroup: str = ""  # cgroup v2 path, as /proc/PID/cgroup says it
    # Bytes a second this process caused to be read from / sent to storage (task I/O
    # accounting, /proc/PID/io: a buffered write counts when it dirties the page cache, not
    # when writeback sends it). None where the kernel does not let ktop read them.
    disk_read_bps: float | None = None
    disk_write_bps: float | None = None
    # User-mode CPU (100 = one CPU); None in recordings made before ktop kept it.
    user_percent: float | None = None
    # A row of pid EXITED_PID: the CPU of children of this process that exited in the
    # interval (counted when it waited for them); comm, user and cmdline are the parent's.
    parent: int = 0
    # Time its threads waited for a CPU (100 = one thread all the time), from schedstat's
    # run_delay; None when unknown (the first refresh, a kernel without schedstats).
    runq_percent: float | None = None

    @property
    def usr_percent(self) -> float:
        """User-mode CPU, from what older recordings kept where they lack it."""
        if self.user_percent is not None:
            return self.user_percent
        return round(max(0.0, self.cpu_percent - self.sys_percent), 1)


@quick_init
@dataclass(frozen=True, slots=True)
class TaskCounts:
    """The kernel's own task counts (/proc/stat) at the processes pane's refresh."""

    running: int  # runnable tasks (threads) at that instant, ktop's reader among them
    blocked: int  # in uninterruptible sleep (mostly waiting for I/O)
    forks_per_s: float | None = None  # tasks started a second over the interval
    # Seconds from the drain that ends the record's interval (its stamp) to the end of the
    # process scan: the processes pane's rows are that much later than the other panes'.
    read_late_s: float = 0.0
