"""Paths ktop prints that it did not choose (issue 25): a working directory that is not UTF-8
or that reads as markup, and a crash that must say what happened.

The first tests drive the app headless (Pilot); the last ones run ktop in a pseudo-terminal,
as a user does, because what broke there was the terminal itself: Textual's writer thread
died on a lone surrogate (the screen froze, q, Ctrl-C and SIGTERM ignored) and a crash
cleared the screen without a word.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import termios
import time

import pytest
from conftest import FIXTURES, root_only, run_app
from test_replay_ui import RecordableSource
from test_ui import INTERVAL, next_frames

from ktop.record.fileformat import Recording
from ktop.text import printable
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text

RECORDED = str(FIXTURES / "recorded.json")
NOT_UTF8 = os.fsdecode(b"u\xffdir")  # "u\udcffdir": how Python names it


@pytest.mark.parametrize("directory", [NOT_UTF8, "[/]"], ids=["not-utf8", "markup"])
def test_s_and_r_in_a_working_directory_named_so(tmp_path, monkeypatch, recorded_snapshot,
                                                 directory):
    """`cd $'/tmp/u\\xffdir'; ktop` then s and R; or in a directory named `[/]` (a MarkupError
    in the save notice ended the app with exit 1 and no message)."""
    where = tmp_path / directory
    where.mkdir(parents=True)
    monkeypatch.chdir(where)
    source = RecordableSource(recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("s")
        await pilot.press("R")
        await next_frames(pilot, source, 2)
        await pilot.press("R")
        await pilot.pause(0.1)
        seen["notes"] = [str(n.message) for n in app._notifications]
        seen["screen"] = screen_text(app)
        seen["running"] = app.is_running

    run_app(build_app(source, interval_s=INTERVAL), scenario)
    assert seen["running"]
    for text in (*seen["notes"], seen["screen"]):
        text.encode("utf-8")  # strict: what the terminal is handed
    shown = printable(os.path.abspath(where))
    assert any(note.startswith(f"saved {shown}/ktop-") for note in seen["notes"]), seen["notes"]
    assert any(note.startswith(f"recording to {shown}/ktop-") for note in seen["notes"])
    svg = [n for n in os.listdir(where) if n.endswith(".svg")]
    (krec,) = [n for n in os.listdir(where) if n.endswith(".krec")]
    assert len(svg) == 1 and len(Recording(str(where / krec))) >= 1


# ---- in a terminal ----------------------------------------------------------------------


_CONTROL_SEQUENCE = re.compile(r"\x1b\[[0-9;?<>=]*[A-Za-z~]")


def flat(output: bytes | bytearray | str) -> str:
    """What a terminal's output says, without its control sequences, spaces and the
    toasts' side bar: text wrapped over several lines of a toast reads as one."""
    text = output if isinstance(output, str) else output.decode("utf-8", "replace")
    return re.sub(r"[\s▌]", "", _CONTROL_SEQUENCE.sub("", text))


