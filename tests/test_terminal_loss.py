"""A terminal that goes away ends ktop (no root needed).

A pseudo-terminal whose master is closed is what the tmux session killed under
`su -s /bin/bash nobody -c "ktop ..."` leaves: su starts a new session, so the terminal is
not ktop's controlling one, no SIGHUP comes, and reads of it say end of input at once. ktop
must leave (its input thread must not loop on that end of input), as root and as nobody.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest
from conftest import as_nobody
from test_recording_cli import make_recording

STARTED_S = 30  # a loaded machine: Textual's import and the first frame
LEAVE_S = 10


def read_until_drawn(master: int, deadline: float) -> bytes:
    seen = b""
    # poll, not select: select refuses descriptors above 1024, which a long test session
    # can reach (and a pytest run's descriptors are not this test's to count).
    poller = select.poll()
    poller.register(master, select.POLLIN)
    while time.monotonic() < deadline and b"replay of" not in seen:
        if poller.poll(500):
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    return seen


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("user,how", [("self", "close"), ("nobody", "close"),
                                      ("nobody", "SIGHUP")])
def test_a_closed_terminal_ends_ktop(user, how, shared_dir, recorded_snapshot):
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("becoming nobody needs root")
    path = make_recording(os.path.join(shared_dir, "r.krec"), recorded_snapshot, count=20)
    os.chmod(path, 0o644)
    prefix = as_nobody(shared_dir) if user == "nobody" else []
    master, slave = os.openpty()
    os.fchmod(slave, 0o666)  # nobody's ktop reads and writes it, as su's would
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "ktop", "--replay", path],
        stdin=slave, stdout=slave, stderr=slave, cwd="/", start_new_session=True,
        env={**os.environ, "TERM": "xterm-256color", "HOME": shared_dir})
    os.close(slave)
    try:
        drawn = read_until_drawn(master, time.monotonic() + STARTED_S)
        assert b"replay of" in drawn, drawn[-2000:]
        if how == "SIGHUP":
            process.send_signal(signal.SIGHUP)
        else:
            os.close(master)
            master = -1
        before = cpu_seconds(process.pid)
        try:
            code = process.wait(LEAVE_S)
        except subprocess.TimeoutExpired:
            spent = cpu_seconds(process.pid) - before
            pytest.fail(f"ktop still runs {LEAVE_S}s after its terminal closed "
                        f"({spent:.1f}s of CPU meanwhile)")
        assert code == 0  # it left as `q` does, not on an error writing to the lost terminal
    finally:
        if master >= 0:
            os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()
