"""The disks view's figures: /proc/diskstats read as iostat -x reads it, summed over a
window as live and as a replay, kept by recordings and JSON (an older file without them
still reads)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ktop.aggregate.diskstats import IostatWindow, iostat, merge_profiles
from ktop.codec import from_data, to_data
from ktop.collectors.diskstats import DiskStatsReader, parse_diskstats
from ktop.exports.jsonfile import from_json, to_json
from ktop.model import CpuTimes, DiskIo, IostatProfile, Snapshot

# major minor name, then the 17 counters of Linux 5.5+ (reads, merges, sectors, ms; writes,
# merges, sectors, ms; in flight, busy ms, queue ms; discards x4; flushes, flush ms).
FIRST = b"""\
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 1000 10 80000 500 2000 100 160000 4000 0 3000 4500 0 0 0 0 50 20
 254       1 vda1 900 10 70000 400 1900 100 150000 3900 0 2900 4300 0 0 0 0 0 0
"""
SECOND = b"""\
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 1100 12 88000 560 2400 140 192000 4800 3 3800 6100 0 0 0 0 70 30
 254       1 vda1 1000 12 78000 460 2300 140 182000 4700 3 3700 5900 0 0 0 0 0 0
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sysfs(tmp_path):
    """A /sys whose block directory lists the whole disks."""
    for disk in ("loop0", "vda"):
        (tmp_path / "block" / disk).mkdir(parents=True)
    return tmp_path


def reader_over(tmp_path, sysfs, texts):
    path = tmp_path / "diskstats"
    path.write_bytes(texts[0])
    clock = Clock()
    reader = DiskStatsReader(str(path), str(sysfs), names=lambda dev: f"dev{dev >> 20}", clock=clock)
    return reader, path, clock


def test_a_read_gives_each_whole_used_disk_its_counters_growth(tmp_path, sysfs):
    reader, path, clock = reader_over(tmp_path, sysfs, [FIRST])
    assert reader.read() is None  # the first read only sets where counting starts
    path.write_bytes(SECOND)
    clock.now += 2.0
    profile = reader.read()
    assert profile.span_s == 2.0
    (vda,) = profile.disks  # the partition is counted in its disk; loop0 never did I/O
    assert (vda.major, vda.minor) == (254, 0)
    assert (vda.reads, vda.read_merges, vda.read_sectors, vda.read_ms) == (100, 2, 8000, 60)
    assert (vda.writes, vda.write_merges, vda.write_sectors, vda.write_ms) == (400, 40, 32000, 800)
    assert (vda.busy_ms, vda.queue_ms, vda.flushes, vda.flush_ms) == (800, 1600, 20, 10)
    assert vda.in_flight == 3  # a gauge: the value now, not a growth


def test_iostat_columns_are_sysstats_formulas():
    vda = DiskIo("vda", 254, 0, reads=100, read_merges=2, read_sectors=8000, read_ms=60,
                 writes=400, write_merges=40, write_sectors=32000, write_ms=800, busy_ms=800,
                 queue_ms=1600, flushes=20, flush_ms=10)
    s = iostat(vda, 2.0)
    assert (s.r_s, s.w_s, s.f_s) == (50.0, 200.0, 10.0)
    assert s.rmb_s == pytest.approx(8000 * 512 / 2**20 / 2)
    assert s.wmb_s == pytest.approx(32000 * 512 / 2**20 / 2)
    assert (s.r_await, s.w_await, s.f_await) == (0.6, 2.0, 0.5)
    assert s.aqu_sz == 0.8 and s.util == 40.0
    assert s.rareq_sz == 40.0 and s.wareq_sz == 40.0  # kB
    assert s.wrqm_pct == pytest.approx(100 * 40 / 440)
    # A disk busy over the whole span reads 100%, never more (rounding of the kernel's ms).
    assert iostat(DiskIo("vda", 254, 0, busy_ms=2010), 2.0).util == 100.0
    idle = iostat(DiskIo("vda", 254, 0), 2.0)
    assert (idle.r_await, idle.rareq_sz, idle.util) == (0.0, 0.0, 0.0)


