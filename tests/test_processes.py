"""The processes pane's numbers, read from /proc/PID/stat as top reads them."""

from __future__ import annotations

import os
import time

from ktop.collectors.processes import (
    ProcessCollector,
    _full_name,
    parse_stat,
    read_cmdline,
    real_uid,
)

# A command name may hold spaces and parentheses: the last ") " ends it.
STAT = (b"4242 (evil) (name) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
        b"250 50 0 0 20 0 3 0 123456 10000000 777 18446744073709551615 0 0 0\n")


def test_stat_fields_are_the_ones_top_shows():
    comm, state, total, system, threads, start, rss = parse_stat(STAT)
    assert comm == "evil) (name"
    assert state == "S"
    assert (total, system) == (300, 50)  # utime + stime, stime, in clock ticks
    assert threads == 3 and start == 123456 and rss == 777


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
    assert "pytest" in read_cmdline(f"/proc/{os.getpid()}/cmdline")  # this very test run


def test_this_process_is_measured_while_it_burns_cpu():
    collector = ProcessCollector()
    collector.start()
    until = time.monotonic() + 0.3
    while time.monotonic() < until:
        pass
    rows = {row.pid: row for row in collector.collect()}
    me = rows[os.getpid()]
    assert me.cpu_percent > 30
    assert me.rss_bytes > 1 << 20 and me.threads >= 1
    assert me.user == __import__("pwd").getpwuid(os.getuid()).pw_name


def open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def test_an_exited_process_leaves_its_row_and_its_open_stat_file():
    """/proc/PID/stat stays open between refreshes; a process that exits takes both its row
    and that descriptor with it, and an unchanged process keeps its row."""
    import subprocess  # noqa: PLC0415

    before = open_fds()
    child = subprocess.Popen(["sleep", "30"])
    collector = ProcessCollector()
    try:
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
