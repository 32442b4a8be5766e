"""The interactive TUI in a real terminal (tmux): it starts, shows live data, and leaves the
terminal as it found it (root: the panes load BPF programs)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import (
    FIXTURES,
    HeldPrograms,
    first_in_line,
    root_only,
)

pytestmark = [pytest.mark.live, root_only]

PROGRAM = "on_cpu_sample"
# What Textual switches on and must switch off again: alternate screen, hidden cursor, mouse.
TERMINAL_STATE = "#{alternate_on} #{cursor_flag} #{mouse_any_flag} #{mouse_sgr_flag}"
NORMAL_STATE = "0 1 0 0"


class Tmux:
    """One private tmux server (own socket, no config) running bash at 160x50."""

    def __init__(self) -> None:
        self.socket = f"ktop-test-{os.getpid()}-{time.monotonic_ns()}"
        env = {**os.environ, "PS1": "$ ", "TERM": "xterm-256color"}
        self.tmux("new-session", "-d", "-s", "t", "-x", "160", "-y", "50",
                  "bash --norc --noprofile", env=env)
        self.socket_path = self.display("#{socket_path}")

    def tmux(self, *args: str, env=None) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, check=True, env=env).stdout

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def display(self, fmt: str) -> str:
        return self.tmux("display-message", "-p", "-t", "t", fmt).strip()

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the screen:\n{self.screen()}")

    def wait_for_line(self, prefix: str, timeout: float = 60) -> str:
        """The rest of the first line that starts with prefix (output, not the typed command)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.screen().splitlines():
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
            time.sleep(0.2)
        raise AssertionError(f"no line starts with {prefix!r}; the screen:\n{self.screen()}")

    def run(self, command: str) -> None:
        self.send(command, "Enter")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)


@pytest.fixture
def terminal():
    tmux = Tmux()
    try:
        with first_in_line():
            yield tmux
    finally:
        tmux.close()


def stty_state(tmux: Tmux, marker: str) -> str:
    """The terminal's line settings (cooked mode, echo...) as `stty -g` prints them."""
    tmux.run(f"printf '%s=%s\\n' {marker} \"$(stty -g)\"")
    return tmux.wait_for_line(f"{marker}=")


def start_ktop(tmux: Tmux) -> psutil.Process:
    tmux.run(f"{shlex.quote(sys.executable)} -m ktop; printf 'KTOP_%s=%s\\n' EXIT $?")
    tmux.wait_for("Hot kernel functions")
    tmux.wait_for("samples ")  # the first interval's data is on the screen
    shell = psutil.Process(int(tmux.display("#{pane_pid}")))
    (ktop,) = shell.children()
    return ktop


def exit_code(tmux: Tmux) -> str:
    return tmux.wait_for_line("KTOP_EXIT=", timeout=30)


def test_q_quits_and_restores_the_terminal(terminal):
    before = stty_state(terminal, "BEFORE")
    start_ktop(terminal)
    assert terminal.display(TERMINAL_STATE) != NORMAL_STATE  # the TUI really took the terminal
    terminal.send("q")
    assert exit_code(terminal) == "0"
    assert terminal.display(TERMINAL_STATE) == NORMAL_STATE
    assert "Hot kernel functions" not in terminal.screen()  # the shell's screen is back
    assert stty_state(terminal, "AFTER") == before  # cooked mode, echo on


# Regression: without a SIGTERM handler `kill` left the alternate screen, hidden cursor and
# mouse reporting on.
def test_sigterm_restores_the_terminal_and_detaches_the_sampler(terminal):
    before = stty_state(terminal, "BEFORE")
    ktop = start_ktop(terminal)
    held = HeldPrograms(ktop.pid)
    assert PROGRAM in held.names()
    ktop.send_signal(signal.SIGTERM)
    exit_code(terminal)
    assert terminal.display(TERMINAL_STATE) == NORMAL_STATE
    assert stty_state(terminal, "AFTER") == before
    assert held.left_behind() == ([], set())


def test_q_while_the_bpf_panes_compile_exits_and_leaves_no_program(terminal, tmp_path):
    """Start-up work runs in the background: quitting during it must not wait for clang,
    and nothing ktop loaded may outlive it."""
    before = stty_state(terminal, "BEFORE")
    empty = tmp_path / "programs"  # nothing compiled yet: this start compiles
    empty.mkdir(mode=0o700)
    terminal.run(f"KTOP_BPF_CACHE={shlex.quote(str(empty))} {shlex.quote(sys.executable)} "
                 f"-m ktop; printf 'KTOP_%s=%s\\n' EXIT $?")
    screen = terminal.wait_for("4 Processes")
    ktop = psutil.Process(int(terminal.display("#{pane_pid}"))).children()[0]
    deadline = time.monotonic() + 30
    while "compiling its BPF program" not in screen and "waiting for a BPF" not in screen:
        assert time.monotonic() < deadline, f"never saw a pane loading:\n{screen}"
        screen = terminal.screen()
    held = HeldPrograms(ktop.pid)
    held.poll()  # those loaded so far, its compiler's included (perhaps none yet)
    terminal.send("q")
    assert exit_code(terminal) == "0"
    assert terminal.display(TERMINAL_STATE) == NORMAL_STATE
    assert stty_state(terminal, "AFTER") == before
    assert not ktop.is_running()
    assert held.left_behind() == ([], set())  # the compiler did not go on without it