def run_in_terminal(code: str, steps: list[tuple[str, str]], cwd: str,
                    seconds: float = 60.0) -> tuple[int | None, str]:
    """Run `python -c code` on a pseudo-terminal of 160x50; once the screen is up, type each
    step's key and wait until its text shows (or the program ends). Returns (exit status,
    or None if it had to be killed; everything it wrote)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdin, stdout and stderr
        # Its size set before ktop can read it: set by the parent alone, a starved parent
        # (the suite two at a time on two CPUs) left ktop drawing an 80x24 screen of tabs.
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        os.chdir(cwd)
        # No saved pane choice (key p) of the user's: the default layout, Processes shown.
        os.execve(sys.executable, [sys.executable, "-c", code],
                  {**os.environ, "TERM": "xterm-256color", "TZ": "UTC",
                   "XDG_CONFIG_HOME": os.path.join(cwd, ".no-config")})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    output = bytearray()
    deadline = time.monotonic() + seconds
    pending = list(steps)
    waiting_for = "Quit"  # the screen is up (the footer: at 80x24 the panes are tabs)
    status = None
    poller = select.poll()  # not select: it refuses descriptors above 1024
    poller.register(fd, select.POLLIN)
    while time.monotonic() < deadline:
        if poller.poll(100):
            try:
                output += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                pass
        if waiting_for is not None and waiting_for in flat(output):
            waiting_for = None
            if pending:
                time.sleep(0.2)
                key, waiting_for = pending.pop(0)
                os.write(fd, key.encode())
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(wait_status)
            while poller.poll(200):
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
            break
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os.close(fd)
    return status, output.decode("utf-8", "replace")


def ktop_code(*args: str, before: str = "") -> str:
    return f"import sys\n{before}\nfrom ktop.cli import main\nsys.exit(main({list(args)!r}))\n"


@pytest.mark.parametrize(("directory", "shown"), [(NOT_UTF8, "u\\xffdir"), ("[/]", "[/]")],
                         ids=["not-utf8", "markup"])
def test_s_in_the_terminal_saves_and_says_so(tmp_path, directory, shown):
    """A lone surrogate killed Textual's writer thread; `[/]` raised MarkupError when the
    toast was drawn (exit 1)."""
    where = tmp_path / directory
    where.mkdir(parents=True)
    steps = [("s", "/ktop-"), ("q", "never shown")]
    status, output = run_in_terminal(ktop_code("--replay", RECORDED), steps, str(where))
    assert status == 0, output[-2000:]
    assert f"saved{tmp_path}/{shown}/ktop-" in flat(output)  # the notice, escaped if need be
    assert "Traceback" not in output
    assert [n for n in os.listdir(where) if n.endswith(".svg")]


def test_a_crash_restores_the_terminal_and_says_where_the_traceback_went(tmp_path):
    """An unexpected error: one line naming it and a private file with the traceback."""
    crash = "from ktop.ui.screens.main import MainScreen\nMainScreen.action_help = lambda self: 1 / 0"
    status, output = run_in_terminal(ktop_code("--replay", RECORDED, before=crash),
                                     [("?", "never shown")],
                                     str(tmp_path))
    assert status == 1
    leave_alternate_screen = output.rfind("\x1b[?1049l")
    assert leave_alternate_screen >= 0, "the terminal was not restored"
    after = output[leave_alternate_screen:]
    match = re.search(r"ktop: crashed: ZeroDivisionError: division by zero \(the full traceback "
                      r"is in (\S+)\); please report it", after)
    assert match, after[-1000:]
    report = match.group(1)
    try:
        info = os.stat(report)
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
        text = open(report, encoding="utf-8").read()
        assert "Traceback" in text and "ZeroDivisionError: division by zero" in text
    finally:
        os.unlink(report)


# ---- a cgroup named in bytes that are not UTF-8 (live) -----------------------------------


@root_only
def test_a_live_cgroup_not_named_in_utf8_holds_its_process():
    """`adv\\xff...` read "removed" while it held a process: /proc/PID/cgroup's name and the
    directory walk's must be the same string, and name the directory that exists."""
    from ktop.cgroups import CgroupNames, cgroup2_mount, cgroup_exists, parse_proc_cgroup
    from ktop.panes.processes.collector import ProcessCollector

    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    relative = os.fsdecode(b"/adv\xff-" + os.urandom(4).hex().encode())
    path = mount + relative
    os.mkdir(path)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(sleeper.pid))
        with open(f"/proc/{sleeper.pid}/cgroup", "rb") as f:
            named = parse_proc_cgroup(f.read())
        assert named == relative and cgroup_exists(named)
        assert CgroupNames(mount).name(os.stat(path).st_ino) == relative
        rows = [p for p in ProcessCollector().collect() if p.pid == sleeper.pid]
        assert rows and rows[0].cgroup == relative
        assert printable(relative).startswith("/adv\\xff-")
    finally:
        sleeper.kill()
        sleeper.wait()
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def test_replaying_a_fifo_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "snapshot.json"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, "-m", "ktop", "--replay", str(fifo), "--snapshot",
                             str(tmp_path / "out.txt")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"ktop: error: --replay {fifo}: not a regular file; replay a file written by "
        "--record FILE or --snapshot FILE.json")
