"""What the live source hands a recording, with fake collectors (no root): each interval
alone, beside the window the screen shows, and `ktop --record`'s loop: its records, its
stop, and a full disk."""

from __future__ import annotations

import errno
import os
import threading

import pytest
from test_engine import FakeCollector, wait_until

from ktop.engine import LiveSource, Options, PaneSpec
from ktop.model import PANE_FUNCTIONS, CpuProfile
from ktop.record.fileformat import Recording
from ktop.record.session import record


class IntervalAggregator:
    """Counts one sample per drain; the window holds every drain, `latest` the newest."""

    def __init__(self) -> None:
        self.drains = 0

    def add(self, drain) -> None:
        self.drains += 1

    def profile(self, cumulative: bool = False, latest: bool = False) -> CpuProfile:
        samples = 1 if latest else self.drains
        return CpuProfile(sample_hz=99, cpus=2, window_s=0.2 * samples, cumulative=cumulative,
                          total_samples=samples, idle_samples=0, kernel_samples=samples,
                          user_samples=0, lost={}, functions=(), stacks=())

    def fold_exited(self, is_alive) -> None:
        pass


def source_with_cpu() -> LiveSource:
    spec = PaneSpec(PANE_FUNCTIONS, lambda source: (FakeCollector(), IntervalAggregator()))
    source = LiveSource(Options(interval_s=0.2, panes=frozenset({PANE_FUNCTIONS})), [spec])
    source.start()
    return source


def test_the_window_for_the_screen_and_the_interval_for_the_recording():
    source = source_with_cpu()
    try:
        for _ in range(3):
            shown = source.collect()
        interval = source.interval_snapshot(shown)
        assert shown.cpu.total_samples == 3 and interval.cpu.total_samples == 1
        assert interval.duration_s == pytest.approx(0.2) and shown.duration_s == pytest.approx(0.6)
        assert interval.processes is shown.processes  # the same sample, not taken twice
        assert source.collect(latest=True).cpu.total_samples == 1
    finally:
        source.close()


def test_without_cpu_samples_a_record_spans_the_time_since_the_last(monkeypatch):
    source = LiveSource(Options(panes=frozenset()), [])
    source.start()
    try:
        source.collect()
        clock = [1000.0]
        monkeypatch.setattr("ktop.engine.time.monotonic", lambda: clock[0])
        source._last_collect = 999.25
        assert source.collect(latest=True).duration_s == pytest.approx(0.75)
    finally:
        source.close()


def test_record_appends_one_record_per_interval_until_the_duration(tmp_path):
    said: list[str] = []
    path = str(tmp_path / "r.krec")
    assert record(path, Options(interval_s=0.2), duration_s=1.0, say=said.append,
                  source=source_with_cpu()) == 0
    recording = Recording(path)
    assert len(recording) == 5
    assert all(recording.snapshot(i).cpu.total_samples == 1 for i in range(5))  # intervals alone
    assert [r.duration_s for r in recording.records] == [pytest.approx(0.2, abs=1e-6)] * 5
    assert len(said) == 1 and said[0].startswith(f"recorded 5 intervals to {path} (")
    assert "B per interval)" in said[0]
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_record_stops_when_told_and_continues_the_file_later(tmp_path):
    path = str(tmp_path / "r.krec")
    stop = threading.Event()
    said: list[str] = []
    thread = threading.Thread(target=record, args=(path, Options(interval_s=0.2)),
                              kwargs={"stop": stop, "say": said.append,
                                      "source": source_with_cpu()})
    thread.start()
    wait_until(lambda: os.path.exists(path) and os.path.getsize(path) > 200)
    stop.set()  # SIGTERM
    thread.join(10)
    assert not thread.is_alive()
    first = len(Recording(path))
    assert first >= 1
    record(path, Options(interval_s=0.2), duration_s=0.4, say=said.append,
           source=source_with_cpu())
    assert f"continuing {path} after its {first} records" in said
    assert [r.seq for r in Recording(path).records] == list(range(first + 2))


def test_record_on_a_full_disk_says_so_in_one_line_and_exits_1(tmp_path, monkeypatch):
    path = str(tmp_path / "r.krec")
    said: list[str] = []
    real_write = os.write
    writes = [0]

    def write(fd, data):
        writes[0] += 1
        if writes[0] > 3:  # the header and two records, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    code = record(path, Options(interval_s=0.2), duration_s=5.0, say=said.append,
                  source=source_with_cpu())
    monkeypatch.undo()
    assert code == 1 and len(said) == 1
    assert said[0] == (f"recording to {path} stopped: No space left on device "
                       "(the file keeps its 2 whole records)")
    assert len(Recording(path)) == 2