def test_keys_reach_the_app_in_a_real_terminal_a_lone_esc_too(terminal):
    """ktop's driver reads the terminal only when it has input (ktop/ui/driver.py): a key
    arrives, and so does a lone Esc, which the parser holds until its timeout says it is
    no escape sequence."""
    start_ktop(terminal)
    terminal.send("?")
    terminal.wait_for("ktop: columns and keys (Esc closes)", timeout=10)
    terminal.send("Escape")
    deadline = time.monotonic() + 10
    while "ktop: columns and keys (Esc closes)" in terminal.screen():
        assert time.monotonic() < deadline, "Esc never closed the help screen"
        time.sleep(0.1)
    terminal.send("q")
    assert exit_code(terminal) == "0"


def test_stopped_and_continued_from_outside_ktop_keeps_one_input_and_output_thread(terminal):
    """kill -STOP then kill -CONT (not Ctrl-Z, which Textual sees): Textual started
    application mode again beside the running one, with a second input and output thread;
    two threads then read one terminal, and `q` could wait in read() for another key
    (30-80 s at load 13)."""
    terminal.run(f"sh -c '{shlex.quote(sys.executable)} -m ktop --replay "
                 f"{shlex.quote(str(FIXTURES / 'recorded.json'))}; "
                 "printf \"KTOP_%s=%s\\n\" EXIT $?'")
    terminal.wait_for("Processes")
    ktop = next(p for p in psutil.Process(int(terminal.display("#{pane_pid}"))).children(True)
                if p.cmdline()[1:3] == ["-m", "ktop"])
    time.sleep(1.0)
    threads = ktop.num_threads()
    for _ in range(3):
        ktop.suspend()
        time.sleep(0.3)
        ktop.resume()
        time.sleep(0.5)
    assert ktop.num_threads() == threads, "SIGCONT started more terminal threads"
    terminal.send("q")
    assert exit_code(terminal) == "0"


def test_a_stopped_ktop_measures_its_first_refresh_over_the_gap_and_says_so(terminal):
    """SIGSTOP for a while, then SIGCONT: the refreshes missed were collected in a burst
    milliseconds apart, the last showing CPU% over ~15 ms (processes 0.0%, ktop itself
    87-135%). Now one refresh covers the gap, and the screen says what happened."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # Under sh, not the shell's own job: bash would take the terminal back when ktop
        # stops (and tmux continues a stopped child of its own at once).
        terminal.run(f"sh -c '{shlex.quote(sys.executable)} -m ktop -p {busy.pid}; "
                     "printf \"KTOP_%s=%s\\n\" EXIT $?'")
        terminal.wait_for(f" {busy.pid}  root ")
        # Every BPF pane attached (no pane's border or line says it is loading, and the header
        # has a BPF figure): a pane attaching after SIGCONT brings a refresh over ~0.3 s of
        # compiling, truly ~100% of a CPU. (The header's per-pane BPF figures, once the sign,
        # are dropped to fit beside the --pid badge with six panes.)
        deadline = time.monotonic() + 60

        def loading(screen: str) -> bool:
            return ("BPF n/a" in screen.splitlines()[0]
                    or any(word in screen for word in ("loading", "compiling", "kernel's symbols",
                                                       "waiting for a BPF")))

        while loading(terminal.screen()):
            assert time.monotonic() < deadline, f"the BPF panes never loaded:\n{terminal.screen()}"
            time.sleep(0.2)
        ktop = next(p for p in psutil.Process(int(terminal.display("#{pane_pid}"))).children(True)
                    if p.cmdline()[1:3] == ["-m", "ktop"])
        time.sleep(1.5)
        ktop.suspend()
        time.sleep(6)
        ktop.resume()
        screen = terminal.wait_for("ktop did not run for", timeout=15)
        header = screen.splitlines()[0]
        own = float(header.split("ktop CPU ")[1].split("%")[0])
        assert own < 50, header  # over the seconds since the last refresh, not 15 ms
        row = next(line for line in screen.splitlines() if f" {busy.pid}  root " in line)
        assert float(row.split(" root ")[1].split()[1]) > 5, row  # its CPU%: it ran meanwhile
        assert "this refresh covers" in screen.replace("\n", " ").replace("│", " ")
        terminal.send("q")
        assert exit_code(terminal) == "0"
    finally:
        busy.kill()
        busy.wait()
