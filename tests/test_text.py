"""Hostile process names: anyone can name a process; ktop, running as root, prints it."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest
from rich.console import Console

from ktop.text import human_bytes, printable
from ktop.ui.widgets.header import header_text
from ktop.ui.widgets.table import Cell

# Anything a terminal could act on: C0, DEL, C1 (0x9b is a one-byte CSI), bidi overrides.
TERMINAL_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def rendered(renderable, width: int = 60) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.file.getvalue()


@pytest.mark.parametrize(
    ("name", "visible"),
    [
        ("\x1b[2J evil", "\\x1b[2J evil"),
        ("\x9b31mred", "\\x9b31mred"),
        ("tab\there", "tab\\x09here"),
        ("two\nlines", "two\\x0alines"),
        ("bell\x07", "bell\\x07"),
        ("del\x7f", "del\\x7f"),
        ("rtl\u202etxt.exe", "rtl\\u202etxt.exe"),
        ("isolate\u2066x\u2069", "isolate\\u2066x\\u2069"),
    ],
)
def test_control_characters_are_shown_as_visible_escapes(name, visible):
    shown = printable(name)
    assert not TERMINAL_ACTIVE.search(shown)
    assert shown == visible


@pytest.mark.parametrize(
    "name", ["kworker/u8:2-events_unbound", "Zürich-daemon", "[bold]red[/]", "[/]", "日本語", ""]
)
def test_ordinary_and_markup_looking_names_are_left_alone(name):
    """Escaping is for the terminal; markup is defused by rendering as plain text."""
    assert printable(name) == name


@pytest.mark.parametrize("name", ["[bold]x[/]", "[/]", "[bold]red[/]", "[link=https://e.invalid]x[/link]"])
def test_a_cell_with_markup_renders_literally(name):
    text = Cell(name).__rich__()
    assert text.plain == name
    assert not text.spans and not text.style
    assert rendered(Cell(name)).rstrip("\n") == name


def test_a_cell_with_an_escape_sequence_renders_no_escape_byte():
    out = rendered(Cell("\x1b[2J\x1b]0;pwned\x07 evil"))
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x1b]0;pwned\\x07 evil" in out


def test_header_escapes_a_hostile_hostname(recorded_snapshot):
    snapshot = replace(recorded_snapshot, hostname="\x1b]0;owned\x07[bold]host[/]")
    text = header_text(snapshot)
    assert "\x1b" not in text.plain and "\x07" not in text.plain
    assert "\\x1b]0;owned\\x07[bold]host[/]" in text.plain


@pytest.mark.parametrize(
    ("size", "shown"),
    [(0, "0"), (1023, "1023"), (1024, "1.0K"), (1536, "1.5K"), (2936832, "2.8M"), (3 << 30, "3.0G")],
)
def test_sizes_read_like_top(size, shown):
    assert human_bytes(size) == shown
