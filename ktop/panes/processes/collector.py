"""Per-process CPU, as top and htop compute it: 100% is one CPU; disk bytes as iotop does.

Each refresh reads two files per process, kept open and read again with pread:
/proc/PID/stat, which holds every number top shows (psutil would read three: stat, status
and statm), and /proc/PID/io, the kernel's task I/O accounting (iotop's DISK READ and DISK
WRITE). /proc/PID/cmdline names a process once (as psutil reads it, without psutil's
import on the way to the first screen); /proc/PID/cgroup is read again only for a process
that ran in the interval, and for all of them every CGROUP_RECHECK refreshes.
"""

from __future__ import annotations

import os
import pwd
import time
from typing import NamedTuple

from ktop.cgroups import parse_proc_cgroup
from ktop.collectors.procfiles import KeptFds, kept_fds, pread_record
from ktop.collectors.runqueue import RunDelays
from ktop.model import EXITED_PID, ProcessRow, TaskCounts

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PROC = "/proc"
_TASK_COMM_LEN = 15  # the kernel keeps 15 characters of a command name
_STAT_MAX = 4096  # /proc/PID/stat is one line of about 300 bytes
_IO_MAX = 512  # /proc/PID/io: seven short lines
_PROC_STAT_MAX = 65536  # /proc/stat: a line per CPU and interrupt counts
_CGROUP_MAX = 4096  # /proc/PID/cgroup: one line per hierarchy (v1 and v2 on a hybrid machine)
CMDLINE_MAX = 4096  # bytes of a command line read and kept; the rest is cut ("...")
# A process moved to another cgroup while it sleeps is seen within this many refreshes (one
# that runs, at once): reading every process's cgroup each refresh cost 0.3 ms for 76.
CGROUP_RECHECK = 10
# A quiet process the kernel saw neither on a CPU nor on a run queue (the waits pane's
# drain) keeps its row without its files read, but is read again at least this often: its
# memory can shrink without it running (reclaim), its parent change (reparenting).
UNREAD_AT_MOST = 5


class Stat(NamedTuple):
    """What one read of /proc/PID/stat tells (times in clock ticks)."""

    comm: str
    state: str
    total: int  # utime + stime
    system: int  # stime
    threads: int
    start: int  # since boot
    rss_pages: int
    ppid: int = 0
    reaped: int = 0  # cutime + cstime: the CPU of the children it has waited for
    reaped_system: int = 0  # cstime
    # Where the command line lives in its memory (arg_start, arg_end, as written): an exec
    # moves it (a new stack), so a change here or in comm says "read the command line again".
    args: tuple[bytes, bytes] = (b"0", b"0")


def parse_stat(text: bytes) -> Stat | None:
    """/proc/PID/stat's figures; the command name sits in parentheses and may itself hold
    ') '."""
    head, sep, tail = text.rpartition(b") ")
    if not sep:
        return None
    fields = tail.split()
    if len(fields) < 22:
        return None
    comm = head.partition(b" (")[2].decode(errors="replace")
    stime, cstime = int(fields[12]), int(fields[14])
    # arg_start and arg_end (Linux 3.5+; 0 for a process not ours to trace, when not root),
    # compared as the bytes they are: read for every process, each refresh
    args = (fields[45], fields[46]) if len(fields) > 46 else (b"0", b"0")
    return _new_tuple(Stat, (comm, fields[0].decode(), int(fields[11]) + stime, stime,
                            int(fields[17]), int(fields[19]), int(fields[21]), int(fields[1]),
                            int(fields[13]) + cstime, cstime, args))


# Made for every process each refresh: a NamedTuple's own __new__ (it takes keywords too)
# costs twice as much.
_new_tuple = tuple.__new__


def _still_at(seen: _Seen, read_at: float) -> _Seen:
    """What was seen of a process whose counters did not move since, as of read_at: its next
    rate is over the time since, not since its last change (a process idle for three
    refreshes that then burns a second read 33%, not 100%)."""
    return _new_tuple(_Seen, (*seen[:-1], read_at))