def test_a_window_sums_its_intervals_as_a_replay_merges_records():
    one = IostatProfile(1.0, (DiskIo("vda", 254, 0, reads=10, read_ms=5, in_flight=1),))
    two = IostatProfile(1.0, (DiskIo("vda", 254, 0, reads=30, read_ms=45, in_flight=4),
                              DiskIo("sdb", 8, 16, writes=7)))
    three = IostatProfile(1.0, (DiskIo("vda", 254, 0, reads=1),))
    merged = merge_profiles([one, two])
    assert merged.span_s == 2.0
    vda = next(d for d in merged.disks if d.disk == "vda")
    assert (vda.reads, vda.read_ms, vda.in_flight) == (40, 50, 4)
    assert iostat(vda, merged.span_s).r_await == 50 / 40
    window = IostatWindow(window_s=2.0)
    for interval in (one, two, three):
        window.add(interval)
    assert window.profile() == merge_profiles([two, three])  # the newest 2 s
    assert window.profile(cumulative=True) == merge_profiles([one, two, three])
    assert window.profile(latest=True) == three


def test_recordings_and_json_keep_the_disks_and_iowait_and_older_files_still_read(
        recorded_json):
    profile = IostatProfile(1.5, (DiskIo("vda", 254, 0, writes=12, flushes=3),))
    old = from_json(recorded_json)
    assert old.iostat is None and old.cpu.times.iowait == 0.0  # written before either
    new = replace(old, iostat=profile, cpu=replace(old.cpu, times=CpuTimes(idle=70, iowait=20)))
    assert from_json(json.loads(json.dumps(to_json(new)))).iostat == profile
    # A record is written with the fields at their default left out, and read back whole.
    record = json.loads(json.dumps(to_data(new, skip_defaults=True)))
    again = from_data(Snapshot, record)
    assert again.iostat == profile and again.cpu.times.iowait == 20


def test_diskstats_of_older_kernels_parse_with_the_missing_counters_zero():
    # Linux 4.18 to 5.4: no flush counters; before 4.18: no discards either.
    disks = parse_diskstats(b" 8 0 sda 1 2 3 4 5 6 7 8 0 9 10 11 12 13 14\n"
                            b" 8 16 sdb 1 2 3 4 5 6 7 8 0 9 10\n garbage line\n")
    assert disks[8, 0][1][-2:] == (0, 0) and disks[8, 0][1][11] == 11
    assert disks[8, 16][1][11:] == (0,) * 6


def test_the_disks_view_shows_without_root_where_the_pane_is_unavailable(recorded_snapshot):
    """A run without root has no block I/O program, but /proc/diskstats needs none."""
    from conftest import run_app  # noqa: PLC0415

    from ktop.engine import RecordedSource  # noqa: PLC0415
    from ktop.ui.app import build_app  # noqa: PLC0415

    snapshot = replace(
        recorded_snapshot, blockio=None, unavailable={"blockio": "needs root"},
        iostat=IostatProfile(2.0, (DiskIo("vda", 254, 0, reads=10, writes=40, write_sectors=8192,
                                          write_ms=20, busy_ms=500, flushes=4),)))
    seen = {}

    async def scenario(pilot):
        await pilot.press("3")
        pane = pilot.app.main_screen.pane("blockio")
        seen["processes"] = pane.table.message
        while pane.view != "disks":
            await pilot.press("v")
        await pilot.pause()
        table = pane.table
        seen["row"] = {c.label: cell.text for c, cell in zip(table.table_columns,
                                                            table.get_row_at(0))}
        seen["subtitle"] = pane._subtitle

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2), scenario, size=(200, 50))
    assert "unavailable: needs root" in seen["processes"]
    row = seen["row"]
    assert (row["Device"], row["r/s"], row["w/s"], row["wMB/s"], row["w_await"]) == (
        "vda", "5.00", "20.00", "2.00", "0.50")
    assert (row["f/s"], row["%util"]) == ("2.00", "25.00")
    assert "disks (v)  /proc/diskstats, cumulative 2s" in seen["subtitle"]  # as the file is
