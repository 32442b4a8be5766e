"""Opening where ktop writes, as root, without following a link another user planted.

`ktop --snapshot /tmp/shared/reports/x.txt` must not write into /root if `reports` is a
symlink that nobody made (machines with fs.protected_symlinks=0 let root follow it). The
directory is resolved as systemd's chase() does: one component at a time with openat() and
O_NOFOLLOW, so no name is looked up twice; a symlink met on the way is followed only if
root or the writing user owns it and the directory holding it is root's or the writing
user's alone (others' links, and links where others may write, are refused, naming the
link). Everything
after that is done relative to the directory's descriptor (openat, renameat), so nothing
renamed or swapped in the path later can redirect the write. The file itself is created
with O_EXCL | O_NOFOLLOW; an existing target that is not a regular file (a symlink, a
device node, a FIFO) is never replaced.

Nothing here knows the app or the formats.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque

from ktop.text import printable

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {
    stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory",
}


class UnsafePath(Exception):
    """A path ktop will not write to; str() is one line naming the problem and the fix."""


def kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def trusted_owners() -> frozenset[int]:
    """Whose symlinks may be followed: root's and the writing user's own."""
    return frozenset({0, os.geteuid()})


def _unsafe_holder(directory: os.stat_result) -> str:
    """Why a link in this directory may not be followed, or "" if it may: the directory must
    be root's or the writing user's alone (systemd's CHASE_SAFE). A link's owner says
    nothing in a directory another user writes: with fs.protected_hardlinks=0 they can
    hard-link a root-owned link (/usr/lib/ssl/private -> /etc/ssl/private) into it."""
    if directory.st_uid not in trusted_owners():
        return f"owned by uid {directory.st_uid}"
    if directory.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write (mode {stat.S_IMODE(directory.st_mode):o})"
    return ""


def open_directory(path: str) -> int:
    """An O_PATH descriptor of the directory `path` names, reached without following any
    symlink that a user other than root or the writing user owns, or that sits in a
    directory another user owns or may write. Raises UnsafePath for such a link, OSError
    for the rest (no such directory, not a directory, no permission)."""
    trusted = trusted_owners()
    fd = os.open("/" if path.startswith("/") else ".", _DIR_FLAGS)
    parts = deque(path.split("/"))
    walked: list[str] = ["" if path.startswith("/") else "."]
    links = 0
    try:
        while parts:
            name = parts.popleft()
            if name in ("", "."):
                continue
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as e:
                raise OSError(e.errno, e.strerror, "/".join([*walked, name])) from None
            if stat.S_ISLNK(info.st_mode):
                shown = printable("/".join([*walked, name]))
                if info.st_uid not in trusted:
                    raise UnsafePath(
                        f"{shown} is a symlink owned by uid {info.st_uid}, and ktop follows no "
                        "link another user could have planted: name the directory it points to"
                    )
                unsafe = _unsafe_holder(os.fstat(fd))
                if unsafe:
                    raise UnsafePath(
                        f"{shown} is a symlink in a directory {unsafe}, and ktop follows no link "
                        "there (another user could have hard-linked root's own link into it): "
                        "name the directory it points to"
                    )
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = -1
                    fd = os.open("/", _DIR_FLAGS)
                    walked = [""]
                parts.extendleft(reversed(target.split("/")))
                continue
            if not stat.S_ISDIR(info.st_mode):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), "/".join([*walked, name]))
            # O_NOFOLLOW: a link swapped in since the stat above is refused, not followed.
            step = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), "/".join([*walked, name]))
            walked.append(name)
        return fd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


def check_target(dir_fd: int, name: str) -> os.stat_result | None:
    """The existing file `name` in the directory, or None; raises UnsafePath if it exists
    and is not a regular file (ktop replaces and continues regular files only)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePath(f"it is {kind_of(info.st_mode)}, and ktop writes regular files only "
                         "(never through a link, never over a device or FIFO): name a new or "
                         "regular file, or - for standard output")
    return info


def create_exclusive(dir_fd: int, name: str, mode: int = 0o600, flags: int = os.O_WRONLY) -> int:
    """A new file, never an existing name (symlink or not): O_CREAT | O_EXCL | O_NOFOLLOW."""
    fd = os.open(name, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                 dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # whatever the umask
    except OSError:
        os.close(fd)
        raise
    return fd


def create_temporary(dir_fd: int, prefix: str, mode: int = 0o600,
                     flags: int = os.O_WRONLY) -> tuple[int, str]:
    """A new file under a random name in the directory: (descriptor, name)."""
    for _ in range(100):
        name = f"{prefix}{os.urandom(6).hex()}.tmp"  # secrets' way, without hmac
        try:
            return create_exclusive(dir_fd, name, mode, flags), name
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no unused temporary name")


def split(path: str) -> tuple[str, str]:
    """(directory, file name) of a path to a file; the name is "" for "dir/"."""
    directory, _, name = path.rpartition("/")
    if not _:
        return ".", path
    return directory or "/", name


def open_regular(path: str, expect: os.stat_result | None = None,
                 follow_links: bool = False) -> int:
    """A read-only descriptor of `path` if it is a regular file (the very file `expect`
    describes, when given), else OSError. Nothing else is ever opened: the name is
    looked up with O_PATH, which opens nothing (a FIFO's open would block the caller until
    a writer comes, a device's open can act), the descriptor's fstat() says what it is,
    and only then is that same inode reopened for reading through /proc/self/fd. A name
    swapped between a caller's stat() and this open is caught by `expect`. The last
    component is not followed if it is a symlink, unless `follow_links` (a magic link of
    /proc, a root-owned tree)."""
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    found = os.open(path, flags)
    try:
        info = os.fstat(found)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{kind_of(info.st_mode)}, not a regular file", path)
        if expect is not None and (info.st_dev, info.st_ino) != (expect.st_dev, expect.st_ino):
            raise OSError(errno.ESTALE, "replaced since it was looked at", path)
        return os.open(f"/proc/self/fd/{found}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    finally:
        os.close(found)
