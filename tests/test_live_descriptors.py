"""ktop on a real server: many processes, few descriptors, hostile command lines; the TUI
starts, and the headless modes run and go on (root: the panes load BPF programs)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import psutil
import pytest
from conftest import first_in_line, root_only
from test_live_tmux import Tmux, exit_code, start_ktop

from ktop.collectors.procfiles import SELECT_LIMIT

pytestmark = [pytest.mark.live, root_only]


@contextlib.contextmanager
def sleepers(count: int) -> Iterator[None]:
    """count sleeping processes, all gone afterwards."""
    group = subprocess.Popen(["sh", "-c", f"for i in $(seq {count}); do sleep 600 & done; wait"],
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(subprocess.run(["pgrep", "-g", str(group.pid)], capture_output=True,
                                 text=True).stdout.split()) < count + 1:
            assert time.monotonic() < deadline, "the sleepers did not start"
            time.sleep(0.2)
        yield
    finally:
        os.killpg(group.pid, signal.SIGKILL)
        group.wait()


def descriptors(pid: int) -> dict[int, str]:
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            found[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return found


def test_the_tui_starts_with_1500_processes_and_lists_them():
    """Past ~330 processes the kept /proc descriptors pushed the terminal driver's wake pipe
    past 1024 and the TUI died at start: `ValueError: filedescriptor out of range in
    select()`."""
    tmux = Tmux()
    try:
        with sleepers(1500), first_in_line():
            ktop = start_ktop(tmux)
            tmux.send("4")
            tmux.send("z")  # the processes pane alone
            tmux.send("i")  # idle rows too: the sleepers'
            screen = tmux.wait_for(" tasks, ", timeout=30)
            tasks = re.search(r"(\d+) tasks, ", screen)
            assert tasks and int(tasks.group(1)) > 1500, screen  # the sleepers listed
            fds = descriptors(ktop.pid)
            high = {fd: target for fd, target in fds.items() if fd >= SELECT_LIMIT}
            # the scan's descriptors are kept above select()'s range, and only they are
            assert len(high) > 1500
            assert all(target.startswith("/proc/") for target in high.values())
            assert any(target.startswith(("pipe:", "/dev/pts")) for target in fds.values())
            tmux.send("q")
            assert exit_code(tmux) == "0"
    finally:
        tmux.close()


def limited(soft: int) -> list[str]:
    return ["prlimit", f"--nofile={soft}:{soft}", "--"]


def test_headless_modes_run_under_ulimit_1024_with_770_processes(tmp_path):
    """With `ulimit -n 1024` and ~770 processes, --snapshot, --record and --serve died with
    EMFILE tracebacks in the main and the loader thread: the four tables of kept
    descriptors could take the whole limit."""
    ktop = [*limited(1024), sys.executable, "-m", "ktop"]
    with sleepers(770), first_in_line():
        snapshot = subprocess.run([*ktop, "--snapshot", str(tmp_path / "s.json"),
                                   "--duration", "2"], capture_output=True, text=True,
                                  timeout=180)
        assert snapshot.returncode == 0, snapshot.stderr
        assert "Traceback" not in snapshot.stderr and "Errno 24" not in snapshot.stderr
        assert (tmp_path / "s.json").read_text().count('"sleep"') >= 770
        record = subprocess.run([*ktop, "--record", str(tmp_path / "r.krec"), "--duration",
                                 "3"], capture_output=True, text=True, timeout=180)
        assert record.returncode == 0, record.stderr
        assert "Traceback" not in record.stderr and "Errno 24" not in record.stderr
        with socket.socket() as probe:  # a free port
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        serve = subprocess.Popen([*ktop, "--serve", f"127.0.0.1:{port}"],
                                 stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            page = ""
            while "ktop_process" not in page:
                assert time.monotonic() < deadline and serve.poll() is None
                time.sleep(1)
                with contextlib.suppress(OSError):
                    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                  timeout=10).read().decode()
        finally:
            serve.send_signal(signal.SIGTERM)
            _, errors = serve.communicate(timeout=60)
        assert "Traceback" not in errors and "Errno 24" not in errors, errors


HUGE_ARGS = "import sys, time; time.sleep(600)"


def test_record_goes_on_past_nobodys_processes_of_huge_command_lines(tmp_path, shared_dir):
    """nobody runs 6 processes of 1.8 MB command lines (control bytes, 6 bytes of JSON
    each): `ktop --record` stopped at the first interval, exit 1, 'not recorded'."""
    from conftest import as_nobody  # noqa: PLC0415

    from ktop.record.fileformat import Recording  # noqa: PLC0415

    args = ["\x01" * (120 << 10)] * 15  # 1.8 MB: 15 arguments of the kernel's 128 KiB most
    hostile = [subprocess.Popen([*as_nobody(shared_dir), sys.executable, "-c", HUGE_ARGS, *args])
               for _ in range(6)]
    try:
        time.sleep(1)
        assert all(p.poll() is None for p in hostile)
        path = tmp_path / "r.krec"
        with first_in_line():
            result = subprocess.run([sys.executable, "-m", "ktop", "--record", str(path),
                                     "--duration", "3"], capture_output=True, text=True,
                                    timeout=180)
        assert result.returncode == 0, result.stderr
        assert "not recorded" not in result.stderr + result.stdout
        recording = Recording(str(path))
        assert len(recording) >= 2
        last = recording.snapshot(len(recording) - 1)
        pythons = [p for p in last.processes if p.cmdline.startswith(sys.executable + " -c")
                   and "\x01" in p.cmdline]
        assert len(pythons) >= 6
        assert all(len(p.cmdline) <= 4096 + 3 for p in pythons)
    finally:
        for p in hostile:
            p.kill()
            p.wait()


FILL_LOW_DESCRIPTORS = ("import os, sys\n"
                        "for _ in range(1100):\n"
                        "    os.set_inheritable(os.open('/dev/null', os.O_RDONLY), True)\n"
                        "os.execv(sys.executable, [sys.executable, '-m', 'ktop'])\n")


def test_the_tui_starts_with_the_low_descriptors_taken():
    """A machine of many CPUs opens a perf event a CPU and program: descriptors below 1024
    can run out whatever ktop keeps above them, and the terminal driver's wake pipe then
    lands past 1024, which select() refuses. The driver waits in poll()."""
    tmux = Tmux()
    try:
        with first_in_line():
            tmux.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(FILL_LOW_DESCRIPTORS)}; "
                     "printf 'KTOP_%s=%s\\n' EXIT $?")
            tmux.wait_for("Hot kernel functions")
            tmux.wait_for("samples ")
            (ktop,) = psutil.Process(int(tmux.display("#{pane_pid}"))).children()
            pipes = [fd for fd, target in descriptors(ktop.pid).items()
                     if target.startswith("pipe:")]
            assert max(pipes) >= SELECT_LIMIT  # the wake pipe among them, past select()'s
            tmux.send("q")
            assert exit_code(tmux) == "0"
    finally:
        tmux.close()
