"""The processes pane's numbers, read from /proc/PID/stat as top reads them."""

from __future__ import annotations

import os
import sys
import time

import pytest

from ktop.panes.processes.collector import (
    ProcessCollector,
    _full_name,
    parse_stat,
    read_cmdline,
    real_uid,
)

# A command name may hold spaces and parentheses: the last ") " ends it. Fields as Linux 6.x
# writes them: utime 250, stime 50, cutime 40, cstime 10, arg_start/arg_end at 48 and 49.
STAT = (b"4242 (evil) (name) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
        b"250 50 40 10 20 0 3 0 123456 10000000 777 18446744073709551615 1 1 0 0 0 0 0 0 0 0 "
        b"0 0 0 0 0 0 0 0 0 0 0 0 140720000 140720040 140720040 140720100 0\n")


def test_stat_fields_are_the_ones_top_shows():
    stat = parse_stat(STAT)
    assert stat.comm == "evil) (name"
    assert stat.state == "S" and stat.ppid == 1
    assert (stat.total, stat.system) == (300, 50)  # utime + stime, stime, in clock ticks
    assert stat.threads == 3 and stat.start == 123456 and stat.rss_pages == 777
    # children it waited for: cutime + cstime, cstime; where its command line lives
    assert (stat.reaped, stat.reaped_system) == (50, 10)
    assert stat.args == (b"140720000", b"140720040")


def test_a_truncated_stat_is_no_row():
    assert parse_stat(b"4242 (x) S 1 2") is None
    assert parse_stat(b"garbage") is None


def test_the_real_uid_is_the_first_of_four():
    assert real_uid(b"Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t0\n") == 1000
    assert real_uid(b"Name:\tx\n") is None


def test_long_names_come_whole_from_the_command_line():
    assert _full_name("systemd-journal", "/lib/systemd/systemd-journald") == "systemd-journald"
    assert _full_name("systemd-journal", "") == "systemd-journal"
    assert _full_name("short", "/usr/bin/other") == "short"


def test_command_lines_read_as_htop_shows_them(tmp_path):
    def cmdline(data: bytes) -> str:
        path = tmp_path / "cmdline"
        path.write_bytes(data)
        return read_cmdline(str(path))

    assert cmdline(b"python3\0-m\0http.server\0") == "python3 -m http.server"
    assert cmdline(b"postgres: writer ") == "postgres: writer"  # rewrote its arguments
    assert cmdline(b"") == ""  # a kernel thread
    assert cmdline(b"caf\xe9\0") == "caf\ufffd"  # not UTF-8: shown, not fatal
    assert read_cmdline(str(tmp_path / "gone")) == ""  # exited before we looked
    # 1.8 MB of arguments (nobody can run six): its first 4 KiB kept, the cut said
    long = cmdline(b"prog\0" + b"x" * (120 << 10) + b"\0" + b"y" * (1800 << 10) + b"\0")
    assert long.startswith("prog xxx") and long.endswith("x...") and len(long) == 4096 + 3
    assert read_cmdline(f"/proc/{os.getpid()}/cmdline").startswith(sys.orig_argv[0])  # this run, as started


def test_this_process_is_measured_while_it_burns_cpu():
    collector = ProcessCollector()
    collector.start()
    # Against the CPU time this process got (a loaded machine gives a busy loop less than
    # a CPU): what the kernel charged to it, over the same seconds, within ticks' rounding.
    wall, used = time.monotonic(), time.process_time()
    until = wall + 0.3
    while time.monotonic() < until:
        pass
    rows = {row.pid: row for row in collector.collect()}
    got = 100 * (time.process_time() - used) / (time.monotonic() - wall)
    me = rows[os.getpid()]
    assert me.cpu_percent > 10 and abs(me.cpu_percent - got) < max(0.25 * got, 10)
    assert me.rss_bytes > 1 << 20 and me.threads >= 1
    assert me.user == __import__("pwd").getpwuid(os.getuid()).pw_name


