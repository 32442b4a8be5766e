"""cgroup v2: where the hierarchy is mounted, a cgroup id to its path, a path to a short name.

The BPF programs record `bpf_get_current_cgroup_id()`: the id of the task's cgroup in the
unified (v2) hierarchy, which is the inode number of that cgroup's directory. An id is named
by opening its directory by handle (open_by_handle_at with the kernfs id, as systemd's
cg_path_from_cgroupid does; root) and reading the path the kernel gives it. Without that
(not root, not kernfs), by walking the mounted hierarchy once, and again (at most once a
second) when an id nobody has named shows up: 0.39 s a walk with 10,000 cgroups. A path is kept relative to the mount, as /proc/PID/cgroup writes it
("/system.slice/nginx.service"); "/" is the root cgroup (kernel threads, most of a machine
without systemd). Nothing here imports bcc or Textual.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import struct
import threading
import time
from collections.abc import Iterator

MOUNTINFO = "/proc/self/mountinfo"
RESCAN_EVERY_S = 1.0  # an unknown id walks the hierarchy again, at most this often
NAMES_KEPT = 65536  # ids named; a cgroup removed keeps its name while its rows are shown


class CgroupError(Exception):
    """A cgroup that cannot be shown; str() is one line naming the problem and the fix."""


def cgroup2_mount(mountinfo: str = MOUNTINFO) -> str | None:
    """Where the unified hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a
    hybrid systemd machine); None on a machine with cgroup v1 only."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields, sep, rest = line.partition(" - ")
        parts = fields.split()
        if sep and rest.split()[:1] == ["cgroup2"] and len(parts) >= 5 and parts[3] == "/":
            return _unescape(parts[4])
    return None


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_proc_cgroup(text: bytes) -> str:
    """The v2 path from /proc/PID/cgroup ("0::/user.slice/..."); "" if the task has none
    (cgroup v1 only). A name that is not UTF-8 keeps its bytes (surrogateescape, as os.scandir
    names the ids and as os.stat finds it again): replaced by U+FFFD it named no directory,
    and its cgroup read "removed". Shown through ktop.text.printable, as \\xff."""
    for line in text.splitlines():
        if line.startswith(b"0::"):
            path = line[3:].decode("utf-8", "surrogateescape")
            return path.removesuffix(" (deleted)") or "/"
    return ""


def in_subtree(path: str, root: str) -> bool:
    """`path` is the cgroup `root` or below it."""
    if root == "/":
        return bool(path)
    return path == root or path.startswith(root + "/")


# Container runtimes put a container in a cgroup named after its 64-hex id.
_CONTAINER = re.compile(
    r"^(?:(?P<runtime>docker|cri-containerd|containerd|crio|libpod|podman)-)?"
    r"(?P<id>[0-9a-f]{64})(?:\.scope)?$"
)
_RUNTIME_NAMES = {
    "docker": "docker", "cri-containerd": "containerd", "containerd": "containerd",
    "crio": "crio", "libpod": "podman", "podman": "podman",
}
# Parents that name the runtime when the container's own directory is the bare id
# (cgroupfs drivers: /docker/ID, /kubepods/.../ID; k8s for any runtime under kubepods).
_RUNTIME_PARENTS = {"docker": "docker", "containerd": "containerd", "libpod_parent": "podman",
                    "machine.slice": "podman"}
_UNIT_SUFFIXES = (".service", ".scope", ".slice", ".socket", ".mount", ".swap")


def short_name(path: str) -> str:
    """What a user calls the cgroup: "docker:3f2a9c1b0d4e" for a container, the systemd unit
    for a unit ("nginx.service", "session-3.scope"), else the last part of the path."""
    if not path:
        return ""
    if path == "/":
        return "/"
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        match = _CONTAINER.match(parts[i])
        if match:
            runtime = match.group("runtime")
            if runtime is None:  # a bare id: its parent may say whose
                parent = parts[i - 1] if i else ""
                in_pod = any(p.startswith("kubepods") for p in parts[:i])
                runtime = "k8s" if in_pod else _RUNTIME_PARENTS.get(parent, "")
            name = _RUNTIME_NAMES.get(runtime, runtime)
            short_id = match.group("id")[:12]
            return f"{name}:{short_id}" if name else short_id
    for part in reversed(parts):
        if part.endswith(_UNIT_SUFFIXES):
            return part
    return parts[-1]


def resolve_filter(text: str, mountinfo: str = MOUNTINFO) -> str:
    """`--cgroup PATH` as a path relative to the v2 mount: PATH may be given relative to it
    ("/system.slice/x.service", "system.slice") or in full under it ("/sys/fs/cgroup/...").
    Raises CgroupError when there is no v2 hierarchy or no such cgroup."""
    mount = cgroup2_mount(mountinfo)
    if mount is None:
        raise CgroupError(
            "this machine mounts cgroup v1 only: --cgroup needs the unified hierarchy "
            "(boot with systemd.unified_cgroup_hierarchy=1, or `mount -t cgroup2 none DIR`)"
        )
    given = text.strip()
    if not given:
        raise CgroupError("--cgroup needs a path, like /system.slice/nginx.service")
    if given == mount or given.startswith(mount.rstrip("/") + "/"):
        relative = given[len(mount.rstrip("/")):] or "/"
    else:
        relative = "/" + given.lstrip("/")
    relative = os.path.normpath(relative)
    if relative.startswith("//"):
        relative = relative[1:]
    if os.path.isdir(os.path.join(mount, relative.lstrip("/"))):
        return relative
    # Not a path: the short name ktop shows ("podman:ace6f0acfc2f", "nginx.service").
    named = [path for _, path in _walk(mount) if short_name(path) == given]
    if len(named) == 1:
        return named[0]
    if named:
        raise CgroupError(
            f"{len(named)} cgroups are named {given}: give one by its path, "
            f"{' or '.join(sorted(named)[:3])}"
        )
    raise CgroupError(
        f"no cgroup {relative} under {mount}, nor one named {given}: list them with "
        f"`find {mount} -mindepth 1 -type d`"
    )


