"""The header's kernel/user/idle split from /proc/stat, as top computes it."""

from __future__ import annotations

import pytest

from ktop.collectors.procstat import CpuTicks, parse_cpu_line, read_cpu_ticks

# Two reads of a 2-CPU machine, one second apart (fields: user nice system idle iowait irq
# softirq steal guest guest_nice); per-CPU lines and the rest as the kernel prints them.
BEFORE = """\
cpu  10000 500 4000 80000 300 50 150 20 900 0
cpu0 5000 250 2000 40000 150 25 75 10 450 0
cpu1 5000 250 2000 40000 150 25 75 10 450 0
intr 123456 0 9 0
ctxt 987654
btime 1767225600
processes 4321
procs_running 3
procs_blocked 0
softirq 5555 0 1 2 3 4 5 6 7 8 9
"""
AFTER = "cpu  10060 520 4140 80100 310 55 155 25 950 0\ncpu0 5030 260 2070 40050 155 27 77 12 475 0\n"


def test_categories_are_folded_as_top_does():
    ticks = parse_cpu_line(BEFORE)
    assert ticks.user == 10000 + 500  # user + nice (guest is already inside user)
    assert ticks.kernel == 4000 + 50 + 150  # system + irq + softirq
    assert ticks.idle == 80000  # iowait apart, as vmstat's wa
    assert ticks.iowait == 300
    assert ticks.steal == 20


def test_shares_of_an_interval_sum_to_100():
    before = parse_cpu_line(BEFORE)
    after = parse_cpu_line(AFTER)
    times = (after - before).shares()
    delta_user, delta_kernel, delta_idle, delta_steal, delta_iowait = 60 + 20, 140 + 5 + 5, 100, 5, 10
    total = delta_user + delta_kernel + delta_idle + delta_steal + delta_iowait
    assert times.user == pytest.approx(100 * delta_user / total)
    assert times.kernel == pytest.approx(100 * delta_kernel / total)
    assert times.idle == pytest.approx(100 * delta_idle / total)
    assert times.steal == pytest.approx(100 * delta_steal / total)
    assert times.iowait == pytest.approx(100 * delta_iowait / total)
    assert times.user + times.kernel + times.idle + times.steal + times.iowait == pytest.approx(100)


def test_guest_time_is_not_counted_twice():
    no_guest = parse_cpu_line("cpu  100 0 50 850 0 0 0 0 0 0\n")
    guest = parse_cpu_line("cpu  100 0 50 850 0 0 0 0 90 0\n")
    assert guest == no_guest


def test_old_kernels_with_fewer_fields_parse():
    ticks = parse_cpu_line("cpu  100 5 50 845\n")
    assert (ticks.user, ticks.kernel, ticks.idle, ticks.steal) == (105, 50, 845, 0)


def test_per_cpu_lines_are_not_mistaken_for_the_total():
    ticks = parse_cpu_line("cpu0 1 1 1 1 1 1 1 1\ncpu  7 0 3 90 0 0 0 0\n")
    assert (ticks.user, ticks.kernel, ticks.idle) == (7, 3, 90)


def test_missing_total_line_is_an_error():
    with pytest.raises(ValueError):
        parse_cpu_line("cpu0 1 2 3 4\nintr 5\n")


def test_an_interval_without_ticks_has_no_shares():
    times = (CpuTicks(5, 5, 5, 5) - CpuTicks(5, 5, 5, 5)).shares()
    assert (times.user, times.kernel, times.idle, times.steal) == (0.0, 0.0, 0.0, 0.0)


def test_real_proc_stat_advances():
    first = read_cpu_ticks()
    total = first.user + first.kernel + first.idle + first.steal
    assert total > 0
    sum(range(300_000))  # burn a little CPU so at least one tick passes somewhere
    later = read_cpu_ticks()
    delta = later - first
    assert min(delta.user, delta.kernel, delta.idle, delta.steal) >= 0
