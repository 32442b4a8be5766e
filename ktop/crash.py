"""An unexpected error in the TUI: the terminal restored, one line on it, the traceback in a
private file.

While the TUI runs, fd 2 points at a private file that catches what bcc and clang print,
and Textual prints its traceback there too: the screen cleared and ktop exited 1 without a
word. The traceback goes instead to a new file of its own (mode 0600, a random name made
with O_EXCL: never a predictable name in a world-writable directory such as /tmp), and the
user reads one line naming the error and that file. Nothing here imports Textual.
"""

from __future__ import annotations

import os
import tempfile

from ktop.text import printable


def save_report(text: str) -> str:
    """The report in a new 0600 file; returns its path ("" if none could be written)."""
    try:
        fd, path = tempfile.mkstemp(prefix="ktop-crash-", suffix=".txt")
    except OSError:
        return ""
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)
    return path


def crash_line(error: BaseException | None, report: str) -> str:
    """One line: what went wrong and where the whole story is."""
    path = save_report(report)
    if error is not None:
        what = f"{type(error).__name__}: {printable(str(error))[:200]}".rstrip(": ")
    else:
        lines = [line for line in report.strip().splitlines() if line.strip()]
        what = printable(lines[-1].strip())[:200] if lines else "an unexpected error"
    where = f"the full traceback is in {printable(path)}" if path else "no traceback could be saved"
    return f"crashed: {what} ({where}); please report it"