def _walk(mount: str) -> Iterator[tuple[int, str]]:
    """Every cgroup below the mount: its inode (the cgroup id) and its path relative to the
    mount (links not followed; one removed while walked is passed over)."""
    stack = [(mount, "")]
    while stack:
        directory, relative = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:  # removed while we walked
            continue
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                inode = entry.inode()
            except OSError:
                continue
            path = f"{relative}/{entry.name}"
            yield inode, path
            stack.append((entry.path, path))


def cgroup_exists(relative: str, mountinfo: str = MOUNTINFO) -> bool:
    mount = cgroup2_mount(mountinfo)
    return mount is not None and os.path.isdir(os.path.join(mount, relative.lstrip("/")))


FILEID_KERNFS = 0xFE  # a kernfs file handle: the node's 64-bit id, the cgroup id
_MAX_HANDLE_SZ = 128


class _FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * _MAX_HANDLE_SZ)]


_libc: ctypes.CDLL | None = None


def _c_library() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


class _ByHandle:
    """cgroup ids opened by file handle under the v2 mount: one id's path at a time."""

    def __init__(self, mount: str) -> None:
        """Raises OSError where the mount takes no kernfs handles."""
        self._mount = mount
        self._fd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            handle = _FileHandle(handle_bytes=_MAX_HANDLE_SZ)
            mount_id = ctypes.c_int()
            if _c_library().name_to_handle_at(self._fd, b"", ctypes.byref(handle),
                                              ctypes.byref(mount_id), 0x1000) != 0:  # AT_EMPTY_PATH
                raise OSError(ctypes.get_errno(), "name_to_handle_at")
            if handle.handle_type != FILEID_KERNFS or handle.handle_bytes != 8:
                raise OSError(errno.EOPNOTSUPP, "not a kernfs mount")
        except BaseException:
            os.close(self._fd)
            raise

    def path(self, cgroup_id: int) -> str | None:
        """The id's path relative to the mount; None when it is gone (or outside the mount
        as this process sees it). Raises PermissionError without CAP_DAC_READ_SEARCH."""
        handle = _FileHandle(handle_bytes=8, handle_type=FILEID_KERNFS)
        ctypes.memmove(handle.f_handle, struct.pack("<Q", cgroup_id), 8)
        fd = _c_library().open_by_handle_at(self._fd, ctypes.byref(handle),
                                            os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if fd < 0:
            error = ctypes.get_errno()
            if error in (errno.EPERM, errno.EACCES):
                raise PermissionError(error, os.strerror(error))
            return None  # ESTALE: removed, or no such id
        try:
            # surrogateescape, as os.scandir names what the walk finds
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        finally:
            os.close(fd)
        mount = self._mount.rstrip("/")
        if where == mount:
            return "/"
        if not where.startswith(mount + "/") or where.endswith(" (deleted)"):
            return None
        return where[len(mount):]

    def close(self) -> None:
        os.close(self._fd)


class CgroupNames:
    """cgroup id -> path relative to the v2 mount. Shared by the collectors (any thread)."""

    def __init__(self, mount: str | None = None, mountinfo: str = MOUNTINFO) -> None:
        self.mount = mount if mount is not None else cgroup2_mount(mountinfo)
        self._names: dict[int, str] = {}
        self._scanned = float("-inf")
        self._lock = threading.Lock()
        self.scans = 0  # walks of the hierarchy (tests, and the cost of unknown ids)
        self.lookups = 0  # ids opened by handle
        self._by_handle: _ByHandle | None = None
        if self.mount is not None:
            try:
                self._by_handle = _ByHandle(self.mount)
            except (OSError, AttributeError):  # not kernfs, or no such call: walk
                self._by_handle = None

    def name(self, cgroup_id: int) -> str:
        """The path, "" for id 0 (no v2 hierarchy), "[cgroup N]" for one gone unnamed."""
        if not cgroup_id:
            return ""
        found = self._names.get(cgroup_id)
        if found is not None:
            return found
        with self._lock:
            if cgroup_id not in self._names and self._by_handle is not None:
                try:
                    self.lookups += 1
                    path = self._by_handle.path(cgroup_id)
                except PermissionError:  # not root: walk from now on
                    self._by_handle.close()
                    self._by_handle = None
                else:
                    if path is None:  # gone before it was named: a walk finds it no more
                        return f"[cgroup {cgroup_id}]"
                    if len(self._names) >= NAMES_KEPT:
                        self._names.clear()
                    self._names[cgroup_id] = path
                    return path
            if cgroup_id not in self._names and self.mount is not None:
                now = time.monotonic()
                if now - self._scanned >= RESCAN_EVERY_S:
                    self._scanned = now
                    self._scan()
            return self._names.get(cgroup_id, f"[cgroup {cgroup_id}]")

    def knows(self, cgroup_id: int) -> bool:
        """Whether name() gives the path (or "" for id 0), not a stand-in."""
        return not cgroup_id or cgroup_id in self._names

    def _scan(self) -> None:
        self.scans += 1
        if len(self._names) >= NAMES_KEPT:
            self._names.clear()
        mount = self.mount
        assert mount is not None
        try:
            self._names[os.stat(mount).st_ino] = "/"
        except OSError:
            return
        self._names.update(_walk(mount))


_shared: CgroupNames | None = None
_shared_lock = threading.Lock()


def shared_names() -> CgroupNames:
    """The one CgroupNames every collector of this process names ids with."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CgroupNames()
        return _shared
