"""The screen's collect loop when things go wrong (no root: a fake live source): a refresh
held up for seconds (SIGSTOP, a starved machine) is neither caught up in a burst nor
passed over in silence; R stopping a recording writes the interval in progress."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest
from conftest import run_app

from ktop.record.fileformat import Recording, RecordingError
from ktop.ui.app import build_app

INTERVAL = 0.2


class FakeLiveSource:
    """A live source handing out the recorded snapshot, each with the span since the last;
    `hold` makes the next collect wait that long first (a process stopped, then continued)."""

    live = True
    timeline = None

    def __init__(self, snapshot) -> None:
        self.snapshot = snapshot
        self.cumulative = False
        self.on_attached = None
        self.started_at = 0.0
        self.collected_at: list[float] = []
        self.hold = 0.0
        self._last = 0.0

    def start(self, wait: bool = True, patient: bool = False) -> None:
        if not self.started_at:
            self.started_at = self._last = time.monotonic()

    def hurry_loading(self) -> None:
        pass

    def collect(self):
        now = time.monotonic()
        span, self._last = now - self._last, now
        self.collected_at.append(now)
        if self.hold:  # stopped right after this collect: the next one comes late
            time.sleep(self.hold)
            self.hold = 0.0
        return replace(self.snapshot, duration_s=span, loading={})

    def interval_snapshot(self, shown):
        return shown  # its span is already the interval's

    def close(self) -> None:
        pass


def test_a_refresh_held_up_is_not_caught_up_in_a_burst_and_is_said(recorded_snapshot):
    """SIGSTOP for 30 s, then SIGCONT: the first refresh showed processes at 0.0% and ktop at
    100-135%, its CPU% over ~15 ms: the loop collected every refresh it had missed at once."""
    source = FakeLiveSource(recorded_snapshot)
    app = build_app(source, interval_s=INTERVAL)
    seen: dict = {}
    held_at: list[float] = []

    async def scenario(pilot):
        await pilot.pause(0.5)
        source.hold = 3.0  # the next collect runs 3 s late
        held_at.append(time.monotonic())
        while time.monotonic() < held_at[0] + 4.5:
            await pilot.pause(0.05)
        seen["notes"] = [str(n.message) for n in app._notifications]

    run_app(app, scenario, notifications=True)
    after = [t for t in source.collected_at if t > held_at[0] + 3.0]
    gaps = [b - a for a, b in zip(after, after[1:])]
    assert gaps and min(gaps) >= INTERVAL / 2 - 0.02, gaps  # one refresh each interval
    stalls = [n for n in seen["notes"] if "did not run for" in n]
    assert len(stalls) == 1, seen["notes"]
    assert stalls[0].startswith("ktop did not run for 3s (stopped, or starved of CPU); "
                                "this refresh covers 3s"), stalls


def test_r_stopping_a_recording_writes_the_interval_in_progress(recorded_snapshot, tmp_path):
    """With -d 10, R then R a second later left a recording of no record."""
    source = FakeLiveSource(recorded_snapshot)
    app = build_app(source, interval_s=10.0, save_dir=str(tmp_path))
    seen: dict = {}

    async def scenario(pilot):
        await pilot.pause(0.3)
        await pilot.press("R")
        await pilot.pause(0.8)
        await pilot.press("R")
        for _ in range(100):
            notes = [str(n.message) for n in app._notifications]
            if any(n.startswith("recording stopped") for n in notes):
                break
            await pilot.pause(0.05)
        seen["notes"] = notes

    run_app(app, scenario, notifications=True)
    (name,) = os.listdir(tmp_path)
    records = Recording(str(tmp_path / name)).records
    # The interval in progress: from the refresh before R to R, shorter than -d's 10 s.
    first, last = source.collected_at[-2:]
    assert len(records) == 1 and records[0].duration_s == pytest.approx(last - first, abs=0.01)
    assert records[0].duration_s < 10 and last - first < 10
    assert any(n.startswith("recording stopped: ") and "(1 records, " in n
               for n in seen["notes"]), seen["notes"]


def test_quitting_while_recording_writes_the_interval_in_progress(recorded_snapshot, tmp_path):
    source = FakeLiveSource(recorded_snapshot)
    app = build_app(source, interval_s=10.0, save_dir=str(tmp_path))

    async def scenario(pilot):
        await pilot.pause(0.3)
        await pilot.press("R")
        await pilot.pause(0.8)
        await pilot.press("q")

    run_app(app, scenario)
    (name,) = os.listdir(tmp_path)
    deadline = time.monotonic() + 5  # the collecting thread may end after the app
    while records_in(tmp_path / name) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert records_in(tmp_path / name) == 1


def records_in(path) -> int:
    try:
        return len(Recording(str(path)))
    except RecordingError:  # no whole record yet
        return 0


def test_l_says_which_span_its_losses_are_of(recorded_snapshot):
    """L said "lost in the last 5s" over counts since start; it says the span it lists."""
    source = FakeLiveSource(recorded_snapshot)
    app = build_app(source, interval_s=INTERVAL)
    titles = []

    async def scenario(pilot):
        for key in ("L", "escape", "c", "L"):
            await pilot.press(key)
            await pilot.pause(0.3)
            if key == "L":
                titles.append(str(app.screen.query_one("#losses-box").border_title))

    run_app(app, scenario)
    assert titles[0].startswith("lost in the last ") and titles[1].startswith("lost since start (")
