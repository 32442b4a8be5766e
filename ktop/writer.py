"""Writing ktop's files (`--snapshot FILE`, the `s` key) as root: atomically, mode 0600,
never through a symlink planted in the path (ktop.safefs), never over a file that is not a
regular one.

The format follows the extension (FORMATS), or --format names it: the screen as .svg
(Textual's screenshot) or .txt (plain text), or its data as .json, .folded (flame graph
stacks), .pb.gz (pprof) or .prom (Prometheus text). Nothing here knows the app or the
collectors.
"""

from __future__ import annotations

import os

from ktop import safefs
from ktop.text import printable

# File suffix -> format: the one place that maps them (snapshot.py writes by format).
FORMATS = {
    ".svg": "svg",
    ".txt": "txt",
    ".json": "json",
    ".folded": "folded",
    ".pb.gz": "pprof",
    ".prom": "prom",
}
STDOUT = "-"  # --snapshot - writes to standard output (with --format)
# Files hold command lines, and JSON, folded and pprof kernel addresses: private by default.
PRIVATE = 0o600
# Prometheus text holds neither, and node_exporter's textfile collector must read it.
MODES = {"prom": 0o644}


class SnapshotError(Exception):
    """One line naming the problem and the fix."""


def snapshot_format(path: str, name: str | None = None) -> str:
    """The format `name` gives (--format), else the one the file's suffix says."""
    if name is not None:
        if name not in FORMATS.values():
            raise SnapshotError(f"no format {printable(repr(name))}: "
                                f"choose {', '.join(FORMATS.values())}")
        return name
    lower = path.lower()
    for suffix, fmt in FORMATS.items():
        if lower.endswith(suffix):
            return fmt
    if path == STDOUT:
        raise SnapshotError("--snapshot - writes to standard output: say which format with --format")
    raise SnapshotError(
        f"cannot tell the format of {printable(repr(path))}: "
        f"name it {', '.join(FORMATS)} (or give --format)"
    )


def _target(path: str) -> tuple[int, str]:
    """(descriptor of the directory, file name) for writing `path`, every check done: the
    directory reached without a planted link (ktop.safefs), the name free or a regular file.
    Raises SnapshotError (one line) otherwise."""
    shown = printable(path)
    directory, name = safefs.split(path)
    if name in ("", ".", ".."):
        raise SnapshotError(f"cannot write {shown}: it is a directory")
    try:
        dir_fd = safefs.open_directory(directory)
    except safefs.UnsafePath as e:
        raise SnapshotError(f"cannot write {shown}: {e}") from None
    except FileNotFoundError:
        raise SnapshotError(f"cannot write {shown}: directory {printable(directory)} does not "
                            "exist") from None
    except OSError as e:
        raise SnapshotError(f"cannot write {shown}: {printable(e.filename or directory)}: "
                            f"{e.strerror}") from None
    try:
        safefs.check_target(dir_fd, name)
    except safefs.UnsafePath as e:
        os.close(dir_fd)
        raise SnapshotError(f"cannot write {shown}: {e}") from None
    except OSError as e:
        os.close(dir_fd)
        raise SnapshotError(f"cannot write {shown}: {e.strerror}") from None
    return dir_fd, name


def check_writable(path: str) -> None:
    """Fail before collecting for seconds, not after."""
    dir_fd, _name = _target(path)
    try:
        # faccessat on the directory itself: "." relative to its descriptor.
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=dir_fd):
            directory = safefs.split(path)[0]
            raise SnapshotError(f"cannot write {printable(path)}: directory "
                                f"{printable(directory)} is not writable")
    finally:
        os.close(dir_fd)


def write_atomically(path: str, content: str | bytes, mode: int = PRIVATE) -> None:
    """Write to a new private file in the same directory, then rename over the target.

    The directory is opened without following a link another user planted (ktop.safefs),
    the temporary is created there with O_CREAT | O_EXCL | O_NOFOLLOW under a random name,
    and renamed over `path` relative to the directory's descriptor: a reader never sees a
    partial file. A target that exists and is not a regular file (a symlink, a device node,
    a FIFO: /dev/stdout is a symlink to /proc/self/fd/1) is refused, never replaced. On
    any error the temporary file is removed and nothing else changed. `mode`: 0600 unless
    the caller says the content holds no kernel address and no command line.
    """
    dir_fd, name = _target(path)
    try:
        try:
            fd, temporary = safefs.create_temporary(dir_fd, ".ktop-", mode)
        except OSError as e:
            raise SnapshotError(f"cannot write {printable(path)}: {e.strerror}") from None
        try:
            binary = isinstance(content, bytes)
            with os.fdopen(fd, "wb" if binary else "w",
                           encoding=None if binary else "utf-8") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
            os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except (OSError, UnicodeEncodeError) as e:
            try:
                os.unlink(temporary, dir_fd=dir_fd)
            except OSError:
                pass
            why = e.strerror if isinstance(e, OSError) else f"unencodable text ({e.reason})"
            raise SnapshotError(f"cannot write {printable(path)}: {why}") from None
    finally:
        os.close(dir_fd)
