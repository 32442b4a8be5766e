"""Live: the processes pane on the real kernel under an exec and under fork churn (root: it
reads every process's /proc/PID/stat; no BPF needed)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from conftest import first_in_line, live_source, root_only, running

from ktop.collectors.procstat import read_cpu_ticks
from ktop.exports.jsonfile import to_json
from ktop.model import EXITED_PID, PANE_WAITS
from ktop.panes.processes.collector import ProcessCollector

pytestmark = root_only

# A shell loop starting /bin/true as fast as it can, for SECONDS: each child lives about a
# millisecond, so no refresh ever lists one.
CHURN = 'end=$((SECONDS+{seconds})); while [ $SECONDS -lt $end ]; do /bin/true; done'


def comm_of(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def test_a_launcher_that_execs_shows_the_new_command_line():
    """`bash` runs a while, then execs python3: same pid, same start time, new program. The
    pane shows what runs now, not the launcher's command line."""
    script = "sleep 1; exec /usr/bin/python3 -c 'import time; time.sleep(30)'"
    with running(["bash", "-c", script]) as launcher, live_source(panes=frozenset()) as source:
        before = {p.pid: p for p in source.collect().processes}[launcher.pid]
        deadline = time.monotonic() + 10
        while comm_of(launcher.pid) != "python3" and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        after = {p.pid: p for p in source.collect().processes}[launcher.pid]
    assert before.comm == "bash" and before.cmdline.startswith("bash -c sleep 1")
    assert after.comm == "python3"
    assert after.cmdline == "/usr/bin/python3 -c import time; time.sleep(30)"


def busy_percent(before, after) -> float:
    """Busy CPU over the interval from /proc/stat, 100 = one CPU."""
    d = after - before
    total = d.user + d.kernel + d.idle + d.steal
    return 100.0 * os.cpu_count() * (d.user + d.kernel) / total if total else 0.0


def test_fork_churn_is_counted_as_exited_children():
    """The shell's children exit within a millisecond. What they burnt is shown in a row
    under the shell that waited for them, and the rows account for the busy CPU that
    /proc/stat counts over the same interval."""
    with first_in_line(), running(["bash", "-c", CHURN.format(seconds=6)]) as churn, \
            live_source(panes=frozenset()) as source:
        time.sleep(1.0)  # the churn running before the interval starts
        source.collect()
        ticks_before = read_cpu_ticks()
        time.sleep(2.0)
        snapshot = source.collect()
        ticks_after = read_cpu_ticks()
    busy = busy_percent(ticks_before, ticks_after)
    rows = snapshot.processes
    exited = {p.parent: p for p in rows if p.pid == EXITED_PID}
    shell = next(p for p in rows if p.pid == churn.pid)
    children = exited[churn.pid]
    # the children run exec and the dynamic loader: most of the churn's CPU is theirs
    assert children.cpu_percent > shell.cpu_percent
    assert children.cpu_percent >= 20
    assert abs(children.cpu_percent - children.usr_percent - children.sys_percent) <= 0.1
    accounted = sum(p.cpu_percent for p in rows)
    assert accounted >= 0.85 * busy, f"rows add to {accounted:.1f}% of {busy:.1f}% busy"
    assert snapshot.tasks.running >= 1 and snapshot.tasks.forks_per_s >= 100
    written = json.loads(json.dumps(to_json(snapshot)))["processes"]
    assert any(p["pid"] == EXITED_PID and p["parent"] == churn.pid for p in written)


def test_a_short_lived_shell_and_its_children_add_up_to_what_the_kernel_charged():
    """A whole churn born and gone between two refreshes (shell and children): its CPU shows
    under this test's process, which waited for it, as much as getrusage says it used."""
    me = os.getpid()
    with live_source(panes=frozenset()) as source:
        source.collect()
        used_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        with first_in_line():
            subprocess.run(["bash", "-c", CHURN.format(seconds=2)], check=True)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        time.sleep(max(0.0, 2.5 - (time.monotonic() - started)))
        snapshot = source.collect()
        elapsed = time.monotonic() - started
    charged = (used.ru_utime - used_before.ru_utime) + (used.ru_stime - used_before.ru_stime)
    row = next(p for p in snapshot.processes if p.pid == EXITED_PID and p.parent == me)
    shown = row.cpu_percent / 100 * elapsed  # seconds of CPU, over about the same interval
    assert charged > 0.3
    assert abs(shown - charged) <= 0.15 * charged, f"shown {shown:.2f} s, charged {charged:.2f} s"


