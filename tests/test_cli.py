"""Command-line errors as a user meets them: `python -m ktop ...` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def ktop(*args: str, cwd=None, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ktop", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd, stdin=stdin,
    )


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--snapshot", "x.json", "--duration", "-1"], "--duration"),
        (["--snapshot", "x.json", "--duration", "0"], "--duration"),
        (["--snapshot", "x.json", "--duration", "nan"], "--duration"),
        (["--frequency", "0"], "--frequency"),
        (["-F", "100000"], "--frequency"),
        (["--snapshot", "x.svg", "--size", "10"], "--size"),
        (["--snapshot", "x.svg", "--size", "10x"], "--size"),
        (["--snapshot", "x.svg", "--size", "5x5"], "--size"),
        (["--interval", "abc"], "--interval"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--duration", "5"], "--snapshot"),
    ],
)
def test_bad_arguments_print_usage_and_exit_2(args, complaint, tmp_path):
    result = ktop(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: ktop")
    assert complaint in result.stderr
    assert result.stdout == ""
    assert os.listdir(tmp_path) == []


def test_help_lists_the_options():
    result = ktop("--help")
    assert result.returncode == 0
    for option in ("--frequency", "--interval", "--snapshot", "--duration", "--size", "--idle"):
        assert option in result.stdout
    # The description, between the usage and the options, names all five panes.
    described = " ".join(result.stdout.split("\n\n")[1].split())
    for pane in ("hot functions", "lock contention", "block I/O", "processes", "waits"):
        assert pane in described, described


def test_version():
    result = ktop("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("ktop ")


def test_without_a_terminal_it_says_to_use_snapshot():
    result = ktop()
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--snapshot" in lines[0]


def test_snapshot_into_a_missing_directory_fails_at_once_with_one_line(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "out.json"
    result = ktop("--snapshot", str(target), "--duration", "30", cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ktop: ") and "does not exist" in lines[0]
    assert "Traceback" not in result.stderr
    assert os.listdir(tmp_path) == []


def test_snapshot_with_an_unknown_extension_names_the_formats(tmp_path):
    result = ktop("--snapshot", str(tmp_path / "out.png"), cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and ".svg" in lines[0] and ".json" in lines[0]
    assert os.listdir(tmp_path) == []


def test_a_pid_that_is_not_running_is_refused_in_one_line(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now (pids are handed out in turn: not again soon)
    result = ktop("--pid", str(gone.pid), "--snapshot", str(tmp_path / "out.json"),
                  "--duration", "1", cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no process {gone.pid} (--pid)" in lines[0], result.stderr
    assert os.listdir(tmp_path) == []


def test_snapshot_onto_a_directory_is_refused(tmp_path):
    (tmp_path / "out.svg").mkdir()
    result = ktop("--snapshot", str(tmp_path / "out.svg"), cwd=tmp_path)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        # Durations a timer cannot wait: OverflowError, and the TUI left silently (exit 1).
        (["--snapshot", "x.txt", "--duration", "1e300"], "--duration: must be a positive"),
        (["--record", "x.krec", "--duration", "1e10"], "--duration: must be a positive"),
        (["-d", "1e300"], "--interval: must be a positive"),
        (["--serve", "127.0.0.1:1", "-d", "1e300"], "--interval: must be a positive"),
        (["-w", "1e300"], "--window: must be a positive"),
        # An empty file name started the TUI.
        (["--snapshot", ""], "--snapshot needs a file name"),
        (["--record", ""], "--record needs a file name"),
        (["--replay", ""], "--replay needs a file name"),
        (["--record", "x.krec", "--max-size", "1e30"], "must be from 1 to"),
        # A digit that is not 0-9: Python's int() message.
        (["--serve", "\u00b2"], "expected [ADDR:]PORT with a port from 1 to 65535"),
        (["--snapshot", "x.txt", "--drill", "processes:\u00b2"], "processes takes a pid"),
    ],
)
def test_bounded_arguments_are_one_line_errors(args, complaint, tmp_path):
    """Issue 29, item 5 and the small items: each is named, with exit 2, no traceback."""
    result = ktop(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ktop: error: ") and complaint in last, result.stderr
    assert "Traceback" not in result.stderr and "int()" not in result.stderr
    assert os.listdir(tmp_path) == []


def test_dump_of_a_file_that_is_no_snapshot_either_says_so(tmp_path):
    """A 3-byte file was called a snapshot."""
    path = tmp_path / "three"
    path.write_bytes(b"abc")
    result = ktop("--replay", str(path), "--dump", "csv")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "need a recording" in last and "three is not one" in last
    assert "snapshot" not in last


def test_a_drill_name_with_escapes_is_not_echoed_raw(tmp_path):
    from conftest import FIXTURES  # noqa: PLC0415

    result = ktop("--replay", str(FIXTURES / "recorded.json"), "--snapshot",
                  str(tmp_path / "x.txt"), "--drill", "locks:\x1b[2J")
    assert result.returncode == 1
    assert "\x1b" not in result.stderr and "\\x1b[2J" in result.stderr, result.stderr


# What a user may type that a terminal would obey: a title change (OSC ... BEL), a clear
# screen (CSI), a bidi override that reorders the line.
HOSTILE = ("\x1b]2;T\x07", "\x1b[2J", "\u202e")


@pytest.mark.parametrize("args", [
    ["--serve", "{h}:1"],  # parsed, then refused when bound
    ["--serve", "[{h}]:99999"],
    ["--serve", "{h}:x:1"],
    ["{h}"],  # unrecognized arguments
    ["--snapshot", "x.txt", "{h}"],
    ["--s{h}"],  # ambiguous or unrecognized option
    ["--format", "{h}"],  # invalid choice
    ["--interval", "{h}"],
    ["--drill", "{h}"],
    ["--snapshot", "x.svg", "--size", "{h}"],
    ["--replay", "/nonexistent/{h}.krec", "--dump", "csv"],
    ["--replay", "/nonexistent/{h}.krec"],
])
def test_every_error_line_escapes_what_was_typed(args, tmp_path):
    """Issue 44: `--serve "$(printf '\\e]2;T\\a'):1"` printed the raw escape in its error."""
    for hostile in HOSTILE:
        result = ktop(*(a.replace("{h}", hostile) for a in args), cwd=tmp_path)
        assert result.returncode != 0
        said = result.stderr.strip().splitlines()[-1]
        assert said.startswith("ktop: "), result.stderr
        assert not any(c in result.stderr for c in "\x1b\x07\u202e"), repr(result.stderr)
        assert any(escaped in said for escaped in ("\\x1b", "\\u202e")), said


def test_replay_of_no_such_file_with_dump_says_so(tmp_path):
    result = ktop("--replay", str(tmp_path / "gone.krec"), "--dump", "csv")
    assert result.returncode == 2
    said = result.stderr.strip().splitlines()[-1]
    assert said == (f"ktop: error: --replay {tmp_path}/gone.krec: no such file; --at and "
                    "--dump replay a recording (--record FILE)"), said