def parse_io(text: bytes) -> tuple[int, int] | None:
    """(read_bytes, write_bytes) from /proc/PID/io: bytes the process made the storage layer
    read, and bytes it dirtied for writing (charged when written to the page cache)."""
    fields = text.split()  # rchar: N wchar: N syscr: N syscw: N read_bytes: N write_bytes: N
    if len(fields) < 12 or fields[8] != b"read_bytes:" or fields[10] != b"write_bytes:":
        return None
    try:
        return int(fields[9]), int(fields[11])
    except ValueError:
        return None


def boot_ticks() -> float:
    """Clock ticks since boot, as /proc/PID/stat's start time counts them."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS


def real_uid(status: bytes) -> int | None:
    for line in status.splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    return None


class _Seen(NamedTuple):
    """A process as the previous refresh read it."""

    start: int
    total: int
    system: int
    read_bytes: int
    written_bytes: int
    reaped: int
    reaped_system: int
    ppid: int
    # time.monotonic() when its stat was read: each process's rate is over its own interval.
    # A scan preempted on saturated CPUs reads some processes hundreds of ms later than it
    # began, and dividing by the scans' interval made a cgroup of two CPUs read 204%.
    read_at: float = 0.0


_INIT = 1  # orphans are reparented to init, which reaps them


class _Debts:
    """What children that are gone already showed in their own rows while ktop saw them
    alive, owed by the process that counts them again when it waits for them: the kernel
    adds a child's whole life to its parent's cutime/cstime and /proc/PID/io then. Kept a
    few refreshes, as a parent may wait later than ktop looks."""

    REFRESHES = 3

    def __init__(self) -> None:
        # pid -> (its start, amounts owed, refreshes left)
        self._owed: dict[int, tuple[int, tuple[int, ...], int]] = {}
        self._settled: set[int] = set()

    def add(self, pid: int, start: int, amounts: tuple[int, ...]) -> None:
        known = self._owed.get(pid)
        if known is not None and known[0] == start:
            amounts = tuple(a + b for a, b in zip(known[1], amounts))
        self._owed[pid] = (start, amounts, self.REFRESHES)

    def owes(self, pid: int) -> bool:
        return pid in self._owed

    def settle(self, pid: int, start: int, gained: tuple[int, ...]) -> tuple[int, ...]:
        """What a process's counters gained, less what it owes; the rest stays owed."""
        known = self._owed.pop(pid, None)
        if known is None or known[0] != start:
            return gained
        left = tuple(max(0, o - g) for g, o in zip(gained, known[1]))
        if any(left):
            self._owed[pid] = (start, left, self.REFRESHES)
            self._settled.add(pid)
        return tuple(max(0, g - o) for g, o in zip(gained, known[1]))

    def age(self, current: dict[int, _Seen]) -> None:
        """Once a refresh: forget what is owed by processes gone, or for too long."""
        for pid, (start, owed, refreshes) in list(self._owed.items()):
            if pid in self._settled:
                continue
            if refreshes <= 1 or pid not in current or current[pid].start != start:
                del self._owed[pid]
            else:
                self._owed[pid] = (start, owed, refreshes - 1)
        self._settled.clear()


