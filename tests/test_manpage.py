"""`man ktop` is generated from the CLI's parser and the screens' bindings (ktop.manpage): it
has the sections a man page has, every option and every key, and its examples parse; and
`ktop --help` groups its options as perf's are."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from textual.binding import Binding

from ktop.cli import OPTION_GROUPS, build_parser, parse_args
from ktop.manpage import EXAMPLES, manpage
from ktop.record.fileformat import RecordWriter
from ktop.ui.screens.help import bindings_help
from ktop.ui.screens.main import MainScreen

SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "KEYS", "FILES", "EXAMPLES",
            "SEE ALSO")


def section(page: str, name: str) -> str:
    match = re.search(rf"^\.SH {name}\n(.*?)(?=^\.SH |\Z)", page, re.S | re.M)
    assert match, f"no {name} section"
    return match.group(1)


def documented_options(page: str) -> set[str]:
    """The options the OPTIONS section describes: each `.TP` line's bold names."""
    options = set()
    for label in re.findall(r"^\.TP\n(.*)$", section(page, "OPTIONS"), re.M):
        options |= {name.replace("\\-", "-") for name in re.findall(r"\\fB(.*?)\\fR", label)}
    return options


def undocumented(page: str, parser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings
            if option not in documented_options(page)]


def test_the_page_has_every_section_in_order():
    page = manpage("2026-01-01")
    assert page.startswith('.TH KTOP 1 "2026-01-01"')
    assert re.findall(r"^\.SH (.*)$", page, re.M) == list(SECTIONS)


def test_every_option_is_in_the_page():
    assert undocumented(manpage(), build_parser()) == []


def test_an_option_the_page_lacks_is_caught():
    """The check above can fail: a page without --folded-of's entry (as a page written by
    hand would be, the day the option came) lacks it."""
    page = manpage()
    stale = re.sub(r"^\.TP\n\\fB\\-\\-folded\\-of\\fR.*\n.*\n", "", page, flags=re.M)
    assert stale != page
    assert undocumented(stale, build_parser()) == ["--folded-of"]


def test_an_option_added_to_the_cli_is_in_the_page(monkeypatch):
    def with_new_option():
        parser = build_parser()
        parser.add_argument("--brand-new", metavar="X", help="an option added tomorrow")
        return parser

    monkeypatch.setattr("ktop.manpage.build_parser", with_new_option)
    page = manpage()
    assert "--brand-new" in documented_options(page)
    assert "an option added tomorrow" in page


def test_every_key_of_the_panes_screen_is_in_the_page():
    keys = section(manpage(), "KEYS").replace("\\-", "-").replace("\\e", "\\")
    bindings = [b for b in MainScreen.BINDINGS if isinstance(b, Binding)
                and not b.action.startswith("focus_pane_number")]
    for shown, what in bindings_help(bindings):
        assert f"\\fB{shown}\\fR\n{what}" in keys, (shown, what)
    for number, label in (("1", "Hot functions"), ("5", "Waits")):
        assert f"\\fB{number}\\fR\n{label}" in keys


def test_every_example_parses(tmp_path, monkeypatch):
    """The examples name only options the CLI takes, combined as it allows."""
    monkeypatch.chdir(tmp_path)
    writer = RecordWriter(str(tmp_path / "day.krec"))
    writer.close()
    for command, _what in EXAMPLES:
        argv = command.removeprefix("sudo ").split()
        assert argv[0] == "ktop"
        parse_args(argv[1:])  # exits 2 on anything it refuses


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_renders_it_without_warnings(tmp_path):
    path = tmp_path / "ktop.1"
    path.write_text(manpage())
    result = subprocess.run(["man", "--warnings", "-l", str(path)], capture_output=True,
                            text=True, env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin"},
                            timeout=30)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    for name in SECTIONS:
        assert f"\n{name}\n" in result.stdout
    assert "--folded-of cpu|locks|io|io-latency|offcpu" in result.stdout


def test_the_csv_dumps_columns_are_listed_waits_included():
    from ktop.record.dump import CSV_COLUMNS

    options = section(manpage(), "OPTIONS").replace("\\-", "-")
    listed = options.split("csv columns, one row an interval: ", 1)[1].split(".\n", 1)[0]
    assert listed.split(", ") == list(CSV_COLUMNS)
    assert "top_wait_comm" in listed


def test_help_groups_the_options_as_perf_does():
    text = build_parser().format_help()
    headings = re.findall(r"^(\S[^:\n]*):$", text, re.M)
    assert headings == ["options", *(title for title, _ in OPTION_GROUPS)]
    parser = build_parser()
    grouped = {action.dest for group in parser._action_groups
               if group.title != "options" for action in group._group_actions}
    ungrouped = {action.dest for action in parser._actions} - grouped
    assert ungrouped == {"help", "version"}
