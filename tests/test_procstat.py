"""The header's kernel/user/idle split from /proc/stat, as top computes it."""

from __future__ import annotations

from dataclasses import replace

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


def test_irq_and_softirq_are_split_from_kernel_at_proc_stats_shares():
    """The header's irq and softirq equal /proc/stat's shares (top's hi and si); kernel keeps
    them inside (its JSON and CSV meaning), its `system` is top's sy."""
    times = (parse_cpu_line(AFTER) - parse_cpu_line(BEFORE)).shares()
    total = (60 + 20) + (140 + 5 + 5) + 100 + 5 + 10  # user, kernel, idle, steal, iowait
    assert times.irq == pytest.approx(100 * 5 / total)
    assert times.softirq == pytest.approx(100 * 5 / total)
    assert times.system == pytest.approx(100 * 140 / total)
    assert times.system + times.irq + times.softirq == pytest.approx(times.kernel)
    assert times.user + times.kernel + times.idle + times.steal + times.iowait == pytest.approx(100)


def test_merged_windows_keep_the_interrupt_split():
    from ktop.collectors.procstat import merge_times

    first = parse_cpu_line("cpu  100 0 50 800 0 10 40 0 0 0\n").shares()
    second = parse_cpu_line("cpu  100 0 200 600 0 0 100 0 0 0\n").shares()
    for merged in (merge_times([first, second], [1.0, 1.0]),  # by their ticks
                   merge_times([replace(first, ticks=0), replace(second, ticks=0)], [1.0, 1.0])):
        assert merged.softirq == pytest.approx(100 * 140 / 2000, abs=0.01)
        assert merged.irq == pytest.approx(100 * 10 / 2000, abs=0.01)
        assert merged.kernel == pytest.approx(100 * 400 / 2000, abs=0.01)


def test_the_header_shows_irq_and_softirq_apart_from_kernel(recorded_snapshot):
    from ktop.model import CpuTimes
    from ktop.ui.widgets.header import header_text

    snapshot = replace(recorded_snapshot, cpu=None, cpu_times=CpuTimes(
        user=10.0, kernel=30.0, idle=60.0, irq=1.5, softirq=12.0))
    line = header_text(snapshot, width=200).plain.splitlines()[1]
    assert "kernel  16.5%" in line  # system alone: 30 - 1.5 - 12
    assert "irq  1.5%" in line
    assert "softirq 12.0%" in line


def test_live_proc_stat_interrupt_shares_are_its_fields():
    """Read live: the shares equal the irq and softirq fields' deltas over the same reads."""
    def raw() -> list[int]:
        with open("/proc/stat") as f:
            text = f.read()
        return [int(v) for v in text.splitlines()[0].split()[1:8]]

    a, first = raw(), read_cpu_ticks()
    sum(range(2_000_000))
    b, later = raw(), read_cpu_ticks()
    times = (later - first).shares()
    if times.ticks == 0:
        pytest.skip("no tick passed")
    # the same reads' fields (the raw read brackets each ticks read: within a tick or two)
    fields = [y - x for x, y in zip(a, b)]
    total = sum(fields[:5]) + sum(fields[5:8])
    assert times.ticks == pytest.approx(total, abs=4 * 2)
    assert times.softirq == pytest.approx(100 * fields[6] / total, abs=100 * 4 / total)
    assert times.irq == pytest.approx(100 * fields[5] / total, abs=100 * 4 / total)
