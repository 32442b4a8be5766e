"""Untrusted text (process names, paths, command lines) made safe to show on a terminal.

ktop runs as root and prints what any user can put in a process name. Control characters
and escape sequences are shown as visible escapes, never sent to the terminal. Rich/Textual
markup is defused separately: widgets render these strings as plain Text, never as markup.
"""

from __future__ import annotations

import re
import unicodedata

from ktop.model import EXITED_PID

# C0 controls, DEL and C1 controls (0x80-0x9f: 0x9b is a one-byte CSI on some terminals),
# bidi overrides that can reorder what the user reads, and lone surrogates (a path or name
# that is not UTF-8, decoded with surrogateescape, or "\\ud800" in a JSON file): no UTF-8
# writer can encode one, and Textual's writer thread died of it.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# Invisible format and separator characters (zero-width space, marks, line separators):
# "ss\u200bhd" must not pass for "sshd".
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte it could not decode
        code -= 0xDC00
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """'\\x1b[2J' for an ESC byte: what the name really holds, and harmless to print."""
    text = _UNSAFE.sub(_escape, text)
    if text.isascii():
        return text
    return "".join(
        f"\\u{ord(c):04x}" if unicodedata.category(c) in _INVISIBLE_CATEGORIES else c
        for c in text
    )


# OWASP's CSV injection rule: a spreadsheet runs a cell starting with one of these as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value for a CSV cell: text escaped (printable), and text a spreadsheet would run as a
    formula (=HYPERLINK(...)) prefixed with ' so it reads as text. Numbers pass unchanged."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START):
        value = "'" + value
    return printable(value)


def human_bytes(n: float) -> str:
    """Sizes as top shows them: 1023, 1.0K, 12.3M, 1.2G (powers of 1024)."""
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"


def format_pid(pid: int) -> str:
    """A pid as the panes show it; EXITED_PID rows fold processes that have exited."""
    return "exited" if pid == EXITED_PID else str(pid)
