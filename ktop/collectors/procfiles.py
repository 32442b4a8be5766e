"""/proc files kept open between refreshes and read again with pread: where their
descriptors live, how many there may be, and how a read gets a whole file.

Where: select() cannot watch a descriptor of 1024 or more (FD_SETSIZE), and the terminal
driver (ktop.ui.driver) and other libraries still call it, on descriptors they open after
the first process scan. A scan keeps up to four descriptors a process, so kept descriptors
are moved above select()'s range (F_DUPFD), leaving the low range to everything else; the
soft RLIMIT_NOFILE is raised towards the hard one to make that room, as many tools do.
Where the limit cannot be raised past select()'s range, nothing can reach it either, and
the kept descriptors share the low range.

How many: one budget for every table of kept descriptors together (stat, io, cgroup,
schedstat), short of the limit by a reserve for BPF maps, programs, perf events, pipes and
files. A file opened when the budget is spent is read and closed, and opened again the next
time (slower, never a failure).

Whole: a /proc file the kernel makes as one record (single_open: /proc/PID/stat, io,
schedstat, cgroup, /proc/stat, pressure) comes whole in one read unless it filled the
buffer; one made of many records (seq_file: /proc/diskstats) gives at most a page of them a
read, so it is read until a read returns nothing.
"""

from __future__ import annotations

import fcntl
import os
import resource
import threading

SELECT_LIMIT = 1024  # FD_SETSIZE: select() refuses a descriptor at or above it
# Descriptors left to everything but kept /proc files (BPF maps, programs and perf events,
# Textual's pipes, recordings, the BPF loader's child and its pipes, transient opens).
RESERVE = 256
HIGH_MARGIN = 64  # above select()'s range, for whatever overflows the low range
RAISE_TO = 1 << 16  # the soft limit asked for, at most (and at most the hard limit)


def raise_fd_limit(target: int = RAISE_TO) -> int:
    """The soft RLIMIT_NOFILE, raised towards min(hard, target) where it is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError):
            pass
    return soft


class KeptFds:
    """The budget of descriptors kept open for later preads, shared by every reader."""

    def __init__(self, limit: int | None = None, room: int | None = None) -> None:
        """limit: the soft RLIMIT_NOFILE to budget within (None: raise it, and take that);
        room: at most this many kept."""
        soft = raise_fd_limit() if limit is None else limit
        if soft > SELECT_LIMIT:
            self.floor = SELECT_LIMIT  # kept above select()'s range, all of it left free
            self.room = max(0, soft - SELECT_LIMIT - HIGH_MARGIN)
        else:  # no descriptor can reach select()'s limit: share the low range
            self.floor = 0
            self.room = max(0, min(soft - RESERVE, soft // 2))
        if room is not None:
            self.room = min(self.room, room)
        self.kept = 0
        self._lock = threading.Lock()

    def keep(self, fd: int) -> int | None:
        """fd, to keep open: the descriptor to use from now on (perhaps a higher copy; fd
        itself is then closed), or None when the budget is spent (fd closed)."""
        with self._lock:
            if self.kept >= self.room:
                os.close(fd)
                return None
            self.kept += 1
        if self.floor and fd < self.floor:
            try:
                high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, self.floor)
            except OSError:  # the limit lowered under us: not kept
                high = None
            os.close(fd)
            if high is None:
                with self._lock:
                    self.kept -= 1
                return None
            fd = high
        return fd

    def release(self, fd: int) -> None:
        """Close a descriptor keep() returned."""
        os.close(fd)
        with self._lock:
            self.kept -= 1


_shared: KeptFds | None = None
_shared_lock = threading.Lock()


def kept_fds() -> KeptFds:
    """The process's one budget (made, and the limit raised, at the first ask)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = KeptFds()
        return _shared


def pread_record(fd: int, size: int) -> bytes:
    """A one-record /proc file whole: one read, unless the record filled the buffer."""
    text = os.pread(fd, size, 0)
    if len(text) < size:
        return text
    return text + pread_to_eof(fd, size, len(text))


def pread_to_eof(fd: int, size: int, offset: int = 0) -> bytes:
    """A /proc file from offset to its end, in reads of size: a seq_file of many records
    gives a page of them a read, a short read that is not its end."""
    chunks = []
    while True:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def task_exists(pid: int) -> bool:
    """A process or thread still running: threads have a /proc/TID too, just unlisted."""
    return os.path.exists(f"/proc/{pid}")