class ProcessCollector:
    pane = "processes"

    def __init__(self, proc: str = _PROC, kept: KeptFds | None = None) -> None:
        self._proc = proc
        # Each process at the previous refresh; the start time tells a reused pid from the
        # process we measured before.
        self._previous: dict[int, _Seen] = {}
        self._previous_time = 0.0
        self._previous_boot_ticks = 0.0
        self._users: dict[int, str] = {}
        # Read once per process (and again after an exec renames it): they rarely change.
        self._uids: dict[tuple[int, int, str], int | None] = {}
        # pid -> ((start, comm, where the arguments are), command line): an exec changes
        # the last two.
        self._cmdlines: dict[int, tuple[tuple[int, str, tuple[bytes, bytes]], str]] = {}
        # /proc/PID/stat stays open between refreshes: one pread instead of open, read and
        # close (1.0 to 0.3 ms for 70 processes). A descriptor keeps naming its own process:
        # once that exits, reading it fails (ESRCH), even if the pid is taken again.
        self._stat_fds: dict[int, int] = {}
        self._io_fds: dict[int, int] = {}
        self._cgroup_fds: dict[int, int] = {}
        self._cgroups: dict[int, tuple[int, str]] = {}  # pid -> (start ticks, v2 path)
        self._unreadable_io: set[tuple[int, int]] = set()  # (pid, start): EACCES, not root
        self._refreshes = 0
        # One budget for every kept descriptor, the run-queue reader's too (procfiles).
        self._kept = kept if kept is not None else kept_fds()
        # A process whose figures did not change keeps its row object (most, when idle).
        self._rows: dict[int, tuple[tuple, ProcessRow]] = {}
        # What /proc/PID/stat and io read last time: unchanged, a quiet row stands as it was.
        self._raw: dict[int, tuple[bytes, bytes | None]] = {}
        self._rates_shown = False  # the last rows had rates (not the first refresh's)
        # Gone children's CPU ticks (total, system) and disk bytes (read, written).
        self._cpu_owed = _Debts()
        self._disk_owed = _Debts()
        # pid -> (start, (read, written)): the bytes of its dead tasks (reaped children and
        # exited threads) in its /proc/PID/io, for processes that wait for children.
        self._dead_io: dict[int, tuple[int, tuple[int, int]]] = {}
        self._proc_stat_fd: int | None = None
        self._previous_forks: int | None = None
        # The kernel's counts at the last refresh: runnable and blocked tasks, forks a second.
        self.tasks: TaskCounts | None = None
        self._run_delays = RunDelays(proc, self._kept)  # RUNQ%: schedstat's run_delay

    def start(self) -> None:
        self.collect()

    def _user_name(self, uid: int | None) -> str:
        if uid is None:
            return "?"
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    def _pread(self, fds: dict[int, int], pid: int, name: str, size: int) -> bytes | None:
        """/proc/PID/name, through a descriptor kept open for the next refresh."""
        fd = fds.pop(pid, None)
        if fd is not None:
            try:
                text = pread_record(fd, size)
                fds[pid] = fd
                return text
            except OSError:  # its process exited: the pid may name a new one now
                self._kept.release(fd)
        try:
            fd = os.open(f"{self._proc}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # vanished between listing and reading, or not ours to read
            return None
        try:
            text = pread_record(fd, size)
        except OSError:
            os.close(fd)
            return None
        kept = self._kept.keep(fd)  # closed when there is no room: opened again next time
        if kept is not None:
            fds[pid] = kept
        return text

    def _io_text(self, pid: int, start: int) -> bytes | None:
        if (pid, start) in self._unreadable_io:
            return None
        return self._pread(self._io_fds, pid, "io", _IO_MAX)

    def _disk_bytes(self, pid: int, start: int, text: bytes | None) -> tuple[int, int] | None:
        counts = None if text is None else parse_io(text)
        if counts is None and (pid, start) not in self._unreadable_io and os.path.exists(
                f"{self._proc}/{pid}"):
            self._unreadable_io.add((pid, start))  # not ours (ptrace rules): ask once
        return counts

    def _still(self, pid: int, recheck: bool) -> tuple[_Seen, ProcessRow] | None:
        """What was seen of a process whose row showed nothing moving (no CPU, no disk, no
        run queue), if it may stand as it was; None: read it."""
        if recheck or not self._rates_shown or self._disk_owed.owes(pid):
            return None  # cgroups asked again, no rates yet, or a debt to settle
        seen, kept = self._previous.get(pid), self._rows.get(pid)
        if seen is None or kept is None:
            return None
        figures, row = kept
        if figures[3] or figures[4] or figures[7] or figures[8] or figures[11]:  # CPU, SYS, disk, RUNQ
            return None
        return seen, row

    def _quiet(self, pid: int, stat_text: bytes,
               recheck: bool) -> tuple[_Seen, ProcessRow, bytes | None] | None:
        """A process whose row showed nothing moving and whose stat and io files read byte
        for byte as last time: its row stands as it was, unparsed (most processes of an
        idle machine, ~60 of 72 here)."""
        raw = self._raw.get(pid)
        if raw is None or raw[0] != stat_text:
            return None
        still = self._still(pid, recheck)
        if still is None:
            return None
        seen, row = still
        io_text = self._io_text(pid, seen.start)
        return (seen, row, io_text) if io_text == raw[1] else None

    def _cgroup(self, pid: int, start: int, ran: bool) -> str:
        known = self._cgroups.get(pid)
        if known is not None and known[0] == start and not ran and self._refreshes % CGROUP_RECHECK:
            return known[1]
        text = self._pread(self._cgroup_fds, pid, "cgroup", _CGROUP_MAX)
        path = parse_proc_cgroup(text) if text else (known[1] if known else "")
        self._cgroups[pid] = (start, path)
        return path

    def _uid(self, pid: int, start: int, comm: str) -> int | None:
        key = (pid, start, comm)
        if key not in self._uids:
            try:
                with open(f"{self._proc}/{pid}/status", "rb") as f:
                    self._uids[key] = real_uid(f.read())
            except OSError:
                self._uids[key] = None
        return self._uids[key]

    def collect(self, ran: frozenset[int] | set[int] | None = None) -> tuple[ProcessRow, ...]:
        """Every process's row. `ran`: the processes the kernel saw on a CPU or a run queue
        since the last collect, when known (None: not): a quiet one not among them cannot
        have used CPU, read, written or waited for a CPU, and keeps its row unread (its
        files: two reads a process), up to UNREAD_AT_MOST refreshes."""
        now, now_ticks = time.monotonic(), boot_ticks()
        elapsed = now - self._previous_time if self._previous_time else 0.0
        self._refreshes += 1
        current: dict[int, _Seen] = {}
        read = []
        rows = []
        raw: dict[int, tuple[bytes, bytes | None]] = {}
        recheck = self._refreshes % CGROUP_RECHECK == 0  # the cgroups of all, this time
        if ran is None or self._refreshes % UNREAD_AT_MOST == 0:
            ran = None  # every process read
        for entry in os.listdir(self._proc):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if ran is not None and pid not in ran and pid in self._raw:
                still = self._still(pid, recheck)
                if still is not None:
                    seen, row = still
                    current[pid] = _still_at(seen, time.monotonic())
                    raw[pid] = self._raw[pid]
                    rows.append(row)
                    continue
            text = self._pread(self._stat_fds, pid, "stat", _STAT_MAX)
            if text is None:
                continue
            read_at = time.monotonic()
            quiet = self._quiet(pid, text, recheck)
            if quiet is not None:
                seen, row, io_text = quiet
                current[pid] = _still_at(seen, read_at)
                raw[pid] = (text, io_text)
                rows.append(row)
                continue
            stat = parse_stat(text)
            if stat is None:
                continue
            io_text = self._io_text(pid, stat.start)
            raw[pid] = (text, io_text)
            disk = self._disk_bytes(pid, stat.start, io_text)
            read_bytes, written_bytes = disk or (0, 0)
            current[pid] = _new_tuple(_Seen, (stat.start, stat.total, stat.system, read_bytes,
                                              written_bytes, stat.reaped, stat.reaped_system,
                                              stat.ppid, read_at))
            read.append((pid, stat, disk, read_at))
        self._raw, self._rates_shown = raw, elapsed > 0
        self._owe_for_the_gone(current)
        # pid -> (its own interval, what its exited children added: reaped ticks (total,
        # system), disk bytes (read, written) or None where unknown)
        reapers: dict[int, tuple[float, tuple[int, int], tuple[int, int] | None]] = {}
        for pid, stat, disk, read_at in read:
            comm, state, total, system, threads, start, rss_pages, ppid, reaped, reaped_sys, args = stat
            before = self._previous.get(pid)
            cpu = sys = 0.0
            disk_read = disk_write = None
            born = (before is None or before.start != start) and start >= self._previous_boot_ticks
            runq_ns = self._run_delays.delta_ns(pid, start, threads, born)
            runq = round(100.0 * runq_ns / 1e9 / elapsed, 1) if runq_ns is not None and elapsed > 0 else None
            if born:
                # Born in the interval: its counters started at zero (a dd that burns half a
                # second of CPU and writes 64 MiB before the next refresh is seen once, and
                # counted).
                before = _Seen(start, 0, 0, 0, 0, 0, 0, ppid, self._previous_time)
                born = True
            span = read_at - before.read_at if before else 0.0
            if before and before.start == start and elapsed > 0 and span > 0:
                cpu = max(0.0, 100.0 * (total - before.total) / _TICKS / span)
                sys = max(0.0, 100.0 * (system - before.system) / _TICKS / span)
                reaped_gain = (reaped - before.reaped, reaped_sys - before.reaped_system)
                children_disk = None
                if disk is not None:
                    gained = (max(0, disk[0] - before.read_bytes),
                              max(0, disk[1] - before.written_bytes))
                    children_disk = self._childrens_bytes(
                        pid, start, born, gained, waited=reaped != before.reaped)
                    if children_disk is None:  # not told apart: as its own, less what
                        gained = self._disk_owed.settle(pid, start, gained)  # they showed
                    else:
                        gained = (gained[0] - children_disk[0], gained[1] - children_disk[1])
                        # A child's bytes join its parent's when it is waited for: those its
                        # own row showed are not new (a shell's dd, 50 MiB at its exit).
                        children_disk = self._disk_owed.settle(pid, start, children_disk)
                    disk_read, disk_write = gained[0] / span, gained[1] / span
                if reaped_gain[0] or (children_disk and any(children_disk)):
                    reapers[pid] = (span, reaped_gain, children_disk)
            cgroup = self._cgroup(pid, start, ran=before is None or total != before.total)
            cpu, sys = round(cpu, 1), round(sys, 1)
            figures = (start, comm, state, cpu, sys, threads, rss_pages,
                       _rounded(disk_read), _rounded(disk_write), cgroup, args, runq)
            kept = self._rows.get(pid)
            if kept is not None and kept[0] == figures:
                rows.append(kept[1])
                continue
            cmdline = self._cmdline(pid, start, comm, args)
            row = ProcessRow(
                pid=pid,
                comm=_full_name(comm, cmdline) or "?",
                user=self._user_name(self._uid(pid, start, comm)),
                state=state,
                cpu_percent=cpu,
                sys_percent=sys,
                user_percent=round(max(0.0, cpu - sys), 1),
                threads=threads,
                rss_bytes=rss_pages * _PAGE,
                cmdline=cmdline,
                cgroup=cgroup,
                disk_read_bps=figures[7],
                disk_write_bps=figures[8],
                runq_percent=runq,
            )
            self._rows[pid] = (figures, row)
            rows.append(row)
        if elapsed > 0:
            rows += self._exited_rows(current, reapers)
        self._cpu_owed.age(current)
        self._disk_owed.age(current)
        self.tasks = self._task_counts(elapsed)
        self._previous, self._previous_time, self._previous_boot_ticks = current, now, now_ticks
        live = {(pid, c.start) for pid, c in current.items()}
        self._uids = {k: v for k, v in self._uids.items() if k[:2] in live}
        self._unreadable_io &= live
        self._run_delays.forget(live)
        for table in (self._rows, self._cgroups, self._cmdlines, self._dead_io):
            for gone in [pid for pid in table if pid not in current]:
                del table[gone]
        for fds in (self._stat_fds, self._io_fds, self._cgroup_fds):
            for gone in [pid for pid in fds if pid not in current]:
                self._kept.release(fds.pop(gone))
        rows.sort(key=lambda r: (-r.cpu_percent, r.pid))
        return tuple(rows)

    def _owe_for_the_gone(self, current: dict[int, _Seen]) -> None:
        """Each process seen last time and gone now: what it showed is owed by whoever
        waited for it."""
        for pid, seen in self._previous.items():
            now = current.get(pid)
            if now is not None and now.start == seen.start:
                continue
            waiter = self._waiter(seen.ppid, current)
            start = current[waiter].start if waiter in current else 0
            self._cpu_owed.add(waiter, start, (seen.total + seen.reaped,
                                               seen.system + seen.reaped_system))
            self._disk_owed.add(waiter, start, (seen.read_bytes, seen.written_bytes))

    def _childrens_bytes(self, pid: int, start: int, born: bool, gained: tuple[int, int],
                         waited: bool) -> tuple[int, int] | None:
        """Of what /proc/PID/io gained, the bytes of children it waited for (the kernel adds
        a child's whole I/O to its parent's then, in no field of its own): what its dead
        tasks' share grew by, that is its whole count less its live threads' (each
        thread's /proc/PID/task/TID/io is its own). Asked only of a process that waits for
        children. None where the threads cannot be read."""
        known = self._dead_io.get(pid)
        if known is not None and known[0] != start:
            known = None
        waited = waited or self._disk_owed.owes(pid)
        if not (gained[0] or gained[1]) or not (waited or known):
            return (0, 0) if known else None
        dead = self._dead_tasks_io(pid)
        if dead is None:
            return None
        before = known[1] if known else (0, 0) if born else None
        if before is not None:
            dead = (max(dead[0], before[0]), max(dead[1], before[1]))
        self._dead_io[pid] = (start, dead)
        if not waited:  # no child waited for: its threads that exited, whose bytes it showed
            return (0, 0)
        if before is None:  # first seen waiting: its dead tasks' bytes, at most
            return (min(gained[0], dead[0]), min(gained[1], dead[1]))
        return (min(gained[0], dead[0] - before[0]), min(gained[1], dead[1] - before[1]))

    def _dead_tasks_io(self, pid: int) -> tuple[int, int] | None:
        """(read, written) of /proc/PID/io that no live thread holds: reaped children's and
        exited threads'. The threads are read first and the whole after, so a thread
        writing meanwhile cannot make the rest look negative."""
        live = [0, 0]
        try:
            threads = os.listdir(f"{self._proc}/{pid}/task")
            for tid in threads:
                with open(f"{self._proc}/{pid}/task/{tid}/io", "rb") as f:
                    counts = parse_io(f.read(_IO_MAX))
                if counts is None:
                    return None
                live[0] += counts[0]
                live[1] += counts[1]
            with open(f"{self._proc}/{pid}/io", "rb") as f:
                whole = parse_io(f.read(_IO_MAX))
        except OSError:  # gone, or not ours to read
            return None
        if whole is None:
            return None
        return max(0, whole[0] - live[0]), max(0, whole[1] - live[1])

    def _exited_rows(
        self, current: dict[int, _Seen],
        reapers: dict[int, tuple[float, tuple[int, int], tuple[int, int] | None]],
    ) -> list[ProcessRow]:
        """The CPU and disk bytes of children that exited and were waited for in the
        interval, one row per parent: what their parent's cutime and cstime (and its dead
        tasks' share of /proc/PID/io) gained (the kernel adds a child's whole life, its own
        reaped children's included, when its parent waits for it), less what the children
        had already shown while we saw them alive."""
        rows = []
        for pid, (span, gained, disk) in reapers.items():
            total, system = self._cpu_owed.settle(pid, current[pid].start, gained)
            if total or (disk and any(disk)):
                rows.append(self._exited_row(pid, total, min(system, total), disk, span))
        return rows

    def _waiter(self, parent: int, current: dict[int, _Seen]) -> int:
        """Who will count a gone child's CPU in its reaped counters: its parent, or, if that
        has exited too (having waited for it, as a parent does), the first ancestor still
        alive; init, when no ancestor is known."""
        for _ in range(64):  # a chain of processes gone in one interval; never a cycle
            if parent in current:
                return parent
            gone = self._previous.get(parent)
            if gone is None:
                break
            parent = gone.ppid
        return _INIT

    def _exited_row(self, parent: int, total: int, system: int, disk: tuple[int, int] | None,
                    elapsed: float) -> ProcessRow:
        cpu = round(100.0 * total / _TICKS / elapsed, 1)
        sys = round(100.0 * system / _TICKS / elapsed, 1)
        kept = self._rows.get(parent)
        of = kept[1] if kept is not None else None
        return ProcessRow(
            pid=EXITED_PID,
            parent=parent,
            comm=of.comm if of else "?",
            user=of.user if of else "?",
            state="X",  # dead, as ps says
            cpu_percent=cpu,
            sys_percent=sys,
            user_percent=round(max(0.0, cpu - sys), 1),
            threads=0,
            rss_bytes=0,
            cmdline=of.cmdline if of else "",
            cgroup=of.cgroup if of else "",
            disk_read_bps=None if disk is None else _rounded(disk[0] / elapsed),
            disk_write_bps=None if disk is None else _rounded(disk[1] / elapsed),
        )

    def _task_counts(self, elapsed: float) -> TaskCounts | None:
        """Runnable and blocked tasks as the kernel counts them now (a scan of states finds
        none running under fork churn: the runners exit before they are read), and tasks
        started a second."""
        if self._proc_stat_fd is None:
            try:
                self._proc_stat_fd = os.open(f"{self._proc}/stat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
        try:  # whole: the interrupt counts of a big machine can outgrow the buffer
            counts = parse_task_counts(pread_record(self._proc_stat_fd, _PROC_STAT_MAX))
        except OSError:
            return None
        if counts is None:
            return None
        running, blocked, forks = counts
        rate = None
        if self._previous_forks is not None and elapsed > 0:
            rate = round(max(0, forks - self._previous_forks) / elapsed, 1)
        self._previous_forks = forks
        return TaskCounts(running=running, blocked=blocked, forks_per_s=rate)

    def _cmdline(self, pid: int, start: int, comm: str, args: tuple[bytes, bytes]) -> str:
        """Read once per process, and again after an exec (a new comm, or its arguments
        moved): a command line rarely changes and costs a syscall."""
        key = (start, comm, args)
        known = self._cmdlines.get(pid)
        if known is None or known[0] != key:
            known = self._cmdlines[pid] = (key, read_cmdline(f"{self._proc}/{pid}/cmdline"))
        return known[1]

    def close(self) -> None:
        self._previous.clear()
        self._rows.clear()
        for fds in (self._stat_fds, self._io_fds, self._cgroup_fds):
            for fd in fds.values():
                self._kept.release(fd)
            fds.clear()
        if self._proc_stat_fd is not None:
            os.close(self._proc_stat_fd)
            self._proc_stat_fd = None
        self._run_delays.close()


def parse_task_counts(text: bytes) -> tuple[int, int, int] | None:
    """(procs_running, procs_blocked, processes: tasks forked since boot) from /proc/stat."""
    found: dict[bytes, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if name in (b"procs_running", b"procs_blocked", b"processes"):
            found[name] = int(value)
    if len(found) < 3:
        return None
    return found[b"procs_running"], found[b"procs_blocked"], found[b"processes"]


def read_cmdline(path: str) -> str:
    """A command line as htop shows it: arguments NUL-separated, joined by spaces. A process
    that rewrote its arguments ("postgres: writer") ends without a NUL. Kernel threads and
    processes gone or hidden from us have none: "". Its first CMDLINE_MAX bytes, then "...":
    any user can run processes of 2 MB command lines, kept in every row and record."""
    try:
        with open(path, "rb") as f:
            data = f.read(CMDLINE_MAX + 1)
    except OSError:
        return ""
    cut = len(data) > CMDLINE_MAX
    data = data[:CMDLINE_MAX] if cut else data
    data = data[:-1] if data.endswith(b"\0") else data.removesuffix(b" ")
    text = data.replace(b"\0", b" ").decode(errors="replace")
    return text + "..." if cut else text


def _rounded(rate: float | None) -> float | None:
    """Bytes a second, to the byte: a row whose rates did not move keeps its object."""
    return None if rate is None else float(round(rate))


def _full_name(comm: str, cmdline: str) -> str:
    """The kernel cuts command names at 15 characters; the program's own name is whole in
    its command line (as psutil and htop take it)."""
    if len(comm) >= _TASK_COMM_LEN and cmdline:
        program = os.path.basename(cmdline.split(" ", 1)[0])
        if program.startswith(comm):
            return program
    return comm
