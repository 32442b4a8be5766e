"""What ktop shows of its own cost."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from conftest import root_only

from ktop.collectors.bpfsys import program_info
from ktop.collectors.selfcost import (
    SelfCost,
    bpf_programs,
    bpf_run_time_ns,
    stats_enabled_by_sysctl,
)
from ktop.engine import LiveSource, Options
from ktop.model import PANE_FUNCTIONS
from ktop.ui.widgets.header import header_text


def test_a_descriptor_that_is_no_bpf_program_has_no_run_time():
    """A program's descriptor closed and reused for a file: the sum says so (None), and
    SelfCost lists the programs again instead of adding a wrong figure."""
    read_end, write_end = os.pipe()
    try:
        assert program_info(read_end) is None
        assert bpf_run_time_ns({read_end: 7}) is None
    finally:
        os.close(read_end)
        os.close(write_end)


def test_own_cpu_counts_every_thread_in_nanoseconds():
    cost = SelfCost()
    cost.start()
    spin_until = time.process_time() + 0.05
    while time.process_time() < spin_until:
        pass
    measured = cost.measure()
    cost.close()
    assert measured is not None and measured.cpu_percent > 10  # it was spinning


class _FakeKernel:
    """The kernel's BPF statistics as SelfCost sees them (a descriptor keeps them on; run
    time grows only while on), and a clock the test moves."""

    def __init__(self, monkeypatch, sysctl: bool = False) -> None:
        import ktop.collectors.selfcost as selfcost  # noqa: PLC0415

        self.now = 100.0
        monkeypatch.setattr(selfcost.time, "monotonic", lambda: self.now)
        self.on_spans: list[bool] = []
        self.fd: int | None = None
        self.run_ns = 0
        self.opened = 0
        self.sysctl = sysctl
        monkeypatch.setattr(selfcost, "enable_stats", self._enable)
        monkeypatch.setattr(selfcost, "stats_enabled_by_sysctl", lambda: sysctl)
        monkeypatch.setattr(selfcost, "bpf_programs", lambda: {3: 7})
        monkeypatch.setattr(selfcost, "bpf_run_times", lambda programs: {"waits": self.run_ns})

    def _enable(self) -> int:
        self.opened += 1
        self.fd = os.open(os.devnull, os.O_RDONLY)
        return self.fd

    def on(self, cost: SelfCost) -> bool:
        return self.sysctl or cost.stats_on

    def started(self) -> SelfCost:
        cost = SelfCost(stats_every=5)
        cost.start()
        return cost

    def span(self, cost: SelfCost, ns: int, seconds: float = 1.0):
        """One span of `seconds` in which the programs run `ns` (counted only while the
        statistics are on), then a measure."""
        self.now += seconds
        self.on_spans.append(self.on(cost))
        if self.on(cost):
            self.run_ns += ns
        return cost.measure()


def test_bpf_run_time_is_measured_one_refresh_in_five(monkeypatch):
    """The kernel's run-time statistics cost every program run: ktop holds them for one
    refresh in STATS_EVERY and shows that refresh's BPF figure until the next."""
    kernel = _FakeKernel(monkeypatch)
    cost = kernel.started()
    rows = [kernel.span(cost, 10_000_000 if i == 0 else 1_000_000 * i) for i in range(11)]
    cost.close()
    # On for the first span (from start), then for one span in five.
    assert kernel.on_spans == [True, False, False, False, False, True,
                               False, False, False, False, True]
    # 10 ms over 1 s: 1%, shown until the next sample (span 5: 5 ms, 0.5%).
    assert [row.bpf_percent for row in rows] == [1.0] * 5 + [0.5] * 5 + [1.0]
    assert all(row.bpf_every == 5 for row in rows)
    assert rows[0].bpf_panes == {"waits": 1.0}
    assert not cost.stats_on and kernel.opened == 3


def test_a_sample_right_after_start_goes_on_to_the_next_refresh(monkeypatch):
    """A measure right after start (a snapshot's first collect) does not end the sample:
    its few milliseconds would be the figure for the next five refreshes."""
    kernel = _FakeKernel(monkeypatch)
    cost = kernel.started()
    first = kernel.span(cost, 0, seconds=0.01)
    second = kernel.span(cost, 3_000_000, seconds=1.49)
    cost.close()
    assert first.bpf_percent is None
    assert second.bpf_percent == pytest.approx(0.2)  # 3 ms over 1.5 s


def test_statistics_the_sysctl_holds_on_are_read_every_refresh(monkeypatch):
    """kernel.bpf_stats_enabled=1: on for everyone anyway, nothing to save by sampling."""
    kernel = _FakeKernel(monkeypatch, sysctl=True)
    cost = kernel.started()
    rows = [kernel.span(cost, 1_000_000 * (i + 1)) for i in range(6)]
    cost.close()
    assert [row.bpf_percent for row in rows] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert all(row.bpf_every == 1 for row in rows) and kernel.opened == 0


