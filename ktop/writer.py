"""Writing ktop's files (`--snapshot FILE`, the `s` key) as root: atomically, and never
through a symlink planted at the target or at the temporary name.

The format follows the extension (FORMATS), or --format names it: the screen as .svg
(Textual's screenshot) or .txt (plain text), or its data as .json, .folded (flame graph
stacks), .pb.gz (pprof) or .prom (Prometheus text). Nothing here knows the app or the
collectors.
"""

from __future__ import annotations

import os
import tempfile

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


class SnapshotError(Exception):
    """One line naming the problem and the fix."""


def snapshot_format(path: str, name: str | None = None) -> str:
    """The format `name` gives (--format), else the one the file's suffix says."""
    if name is not None:
        if name not in FORMATS.values():
            raise SnapshotError(f"no format {name!r}: choose {', '.join(FORMATS.values())}")
        return name
    lower = path.lower()
    for suffix, fmt in FORMATS.items():
        if lower.endswith(suffix):
            return fmt
    if path == STDOUT:
        raise SnapshotError("--snapshot - writes to standard output: say which format with --format")
    raise SnapshotError(
        f"cannot tell the format of {path!r}: name it {', '.join(FORMATS)} (or give --format)"
    )


def check_writable(path: str) -> None:
    """Fail before collecting for seconds, not after."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SnapshotError(f"cannot write {path}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise SnapshotError(f"cannot write {path}: it is a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SnapshotError(f"cannot write {path}: directory {directory} is not writable")


def write_atomically(path: str, content: str | bytes) -> None:
    """Write to a new private file in the same directory, then rename over the target.

    mkstemp creates the temporary with O_CREAT | O_EXCL | O_NOFOLLOW (a name already taken,
    symlink or not, is never opened), rename() replaces a symlink at `path` rather than
    following it, and a reader never sees a partial file. On any error the temporary file is
    removed and nothing else changed.
    """
    check_writable(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temporary = tempfile.mkstemp(prefix=".ktop-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise SnapshotError(f"cannot write {path}: {e.strerror}") from None
    try:
        binary = isinstance(content, bytes)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
            # Through the descriptor: chmod by name would follow a symlink swapped in for it.
            os.fchmod(f.fileno(), 0o644)
        os.rename(temporary, path)
    except OSError as e:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise SnapshotError(f"cannot write {path}: {e.strerror}") from None
