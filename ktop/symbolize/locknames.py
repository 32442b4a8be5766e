"""Lock addresses named by what they are: what the BPF program found at a wait's begin (an
mm's mmap_lock, a sighand's siglock, an inode's i_rwsem with its dentry names), the run
queues the CPUs showed, a kallsyms symbol, or else a global of the kernel image that
kallsyms cannot name (it holds text symbols only without CONFIG_KALLSYMS_ALL)."""

from __future__ import annotations

import os
import re
import select
import time
import weakref

from ktop.collectors.locks import NAME_INODE_RWSEM, NAME_MMAP_LOCK, NAME_SIGLOCK, LockName

MMAP_LOCK = "&mm->mmap_lock"
SIGLOCK = "&sighand->siglock"
I_RWSEM = "&inode->i_rwsem"
RQ_LOCK = "runqueues.__lock"
KERNEL_GLOBAL = "[kernel global]"  # in the kernel image, but kallsyms holds no data symbols
# Where x86-64 maps the kernel image (to the modules area, which starts 1 GiB below the top).
KERNEL_IMAGE = (0xFFFFFFFF80000000, 0xFFFFFFFFC0000000)

_OCTAL = re.compile(r"\\([0-7]{3})")
# A device not among the mounts is looked for again when the mount table changed (poll() on
# /proc's mountinfo says so), or, where that cannot be told (not /proc), after this long.
MISS_REREAD_S = 10.0


def kernel_dev(dev: int) -> tuple[int, int]:
    """The kernel's dev_t (major << 20 | minor) as (major, minor)."""
    return dev >> 20, dev & 0xFFFFF


def mount_points(mountinfo: str) -> dict[tuple[int, int], str]:
    """(major, minor) -> where that file system's root is mounted, from /proc/self/mountinfo
    text (the first mount of its root; octal escapes undone)."""
    found: dict[tuple[int, int], str] = {}
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 5 or fields[3] != "/":
            continue
        major, _, minor = fields[2].partition(":")
        try:
            key = (int(major), int(minor))
        except ValueError:
            continue
        found.setdefault(key, _OCTAL.sub(lambda m: chr(int(m[1], 8)), fields[4]))
    return found


class LockNamer:
    """Names for lock addresses, from what a drain found and what it knows of the kernel."""

    def __init__(self, mountinfo_path: str = "/proc/self/mountinfo") -> None:
        self._mountinfo_path = mountinfo_path
        self._mounts: dict[tuple[int, int], str] | None = None
        self._read_at = 0.0
        self._watch: select.poll | None = None  # on /proc's mountinfo: a change says itself
        self.reads = 0  # of the mount table (5,000 mounts: 18 ms each)

    def _mount_of(self, dev: int) -> str | None:
        """Where dev's root is mounted. A device mounted in no namespace ktop sees (a tmpfs
        in a user namespace) is a miss that costs nothing until the mount table changes:
        each lock on one read mountinfo again."""
        key = kernel_dev(dev)
        if self._mounts is not None:
            found = self._mounts.get(key)
            if found is not None or not self._mounts_changed():
                return found
        self._read_mounts()
        assert self._mounts is not None
        return self._mounts.get(key)

    def _mounts_changed(self) -> bool:
        if self._watch is not None:
            return any(events & (select.POLLPRI | select.POLLERR)
                       for _, events in self._watch.poll(0))
        return time.monotonic() - self._read_at >= MISS_REREAD_S

    def _read_mounts(self) -> None:
        if self._watch is None and self._mountinfo_path.startswith("/proc/"):
            try:  # poll() says POLLPRI once the table changed since the last poll (or open)
                fd = os.open(self._mountinfo_path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                pass
            else:
                weakref.finalize(self, os.close, fd)
                self._watch = select.poll()
                self._watch.register(fd, select.POLLPRI)
        self.reads += 1
        self._read_at = time.monotonic()
        try:
            with open(self._mountinfo_path) as f:
                self._mounts = mount_points(f.read())
        except OSError:
            self._mounts = {}

    def directory(self, name: LockName) -> str:
        """An inode's path: its mount point and the dentry names up to its file system's root;
        else its number and device."""
        major, minor = kernel_dev(name.dev)
        where = f"ino {name.ino} on {major}:{minor}"
        if not name.path:
            return where
        names = list(name.path)
        whole = names[-1] == "/"  # the walk reached the file system's root
        if whole:
            names.pop()
        relative = "/".join(reversed(names))
        if not whole:
            return f".../{relative} ({where})"
        mount = self._mount_of(name.dev)
        if mount is None:
            return f"/{relative} on {major}:{minor}"
        return os.path.join(mount, relative) if relative else mount

    def name(self, address: int, found: LockName | None, run_queues: dict[int, int],
             symbol: str) -> tuple[str, str]:
        """(name, instance) of the lock at `address`: ("&mm->mmap_lock", "pid 12 (python3)"),
        ("runqueues.__lock", "CPU 1"), (symbol, "") ...; ("", "") when nothing says."""
        if found is not None:
            if found.kind == NAME_MMAP_LOCK:
                return MMAP_LOCK, f"pid {found.pid} ({found.comm})"
            if found.kind == NAME_SIGLOCK:
                return SIGLOCK, f"pid {found.pid} ({found.comm})"
            if found.kind == NAME_INODE_RWSEM:
                return I_RWSEM, self.directory(found)
        cpu = run_queues.get(address)
        if cpu is not None:
            return RQ_LOCK, f"CPU {cpu}"
        if symbol:
            return symbol, ""
        if KERNEL_IMAGE[0] <= address < KERNEL_IMAGE[1]:
            return KERNEL_GLOBAL, ""
        return "", ""