def open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def asleep_in_nanosleep(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until the process sleeps in its system call with its I/O counts still: a
    loaded machine may still be running its exec (reading the binary) a moment after."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/wchan") as wchan, open(f"/proc/{pid}/io") as io:
            now = wchan.read() + io.read()
        if "nanosleep" in now and now == last:
            return
        last = now
        time.sleep(0.1)
    raise AssertionError(f"pid {pid} never settled in nanosleep: {last!r}")


def test_an_exited_process_leaves_its_row_and_its_open_stat_file():
    """/proc/PID/stat stays open between refreshes; a process that exits takes both its row
    and that descriptor with it, and an unchanged process keeps its row."""
    import subprocess  # noqa: PLC0415

    before = open_fds()
    child = subprocess.Popen(["sleep", "30"])
    collector = ProcessCollector()
    try:
        asleep_in_nanosleep(child.pid)  # its exec's reads done: nothing changes after
        collector.collect()
        time.sleep(0.05)
        rows = {r.pid: r for r in collector.collect()}
        assert rows[child.pid].comm == "sleep"
        stat = f"/proc/{child.pid}/stat"
        assert stat in open_fds()
        again = {r.pid: r for r in collector.collect()}
        assert again[child.pid] is rows[child.pid]  # nothing changed: the same row
        child.kill()
        child.wait()
        assert child.pid not in {r.pid for r in collector.collect()}
        assert stat not in open_fds()
    finally:
        child.kill()
        collector.close()
    assert open_fds() <= before  # close() closed every one


# ---- a /proc of our own: exec, exited children, the kernel's task counts --------------------

TICKS = os.sysconf("SC_CLK_TCK")