@pytest.mark.live
@root_only
def test_the_header_shows_ktops_cpu_and_its_bpf_programs_time():
    """The BPF programs' time is charged to the tasks they interrupt; the header adds it
    back so the observer's cost is in plain sight."""
    source = LiveSource(Options(hz=999, panes=frozenset({PANE_FUNCTIONS})))
    dd = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M"],
                          stderr=subprocess.DEVNULL)
    try:
        source.start()
        source.collect()
        time.sleep(1.5)
        snapshot = source.collect()
        held = bpf_programs()
        (sampler, _aggregator), = source._running.values()
        loaded = sampler._program.program
        program_ids = {fd: held.get(fd) for fd in loaded.programs.values()}
        map_fds = {m.fd for m in loaded.maps.values()}
        # The same system call answers for a map's descriptor, with a shorter struct.
        map_read_as_program = program_info(loaded.maps["generation"].fd)
        # Until the next sampled refresh the kernel's statistics are off: the programs run
        # (dd keeps the sampler busy) and no run time is counted.
        stats_between = source._self_cost.stats_on
        counted = bpf_run_time_ns(held)
        time.sleep(0.3)
        counted_later = bpf_run_time_ns(held)
    finally:
        dd.kill()
        dd.wait()
        source.close()
    # Every program the sampler loaded is counted, and none of its maps.
    assert program_ids and None not in program_ids.values()
    assert not held.keys() & map_fds
    assert map_read_as_program is None
    cost = snapshot.cost
    assert cost is not None and cost.bpf_percent is not None
    assert 0 < cost.bpf_percent < 50  # ~2000 samples/s of a few microseconds each
    assert 0 < cost.cpu_percent < 100
    header = header_text(snapshot).plain
    assert f"ktop CPU {cost.cpu_percent:.1f}%  BPF {cost.bpf_percent:.1f}%" in header
    if not stats_enabled_by_sysctl():  # else on for everyone, whatever ktop holds
        assert not stats_between and counted == counted_later


# ---- the cost budget (--max-cost) ----------------------------------------------------------


def test_the_budget_degrades_in_order_past_max_cost_and_recovers_when_the_load_falls():
    from ktop.collectors.selfcost import BUDGET_STEPS, OVER_REFRESHES, UNDER_REFRESHES, CostBudget

    budget = CostBudget(5.0)
    assert budget.steps == () and budget.walk_every is None
    changed = [budget.observe(12.0, 100_000) for _ in range(OVER_REFRESHES * len(BUDGET_STEPS))]
    assert changed.count(True) == len(BUDGET_STEPS)
    assert budget.steps == tuple(name for name, _ in BUDGET_STEPS)
    assert budget.walk_every == BUDGET_STEPS[-1][1]
    assert not budget.observe(30.0, 100_000)  # no step left: it stays where it is
    # Still over the budget, the load as it was: nothing undone.
    assert not any(budget.observe(6.0, 90_000) for _ in range(5))
    # The load halved (the cost under the budget, not under half of it): undone one step
    # every few refreshes, last first.
    for left in range(len(BUDGET_STEPS) - 1, -1, -1):
        for _ in range(UNDER_REFRESHES - 1):
            assert not budget.observe(4.0, 20_000)
        assert budget.observe(4.0, 20_000)
        assert len(budget.steps) == left
    assert budget.walk_every is None


def test_no_budget_never_degrades():
    from ktop.collectors.selfcost import CostBudget

    budget = CostBudget(0)
    assert not any(budget.observe(90.0, 1e6) for _ in range(10)) and budget.steps == ()


def test_the_header_and_l_say_the_budget_step_in_force(recorded_snapshot):
    from dataclasses import replace

    from ktop.model import SelfCostRow
    from ktop.ui.widgets.header import header_text, loss_lines

    snapshot = replace(recorded_snapshot, cost=SelfCostRow(
        cpu_percent=8.0, bpf_percent=6.0, max_cost=5.0,
        budget_steps=("wait stacks: short waits 1 in 512",)))
    header = header_text(snapshot, width=200).plain
    assert "over budget 5%: wait stacks: short waits 1 in 512 (L)" in header
    pane, name, count, why, _ = loss_lines(snapshot)[0]
    assert (pane, name, count) == ("ktop", "over --max-cost", 1)
    assert "14.0% of one CPU" in why and "short waits 1 in 512" in why


@pytest.mark.live
@root_only
def test_past_a_small_max_cost_ktop_degrades_says_so_and_recovers_when_the_load_stops():
    """Issue 39: a pipe ping-pong drives the waits pane past --max-cost 8 (its BPF alone ~14%, idle ~5% collecting
    every 0.5 s): it walks fewer
    waits' stacks (the collector's walk periods change), the header and L say which step is
    in force; the load stopped, the steps are undone and the header says nothing of them."""
    from ktop.collectors.selfcost import BUDGET_STEPS
    from ktop.collectors.waits import DEFAULT_WALK_EVERY
    from ktop.ui.widgets.header import loss_lines

    source = LiveSource(Options(interval_s=0.5, max_cost=8.0, panes=frozenset({"waits"})))
    load = subprocess.Popen(["perf", "bench", "sched", "pipe", "-l", "100000000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    degraded = recovered = None
    try:
        source.start()
        (collector, _), = source._running.values()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and degraded is None:
            time.sleep(0.5)
            snapshot = source.collect()
            if snapshot.cost and snapshot.cost.budget_steps:
                degraded = snapshot, collector.walk_every
        load.kill()
        load.wait()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and recovered is None:
            time.sleep(0.5)
            snapshot = source.collect()
            if snapshot.cost and not snapshot.cost.budget_steps:
                recovered = snapshot, collector.walk_every
    finally:
        load.kill()
        load.wait()
        source.close()
    assert degraded is not None, "never past --max-cost 8 under a pipe ping-pong"
    snapshot, walks = degraded
    assert walks == BUDGET_STEPS[0][1] != DEFAULT_WALK_EVERY
    assert f"over budget 8%: {BUDGET_STEPS[0][0]}" in header_text(snapshot, width=300).plain
    assert loss_lines(snapshot)[0][:2] == ("ktop", "over --max-cost")
    assert recovered is not None, "still degraded 40 s after the load stopped"
    snapshot, walks = recovered
    assert walks == DEFAULT_WALK_EVERY
    assert "over budget" not in header_text(snapshot, width=300).plain
