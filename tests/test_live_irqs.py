"""Live truth of the interrupts pane: a loopback UDP flood (127.0.0.1 only, bounded in count
and time) read by ktop's counters against the kernel's own /proc/softirqs and /proc/stat."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ktop.panes.irqs.aggregate import IrqAggregator

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF")

FLOOD = """
import socket, sys, time
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
r.setblocking(False)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
addr, end, n, buf = r.getsockname(), time.monotonic() + float(sys.argv[1]), 0, b"x" * 64
while time.monotonic() < end and n < 3_000_000:
    for _ in range(100):
        s.sendto(buf, addr)
        try:
            r.recv(2048)
        except BlockingIOError:
            pass
    n += 100
print(n)
"""


def softirqs() -> dict[str, int]:
    with open("/proc/softirqs") as f:
        lines = f.read().splitlines()[1:]
    return {line.split(":")[0].strip(): sum(map(int, line.split(":")[1].split()))
            for line in lines}


def softirq_ticks() -> int:
    with open("/proc/stat") as f:
        return int(f.readline().split()[7])


def flood(seconds: float) -> int:
    done = subprocess.run([sys.executable, "-c", FLOOD, str(seconds)], capture_output=True,
                          text=True, timeout=seconds + 20, check=True)
    return int(done.stdout)


@pytest.fixture(scope="module")
def flooded():
    from ktop.panes.irqs.collector import IrqCollector

    collector = IrqCollector()
    collector.start()
    try:
        aggregator = IrqAggregator(window_s=60.0)
        collector.drain()  # what ran before
        before, ticks_before, t0 = softirqs(), softirq_ticks(), time.monotonic()
        sent = flood(3.0)
        after, ticks_after, t1 = softirqs(), softirq_ticks(), time.monotonic()
        aggregator.add(collector.drain())
    finally:
        collector.close()
    proc = {name: after[name] - before.get(name, 0) for name in after}
    ticks_s = (ticks_after - ticks_before) / os.sysconf("SC_CLK_TCK")
    return aggregator.profile(), proc, ticks_s, t1 - t0, sent


def test_net_rx_count_is_proc_softirqs(flooded):
    profile, proc, _, _, sent = flooded
    (row,) = [r for r in profile.rows if r.kind == "softirq" and r.name == "NET_RX"]
    assert proc["NET_RX"] > 10_000, "the flood raised too few NET_RX softirqs to compare"
    assert row.count == pytest.approx(proc["NET_RX"], rel=0.10)
    assert sum(row.per_cpu_count) == row.count
    assert row.raised > 0 and row.delay_hist and row.delay_max_ns >= row.delay_ns / row.raised


def test_every_vector_count_is_proc_softirqs(flooded):
    profile, proc, _, _, _ = flooded
    seen = {r.name: r.count for r in profile.rows if r.kind == "softirq"}
    for name, count in proc.items():
        if count >= 500:  # few runs: the reads bracket the drains by some ms
            assert seen.get(name, 0) == pytest.approx(count, rel=0.10), name


def irq_time_accounting() -> bool:
    """CONFIG_IRQ_TIME_ACCOUNTING: /proc/stat's irq and softirq are then exact, else sampled
    at each tick (a tick landing in softirq charges the whole tick to it)."""
    import gzip

    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return "CONFIG_IRQ_TIME_ACCOUNTING=y" in f.read()
    except OSError:
        return False


def test_softirq_time_is_proc_stats_softirq(flooded):
    """/proc/stat's softirq is machine-wide: compared with the sum of every vector's time.
    Exact (IRQ time accounting) within 10%. Tick-sampled (this VM: HZ=250, no IRQ time
    accounting), the ticks charge softirq for all of handle_softirqs (its loop, the
    tracepoints themselves) where ktop times each vector's handler: 0.80-0.83 of it in three
    runs here, so 0.70-1.05 is asserted there."""
    profile, _, ticks_s, _, _ = flooded
    ours_s = sum(r.total_ns for r in profile.rows if r.kind == "softirq") / 1e9
    assert ticks_s > 0.1, "the flood ran too little softirq time to compare"
    if irq_time_accounting():
        assert ours_s == pytest.approx(ticks_s, rel=0.10)
    else:
        assert 0.70 * ticks_s <= ours_s <= 1.05 * ticks_s
    assert profile.lost.get("counts_map_full", 0) == 0