class FakeProc:
    """A directory laid out as /proc, whose files the test rewrites in place (the collector
    keeps them open and reads them again), and a clock the test moves."""

    def __init__(self, root, monkeypatch) -> None:
        import ktop.panes.processes.collector as processes  # noqa: PLC0415

        self.root = root
        self.now = 1000.0
        self.forks = 5000
        clock = type("Clock", (), {
            "monotonic": staticmethod(lambda: self.now),
            "clock_gettime": staticmethod(lambda _: self.now),
            "CLOCK_BOOTTIME": 0,
        })
        monkeypatch.setattr(processes, "time", clock)
        self.write_proc_stat(running=1)

    def write_proc_stat(self, running: int) -> None:
        self._rewrite(self.root / "stat", f"cpu  1 2 3 4 5 6 7 8 0 0\nintr 1 2 3\nctxt 9\n"
                      f"btime 1\nprocesses {self.forks}\nprocs_running {running}\n"
                      "procs_blocked 0\n".encode())

    @staticmethod
    def _rewrite(path, data: bytes) -> None:
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.write(data)
            f.truncate()

    def process(self, pid: int, comm: str, cmdline: bytes, *, utime=0, stime=0, cutime=0,
                cstime=0, ppid=1, start=100, args=(1000, 1020), state="S", io=None,
                own_io=None, rss=100) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        # fields 3..52 of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt
        # majflt cmajflt utime stime cutime cstime prio nice threads itreal start vsize rss ...
        tail = [state, ppid, pid, pid, 0, -1, 0, 0, 0, 0, 0, utime, stime, cutime, cstime,
                20, 0, 1, 0, start, 1 << 20, rss] + [0] * 23 + [args[0], args[1], args[1], 2000, 0]
        self._rewrite(d / "stat", f"{pid} ({comm}) {' '.join(map(str, tail))}\n".encode())
        self._rewrite(d / "cmdline", cmdline)
        (d / "status").write_bytes(b"Uid:\t0\t0\t0\t0\n")
        (d / "cgroup").write_bytes(b"0::/test\n")
        if io is not None:
            self._rewrite(d / "io", self._io(io))
            # its one thread's own count: all of it unless told (the rest is of dead tasks)
            (d / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
            self._rewrite(d / "task" / str(pid) / "io", self._io(io if own_io is None else own_io))

    @staticmethod
    def _io(counts) -> bytes:
        return (f"rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: {counts[0]}\n"
                f"write_bytes: {counts[1]}\ncancelled_write_bytes: 0\n").encode()

    def exit(self, pid: int) -> None:
        import shutil  # noqa: PLC0415

        shutil.rmtree(self.root / str(pid))

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


def test_a_process_that_execs_shows_its_new_command_line(tmp_path, monkeypatch):
    """A launcher script's `bash` execs `python3 prog.py`: same pid and start time, new comm
    and arguments. The new command line is read again; an unchanged process's is not."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0launch.sh\0")
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    proc.process(100, "python3", b"python3\0prog.py\0", args=(5000, 5016))
    (row,) = collector.collect()
    assert (row.comm, row.cmdline) == ("python3", "python3 prog.py")
    # exec'd again, into a program of the same name: the arguments moved, that says it
    proc.tick()
    proc.process(100, "python3", b"python3\0other.py\0", args=(7000, 7017))
    (row,) = collector.collect()
    assert row.cmdline == "python3 other.py"
    # a process that did not exec is not read again (one syscall saved per process)
    proc.tick()
    (tmp_path / "100" / "cmdline").write_bytes(b"changed\0behind\0our\0back\0")
    (row,) = collector.collect()
    assert row.cmdline == "python3 other.py"


def exited(rows):
    return {r.parent: r for r in rows if r.pid == -1}


def test_children_that_exit_between_refreshes_show_as_their_parents_exited_row(
        tmp_path, monkeypatch):
    """A shell loop's children live a millisecond each: no refresh ever lists them, but the
    kernel adds their CPU to the shell's cutime/cstime when the shell waits for them."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0churn.sh\0", utime=10, stime=10)
    collector = ProcessCollector(str(tmp_path))
    assert exited(collector.collect()) == {}
    proc.tick()
    # in one second, children used 0.6 s of user and 0.3 s of system time
    proc.process(100, "bash", b"bash\0churn.sh\0", utime=12, stime=20,
                 cutime=round(0.6 * TICKS), cstime=round(0.3 * TICKS))
    rows = collector.collect()
    row = exited(rows)[100]
    assert (row.cpu_percent, row.user_percent, row.sys_percent) == (90.0, 60.0, 30.0)
    assert row.comm == "bash" and row.cmdline == "bash churn.sh" and row.state == "X"
    shell = next(r for r in rows if r.pid == 100)
    assert (shell.cpu_percent, shell.user_percent, shell.sys_percent) == (
        round(100 * 12 / TICKS, 1), round(100 * 2 / TICKS, 1), round(100 * 10 / TICKS, 1))
    # an idle second: no children exited, no row
    proc.tick()
    assert exited(collector.collect()) == {}


def test_a_child_seen_alive_is_not_counted_twice_when_it_exits(tmp_path, monkeypatch):
    """A child that ran for a while was shown in its own row; when its parent waits for it,
    the parent's cutime grows by the child's whole life. Only what it did since our last
    look is new, even when the parent waits a refresh later."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "make", b"make\0")
    proc.process(200, "cc1", b"cc1\0x.c\0", utime=500, ppid=100)
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    proc.exit(200)  # it ran 0.5 s more, exited; make has not waited yet (a zombie reaped)
    assert exited(collector.collect()) == {}
    proc.tick()
    proc.process(100, "make", b"make\0", cutime=500 + TICKS // 2)
    row = exited(collector.collect())[100]
    assert row.cpu_percent == 50.0  # the last half second alone, not 500 ticks more


def test_the_kernel_counts_running_tasks_and_forks(tmp_path, monkeypatch):
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0")
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick(2.0)
    proc.forks += 6000
    proc.write_proc_stat(running=3)
    collector.collect()
    assert (collector.tasks.running, collector.tasks.forks_per_s) == (3, 3000.0)


def test_a_process_born_between_refreshes_shows_its_cpu_at_first_sight(tmp_path, monkeypatch):
    """Its counters started at zero when it was born: a dd that burns 0.8 s before the next
    refresh read 0.0% there (four such dd made a busy machine's rows add to 70%)."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0")
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    born = round((proc.now - 0.9) * TICKS)  # 0.1 s after the last refresh
    proc.process(300, "dd", b"dd\0", utime=round(0.2 * TICKS), stime=round(0.6 * TICKS),
                 start=born, ppid=100, state="R")
    dd = next(r for r in collector.collect() if r.pid == 300)
    assert (dd.cpu_percent, dd.user_percent, dd.sys_percent) == (80.0, 20.0, 60.0)


def test_a_grandchild_waited_for_by_a_child_that_exited_too_is_counted_once(
        tmp_path, monkeypatch):
    """ktop's own loader child: seen alive, reaped by ktop, and ktop itself then reaped by
    the shell, all in one interval. The shell's cutime grows by both lives; only what both
    did since the last look is new."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0")
    proc.process(200, "ktop", b"ktop\0", utime=90, ppid=100)
    proc.process(300, "loader", b"loader\0", utime=120, ppid=200)
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    proc.exit(300)
    proc.exit(200)  # each ran TICKS // 4 more; the shell now counts both whole lives
    proc.process(100, "bash", b"bash\0", cutime=90 + 120 + 2 * (TICKS // 4))
    rows = collector.collect()
    assert exited(rows)[100].cpu_percent == round(100 * 2 * (TICKS // 4) / TICKS, 1)
    assert set(exited(rows)) == {100}


def test_prometheus_sums_the_exited_rows_of_parents_of_one_command(recorded_snapshot):
    """Two shells' exited children: one series of their command, both counted (a dict
    keyed by pid and comm kept the last alone)."""
    from dataclasses import replace  # noqa: PLC0415

    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    from ktop.exports.openmetrics import to_prom  # noqa: PLC0415
    from ktop.model import EXITED_PID  # noqa: PLC0415

    shell = recorded_snapshot.processes[0]
    rows = tuple(replace(shell, pid=EXITED_PID, parent=parent, comm="bash", cpu_percent=cpu,
                         sys_percent=sys) for parent, cpu, sys in ((10, 50.0, 20.0), (11, 30.0, 10.0)))
    text = to_prom(replace(recorded_snapshot, processes=rows), top=5)
    samples = next(f for f in text_string_to_metric_families(text)
                   if f.name == "ktop_process_cpu_ratio").samples
    exited = {s.labels["mode"]: s.value for s in samples if s.labels["comm"] == "bash"}
    assert exited == {"system": pytest.approx(0.3), "user": pytest.approx(0.5)}


def test_a_childs_disk_bytes_are_not_its_parents_when_it_exits(tmp_path, monkeypatch):
    """A shell runs dd: the kernel adds dd's bytes to the shell's /proc/PID/io when the shell
    waits for it. dd's own row showed them while it ran; the shell did not write 50 MiB, and
    what dd wrote after ktop last saw it is in the shell's exited-children row, as its CPU."""
    mib = 1 << 20
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0", io=(0, 0))
    proc.process(200, "dd", b"dd\0", ppid=100, io=(0, 40 * mib))
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    proc.process(200, "dd", b"dd\0", ppid=100, io=(0, 45 * mib))
    dd = next(r for r in collector.collect() if r.pid == 200)
    assert dd.disk_write_bps == 5 * mib
    proc.tick()
    proc.exit(200)  # 5 MiB more, then exit; the shell now counts all 50
    proc.process(100, "bash", b"bash\0", io=(0, 50 * mib), own_io=(0, 0), cutime=20)
    rows = collector.collect()
    shell = next(r for r in rows if r.pid == 100)
    assert shell.disk_write_bps == 0  # not one byte of dd's is the shell's own
    assert exited(rows)[100].disk_write_bps == 5 * mib  # dd's last 5 MiB, not its 50
    proc.tick()
    rows = collector.collect()
    assert next(r for r in rows if r.pid == 100).disk_write_bps == 0 and exited(rows) == {}


def test_children_never_seen_alive_write_in_the_exited_row(tmp_path, monkeypatch):
    """`bash script` starting dd after dd, each gone before a refresh lists it (the report:
    `bash ... DISK W/s 498.1M` while `<children of PID>` showed `-`). The shell's own writes
    stay its own."""
    mib = 1 << 20
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0script\0", io=(0, 10 * mib), own_io=(0, 1 * mib))
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    for second in range(1, 4):
        proc.tick()
        # each second: children write 498 MiB and use 0.3 s of CPU; the shell 1 MiB itself
        proc.process(100, "bash", b"bash\0script\0", io=(0, (10 + 499 * second) * mib),
                     own_io=(0, (1 + second) * mib), cutime=round(0.3 * TICKS * second))
        rows = collector.collect()
        shell = next(r for r in rows if r.pid == 100)
        children = exited(rows)[100]
        assert children.cpu_percent == 30.0
        if second == 1:  # first seen waiting: its dead tasks' share of what it gained
            assert (children.disk_write_bps, shell.disk_write_bps) == (499 * mib, 0)
        else:  # from then on, each by what its live thread and its dead tasks gained
            assert (children.disk_write_bps, shell.disk_write_bps) == (498 * mib, 1 * mib)


def test_a_quiet_process_row_follows_every_change_of_its_files(tmp_path, monkeypatch):
    """Rows of processes whose stat and io read as before are kept unparsed (most of an idle
    machine): any change, and the end of a busy spell, still shows at the next refresh."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "sleeper", b"sleeper\0", io=(0, 0))
    collector = ProcessCollector(str(tmp_path))

    def refresh():
        proc.tick()
        (row,) = collector.collect()
        return row

    collector.collect()
    quiet = refresh()
    assert (quiet.state, quiet.cpu_percent, quiet.disk_write_bps) == ("S", 0.0, 0.0)
    assert refresh() is quiet  # read byte for byte as before: the same row
    proc.process(100, "sleeper", b"sleeper\0", io=(0, 0), state="D")
    assert refresh().state == "D"
    proc.process(100, "sleeper", b"sleeper\0", io=(0, 4096), state="D")  # io alone moved
    assert refresh().disk_write_bps == 4096
    assert refresh().disk_write_bps == 0  # and stopped: the rate falls back
    proc.process(100, "sleeper", b"sleeper\0", io=(0, 4096), state="D", utime=50)
    assert refresh().cpu_percent == 50.0
    assert refresh().cpu_percent == 0.0  # nothing moved since: back to 0, not kept at 50


def test_a_scan_preempted_midway_measures_each_process_over_its_own_interval(
        tmp_path, monkeypatch):
    """Two processes each burn one CPU of two. On saturated CPUs the scan is preempted before
    it reads one of them: read half a second late, its counters hold 1.5 s of CPU. Over the
    scans' 1 s that was 150%, and a cgroup of 89 tasks read 204% on 2 CPUs."""
    proc = FakeProc(tmp_path, monkeypatch)
    began = proc.now

    def burning(pid: int) -> None:  # its counters as they are when read: one CPU since began
        proc.process(pid, "spin", b"spin\0", utime=round((proc.now - began) * TICKS), state="R")

    burning(100)
    burning(200)
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    read = collector._pread

    def preempted(fds, pid, name, size):
        if name == "stat":
            if pid == 200:
                proc.tick(0.5)  # the scan lost its CPU just before reading 200
            burning(pid)
        return read(fds, pid, name, size)

    monkeypatch.setattr(collector, "_pread", preempted)
    rows = collector.collect()
    assert [r.cpu_percent for r in rows] == [100.0, 100.0]


def test_a_thread_that_exits_keeps_its_bytes_on_its_process_row(tmp_path, monkeypatch):
    """A shell that waits for children also lost a thread: the thread's bytes move to the
    process's dead tasks' share, but it wrote them itself (and its row showed them)."""
    mib = 1 << 20
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "bash", b"bash\0", io=(0, 10 * mib), own_io=(0, 10 * mib))
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()  # a child writes 5 MiB and is waited for
    proc.process(100, "bash", b"bash\0", io=(0, 15 * mib), own_io=(0, 10 * mib), cutime=10)
    assert exited(collector.collect())[100].disk_write_bps == 5 * mib
    proc.tick()  # a thread that wrote 4 MiB of those 10 exits; the shell writes 1 MiB more
    proc.process(100, "bash", b"bash\0", io=(0, 16 * mib), own_io=(0, 7 * mib), cutime=10)
    rows = collector.collect()
    assert next(r for r in rows if r.pid == 100).disk_write_bps == 1 * mib
    assert exited(rows) == {}