def test_a_scan_preempted_midway_still_reads_one_cpu_as_100_percent():
    """A spinner owns a CPU; the scan loses its CPU for half a second just before reading the
    spinner's stat (as on saturated CPUs). Its row is its CPU over its own interval: ~100%,
    as /proc/PID/schedstat says, not 150%."""
    with first_in_line():
        spinner = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        try:
            collector = ProcessCollector()
            collector.collect()
            time.sleep(1.0)
            read = collector._pread

            def preempted(fds, pid, name, size):
                if pid == spinner.pid and name == "stat":
                    time.sleep(0.5)
                return read(fds, pid, name, size)

            collector._pread = preempted
            with open(f"/proc/{spinner.pid}/schedstat") as f:
                ran_before = int(f.read().split()[0])
            before = time.monotonic()
            rows = collector.collect()
            with open(f"/proc/{spinner.pid}/schedstat") as f:
                ran = (int(f.read().split()[0]) - ran_before) / 1e9 / (time.monotonic() - before)
            collector.close()
        finally:
            spinner.kill()
            spinner.wait()
    row = next(r for r in rows if r.pid == spinner.pid)
    assert ran > 0.8  # it did own a CPU
    assert row.cpu_percent <= 105.0 and abs(row.cpu_percent - 100 * ran) <= 10


def test_a_shells_short_lived_children_write_in_its_exited_row(tmp_path):
    """`bash` running dd after dd, each gone within a refresh: their bytes are in the
    shell's exited-children row, as their CPU is, and not on the shell's own row."""
    me_script = (f"for i in $(seq 30); do dd if=/dev/zero of={tmp_path}/out bs=1M count=4 "
                 "conv=notrunc 2>/dev/null; rm -f {0}/out; sleep 0.05; done").replace(
                     "{0}", str(tmp_path))
    collector = ProcessCollector()
    collector.collect()
    last = time.monotonic()
    shell = subprocess.Popen(["bash", "-c", me_script])
    own = children = 0.0
    try:
        while shell.poll() is None:
            time.sleep(0.4)
            rows = collector.collect()
            now = time.monotonic()
            span, last = now - last, now  # about each row's own interval
            for row in rows:
                if row.pid == shell.pid and row.disk_write_bps:
                    own += row.disk_write_bps * span
                if row.pid == EXITED_PID and row.parent == shell.pid and row.disk_write_bps:
                    children += row.disk_write_bps * span
    finally:
        shell.wait()
        collector.close()
    written = 30 * 4 << 20
    assert children >= 0.5 * written, f"children {children / 2**20:.0f} MiB"
    assert own <= 0.1 * written, f"the shell's own row {own / 2**20:.0f} MiB"


# Asleep (quiet: with the waits pane its files go unread), then spinning until killed.
SLEEPS_THEN_SPINS = ("import sys, time\n"
                     "sys.stdin.readline()\n"
                     "while True:\n"
                     "    pass\n")


def test_a_sleeper_that_starts_burning_cpu_shows_it_at_the_next_refresh():
    """With the waits pane, a quiet process the kernel saw neither run nor wait for a CPU
    keeps its row unread; the waits drain names the processes that ran, so one that wakes
    and spins shows its CPU at the refresh after (not when every process is read again,
    UNREAD_AT_MOST refreshes later), and over that refresh's seconds, not since it was last
    read."""
    with running([sys.executable, "-c", SLEEPS_THEN_SPINS], stdin=subprocess.PIPE) as spinner, \
            live_source(panes=frozenset({PANE_WAITS})) as source:
        def cpu_now() -> float | None:
            time.sleep(0.5)
            row = next((r for r in source.collect().processes if r.pid == spinner.pid), None)
            return row.cpu_percent if row else None

        asleep = [cpu_now() for _ in range(6)]
        spinner.stdin.write(b"go\n")
        spinner.stdin.flush()
        began = cpu_now()  # the refresh it began in: part of it
        busy = [cpu_now() for _ in range(3)]
    assert asleep[-3:] == [0.0, 0.0, 0.0], asleep
    assert all(cpu is not None and cpu >= 70 for cpu in busy), (began, busy)