def test_a_quiet_process_the_kernel_saw_not_run_keeps_its_row_unread(tmp_path, monkeypatch):
    """With the waits pane's drain, a process that showed nothing moving and was neither on
    a CPU nor on a run queue since cannot have used CPU, read, written or waited for a CPU:
    its files are not read (two reads a process, most of an idle machine's). One that ran
    is read, its rate over the last interval alone; every process is read again within
    UNREAD_AT_MOST refreshes (its memory can shrink without it running: reclaim)."""
    from ktop.panes.processes.collector import UNREAD_AT_MOST  # noqa: PLC0415

    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "sleeper", b"sleeper\0", utime=10)
    proc.process(200, "worker", b"worker\0", utime=10)
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    proc.tick()
    collector.collect()  # both quiet now, rates shown
    refreshes = 2
    while refreshes % UNREAD_AT_MOST != UNREAD_AT_MOST - 2:  # the next is not a full read
        proc.tick()
        collector.collect(ran=set())
        refreshes += 1
    proc.tick()
    # The worker ran a second; the sleeper's memory was reclaimed while it slept.
    proc.process(100, "sleeper", b"sleeper\0", utime=10, rss=40)
    proc.process(200, "worker", b"worker\0", utime=10 + TICKS)
    rows = {r.pid: r for r in collector.collect(ran={200})}
    assert rows[200].cpu_percent == 100.0  # over its last second, not since its last read
    assert rows[100].rss_bytes == 100 * os.sysconf("SC_PAGE_SIZE")  # not read
    # The next refresh is one in UNREAD_AT_MOST: everyone read, whatever the kernel saw.
    proc.tick()
    rows = {r.pid: r for r in collector.collect(ran=set())}
    assert rows[100].rss_bytes == 40 * os.sysconf("SC_PAGE_SIZE")
    # Without the hint (no waits pane), every process is read each refresh.
    proc.tick()
    proc.process(100, "sleeper", b"sleeper\0", utime=10, rss=30)
    rows = {r.pid: r for r in collector.collect()}
    assert rows[100].rss_bytes == 30 * os.sysconf("SC_PAGE_SIZE")


def test_a_process_quiet_for_refreshes_then_busy_reads_its_busy_second(tmp_path, monkeypatch):
    """A quiet process's counters are known not to have moved as of each refresh that read
    them (or that the kernel saw it not run): its rate when it wakes is over the last
    interval. It was over the time since it last moved: idle three refreshes, then a second
    of CPU, read 33%."""
    proc = FakeProc(tmp_path, monkeypatch)
    proc.process(100, "cron", b"cron\0", utime=10)
    collector = ProcessCollector(str(tmp_path))
    collector.collect()
    for _ in range(3):
        proc.tick()
        collector.collect()
    proc.tick()
    proc.process(100, "cron", b"cron\0", utime=10 + TICKS)
    (row,) = collector.collect()
    assert row.cpu_percent == 100.0
