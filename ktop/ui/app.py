"""The Textual app: collects in a worker thread and hands each Snapshot to the panes' screen
(ktop.ui.screens.main), which lays them out and owns their keys; here only what works on every
screen: quit, pause, cumulative, save, record. It knows nothing of bcc: `build_app` takes any
data source, live collectors or recorded data."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.worker import get_current_worker

from ktop.codec import RecordingError
from ktop.engine import DataSource
from ktop.model import Snapshot
from ktop.text import printable
from ktop.ui import restyle, strips
from ktop.ui.screens.main import MainScreen
from ktop.ui.widgets.pane import Display
from ktop.units import format_span
from ktop.writer import SnapshotError, write_atomically

if TYPE_CHECKING:
    from ktop.compare import Baseline
    from ktop.record.session import SessionRecorder

restyle.install()  # before any app restyles: tables keep their component styles' nodes
strips.install()  # lines divided into one piece hold no reference cycle

FIRST_REFRESH_S = 0.15  # the first screen: processes' CPU% over this much time
# A refresh this much later than due (beyond one interval) was held up: SIGSTOP, a
# suspended machine, starved of CPU. The screen says so, as its figures span the gap.
STALL_S = 2.0
FIRST_DATA_S = 0.2  # a pane's first refresh after its collector attaches: samples enough
LOADING_REFRESH_S = 0.25


class SnapshotReady(Message):
    """Posted by the collecting thread; a newer one replaces one not yet handled."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


class RecordingStopped(Message):
    """Posted by the collecting thread when the recording could not be written (disk full)."""

    def __init__(self, recorder: SessionRecorder) -> None:
        super().__init__()
        self.recorder = recorder


class RecordingFinished(Message):
    """Posted by the collecting thread once `R` stopped a recording: its last interval, the
    one in progress when R was pressed, is written."""

    def __init__(self, recorder: SessionRecorder) -> None:
        super().__init__()
        self.recorder = recorder


class BaselineProgress(Message):
    """Posted by the thread merging a --baseline recording: how far it is."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done, self.total = done, total

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, BaselineProgress)


class BaselineLoaded(Message):
    """Posted by that thread: the baseline, or the line it said (sampled, cut off)."""

    def __init__(self, baseline: Baseline | None, said: str = "") -> None:
        super().__init__()
        self.baseline, self.said = baseline, said


class _Quitting(Exception):
    """Raised in the baseline's thread when ktop leaves while it merges."""


# (say, progress) -> the Baseline: ktop.compare.load_baseline of a --baseline recording.
BaselineLoader = Callable[[Callable[[str], None], Callable[[int, int], None]], "Baseline"]


class Stalled(Message):
    """Posted by the collecting thread when a refresh came long after it was due."""

    def __init__(self, late_s: float, covers_s: float) -> None:
        super().__init__()
        self.late_s, self.covers_s = late_s, covers_s


def _drill_screens(stack) -> list:
    """The drill-down screens open. Their module is imported when the first one opens (its
    widgets cost 18 ms on the way to the first screen): none before."""
    drill = sys.modules.get("ktop.ui.screens.drill")
    return [s for s in stack[1:] if isinstance(s, drill.DrillScreen)] if drill else []


class KtopApp(App[None]):
    CSS_PATH = "ktop.tcss"
    TITLE = "ktop"
    ENABLE_COMMAND_PALETTE = False
    # The keys of every screen (the panes' screen lists them among its own, in its order).
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("space", "pause", "Pause", priority=True),
        Binding("c", "toggle_cumulative", "Cumulative"),
        Binding("s", "save", "Save SVG"),
        Binding("R", "record", "Record"),
    ]

    def get_driver_class(self):
        """Textual's own, but on Linux one whose input thread sleeps until a key comes
        (ktop/ui/driver.py); TEXTUAL_DRIVER still chooses."""
        driver = super().get_driver_class()
        from textual.drivers.linux_driver import LinuxDriver  # noqa: PLC0415

        if driver is LinuxDriver:
            from ktop.ui.driver import QuietLinuxDriver  # noqa: PLC0415

            return QuietLinuxDriver
        return driver

    def __init__(
        self,
        source: DataSource,
        interval_s: float = 1.0,
        show_idle: bool = False,
        pid: int | None = None,
        cgroup: str | None = None,
        save_dir: str = ".",
        source_note: str = "",
        baseline: Baseline | None = None,
        baseline_loader: BaselineLoader | None = None,
        panes: Sequence[str] | None = None,
        config_path: str | None = None,
        config_warning: str = "",
    ) -> None:
        """panes: those shown, in order (default: every pane); config_path: where key p
        keeps the choice (None: not kept, as in tests and headless pictures)."""
        super().__init__()
        self.config_path = config_path
        self.config_warning = config_warning  # the kept choice could not be read: said once
        # --baseline of a recording: merged once the screen is up, its progress in the header.
        self.baseline_loader = baseline_loader
        self.baseline_error = ""  # it could not be compared with: ktop leaves, saying why
        self.source = source
        self.interval_s = interval_s
        self.save_dir = save_dir
        self.snapshot: Snapshot | None = None
        self.paused = False
        self.source_note = source_note  # "replay of FILE": the data is not live
        self.latest: Snapshot | None = None  # newest data, even while paused or drilled in
        self._stop = threading.Event()
        self._wake = threading.Event()  # a pane attached, or quitting: the collector wakes
        self._collected_at: float | None = None  # the first snapshot, when collected at mount
        self.recorder: SessionRecorder | None = None  # `R`: the live session to a file
        # R stopped it: the collecting thread writes the interval in progress, then closes it.
        self._finishing: SessionRecorder | None = None
        self.timeline = source.timeline  # a replayed recording moves through time
        self.file_error = ""  # a replayed record that does not decode: ktop leaves, saying it
        self.main_screen = MainScreen(self, Display(show_idle=show_idle, pid=pid, cgroup=cgroup,
                                                       recorded=not source.live,
                                                       baseline=baseline),
                                      self.timeline, panes)

    def get_default_screen(self) -> MainScreen:
        return self.main_screen

    def compose(self) -> ComposeResult:
        # Into the default screen, as Textual mounts an app's: ready for on_mount below.
        yield from self.main_screen.widgets()

    def on_mount(self) -> None:
        self.main_screen.ready()
        if self.config_warning:
            self.notify(self.config_warning, severity="warning", timeout=10, markup=False)
        if self.timeline is not None:
            dropped = self.timeline.view().note
            if dropped:
                self.notify(f"the recording's end was cut off: {dropped}",
                            severity="warning", timeout=10, markup=False)
        # kill, a closed terminal or kill -INT: leave like `q` does, terminal restored.
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            loop.add_signal_handler(signum, self.quit)
        self._collect_first()
        self.collect_loop()
        if self.baseline_loader is not None:
            self.main_screen.baseline_loading = "loading the baseline..."
            self.load_baseline()

    def _collect_first(self) -> None:
        """A source the CLI started before Textual loaded has its first interval ready by the
        time the screen mounts: collected here (the collecting thread does not run yet), the
        first frame drawn shows the header and processes, not empty panes and then data a
        frame later (~0.1 s sooner)."""
        source = self.source
        if not (source.live and source.started_at):
            return
        if time.monotonic() < source.started_at + min(FIRST_REFRESH_S, self.interval_s):
            return  # too short an interval for a CPU% worth showing: the loop collects it
        source.on_attached = self._on_source_attached
        snapshot = source.collect()
        self._collected_at = time.monotonic()
        self.on_snapshot_ready(SnapshotReady(snapshot))

    # ---- data ---------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="collect")
    def collect_loop(self) -> None:
        """The only thread that touches collectors; it hands the UI immutable snapshots.

        The first refresh comes at once (header and processes), and another shortly after
        each BPF pane attaches, so no pane waits a whole interval for its first numbers."""
        worker = get_current_worker()
        self.source.on_attached = self._on_source_attached
        try:
            self.source.start(wait=False)  # the CLI may have started it already
            first = self.source.started_at + min(FIRST_REFRESH_S, self.interval_s)
            if self._collected_at is not None:  # the first snapshot was collected at mount
                loading = self.snapshot is not None and self.snapshot.loading
                first = self._collected_at + min(
                    LOADING_REFRESH_S if loading else self.interval_s, self.interval_s)
            next_at = max(time.monotonic(), first)
            last_at = time.monotonic()
            while not worker.is_cancelled and not self._stop.is_set():
                woke = self._wake.wait(max(0.0, next_at - time.monotonic()))
                finishing = self._finishing
                if woke:
                    self._wake.clear()
                    if finishing is None:
                        next_at = min(next_at, time.monotonic() + FIRST_DATA_S)
                        continue
                began = time.monotonic()
                try:
                    snapshot = self.source.collect()
                except RecordingError as e:  # a replayed file's record that is not ktop's
                    self.file_error = str(e)
                    self.call_from_thread(self.exit, None, 1)
                    return
                self._record(snapshot, finishing or self.recorder, finishing is not None)
                late = began - last_at - self.interval_s
                last_at = began
                if late > max(STALL_S, self.interval_s):
                    self.post_message(Stalled(late, snapshot.duration_s))
                if not woke:
                    # While panes load, their messages count the seconds: refresh more often.
                    next_at += (min(LOADING_REFRESH_S, self.interval_s) if snapshot.loading
                                else self.interval_s)
                    # Behind (stopped, starved): refreshes missed are not caught up. A burst
                    # of them milliseconds apart showed CPU% over 15 ms (every process at
                    # 0.0%, ktop at 135%): each refresh measures at least half an interval.
                    next_at = max(next_at, time.monotonic() + self.interval_s / 2)
                self.post_message(SnapshotReady(snapshot))
        finally:
            try:
                # Quitting while recording: the interval in progress goes in too.
                recorder = self._finishing or self.recorder
                if recorder is not None and self.source.started_at:
                    self._record(self.source.collect(), recorder, finish=True)
            finally:
                self.source.close()

    def _record(self, snapshot: Snapshot, recorder: SessionRecorder | None, finish: bool) -> None:
        """The collected interval alone into the recording (R: live data only); finish: its
        last, then it is closed and the screen says so."""
        if recorder is None:
            return
        if not recorder.append(
            self.source.interval_snapshot(snapshot)  # type: ignore[attr-defined]  # R: live only
        ) and recorder.error:
            self.post_message(RecordingStopped(recorder))
        elif finish:
            recorder.stop()
            self.post_message(RecordingFinished(recorder))
        if finish and self._finishing is recorder:
            self._finishing = None

    def _on_source_attached(self) -> None:
        self._wake.set()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self.latest = message.snapshot
        if self.paused:
            return
        first = self.snapshot is None
        self.snapshot = message.snapshot
        # Only the screen on top is drawn with the new data: one under an overlay (help, L)
        # or a drill-down would be repainted whole, overlay included, for nothing seen.
        # The others catch up when they are on top again (on_screen_resume).
        stack = self.screen_stack  # (empty while a headless picture is made or shut down)
        top = stack[-1] if stack else self.main_screen
        if top is self.main_screen:
            self.main_screen.refresh_panes()
        else:
            self.main_screen.behind = True
        for screen in _drill_screens(self.screen_stack):  # they follow the data as panes do
            screen.follow(message.snapshot, drawn=screen is top)
        if first:  # drawn at the next frame: the compile can have the CPU now
            self.call_after_refresh(self.source.hurry_loading)

    @work(thread=True, exclusive=True, group="baseline")
    def load_baseline(self) -> None:
        """The --baseline recording merged off the UI thread (a long one takes seconds)."""
        from ktop.compare import BaselineError  # noqa: PLC0415

        assert self.baseline_loader is not None
        said: list[str] = []

        def progress(done: int, total: int) -> None:
            if self._stop.is_set():
                raise _Quitting  # q or Ctrl-C: no need to finish
            self.post_message(BaselineProgress(done, total))

        try:
            baseline = self.baseline_loader(said.append, progress)
        except _Quitting:
            return
        except BaselineError as e:
            self.baseline_error = str(e)
            self.call_from_thread(self.exit, None, 2)
            return
        self.post_message(BaselineLoaded(baseline, "; ".join(said)))

    def on_baseline_progress(self, message: BaselineProgress) -> None:
        self.main_screen.baseline_loading = (
            f"loading the baseline: {message.done}/{message.total} records")
        self.main_screen.show_header()

    def on_baseline_loaded(self, message: BaselineLoaded) -> None:
        if message.said:
            self.notify(message.said, severity="warning", timeout=10, markup=False)
        self.main_screen.baseline_loading = ""
        if message.baseline is not None:
            self.main_screen.set_baseline(message.baseline)

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()

    # ---- actions --------------------------------------------------------------------------

    def quit(self) -> None:
        """Stop collecting and leave (q, or a signal)."""
        self._stop.set()
        self._wake.set()
        self.exit()

    async def action_quit(self) -> None:
        self.quit()

    @property
    def cumulative(self) -> bool:
        """The figures are since start (key c): drill-downs say so."""
        return self.source.cumulative

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.main_screen.show_header()
        for screen in _drill_screens(self.screen_stack):
            screen.show_paused()

    def action_toggle_cumulative(self) -> None:
        if self.timeline is not None:
            self.notify("a recording: w sets the window over its records", severity="warning")
            return
        if not self.source.live:
            self.notify("recorded data: its window was fixed when it was saved", severity="warning")
            return
        self.source.cumulative = not self.source.cumulative
        self.notify(
            "cumulative since start" if self.source.cumulative else "window of the last seconds"
        )

    # ---- recording (live) and replaying a recording ---------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pause" and getattr(self.screen, "SPACE_IS_ITS_OWN", False):
            return False  # the pane chooser ticks with Space
        return self.source.live if action == "record" else True  # R records live data

    def recording_badge(self) -> str:
        recorder = self.recorder
        if recorder is None:
            return ""
        return f"● REC {printable(os.path.basename(recorder.path))} {recorder.describe()}"

    def action_record(self) -> None:
        """Start or stop recording the live session, one record per interval, to a new file
        beside where `s` saves (replay it with `ktop --replay FILE`)."""
        recorder = self.recorder
        if recorder is not None:
            # The interval in progress is written by the collecting thread, woken now.
            self.recorder = None
            self._finishing = recorder
            self._wake.set()
        else:
            from ktop.record.fileformat import RecordingError  # noqa: PLC0415
            from ktop.record.session import new_session_recorder  # noqa: PLC0415 - on the first R only

            try:
                self.recorder = new_session_recorder(self.save_dir)
            except RecordingError as e:
                self.notify(str(e), severity="error", markup=False, timeout=8)
                return
            self.notify(f"recording to {printable(os.path.abspath(self.recorder.path))} (R stops)",
                        timeout=8, markup=False)
        self.main_screen.show_header()

    def on_recording_finished(self, message: RecordingFinished) -> None:
        recorder = message.recorder
        self.notify(f"recording stopped: {printable(os.path.abspath(recorder.path))} "
                    f"({recorder.describe()})", timeout=8, markup=False)

    def on_stalled(self, message: Stalled) -> None:
        self.notify(f"ktop did not run for {format_span(message.late_s)} (stopped, or starved "
                    f"of CPU); this refresh covers {format_span(message.covers_s)}",
                    severity="warning", timeout=10, markup=False)

    def on_recording_stopped(self, message: RecordingStopped) -> None:
        if self.recorder is message.recorder:
            self.recorder = None
        self.notify(message.recorder.error, severity="error", markup=False, timeout=15)
        self.main_screen.show_header()

    def move_timeline(self, how: str, amount: int) -> None:
        """A drill-down's [ ] Left Right Home End: the replay's window moves as the panes'
        keys move it; the drill-downs follow the new window."""
        main = self.main_screen
        {"step": main.action_timeline_step, "seconds": main.action_timeline_seconds,
         "edge": main.action_timeline_edge}[how](amount)

    @work(thread=True, exclusive=True, group="timeline")
    def collect_timeline(self) -> None:
        """The window where the timeline moved to: merging a long window of records takes a
        moment, off the UI thread."""
        if self.timeline is not None:
            try:
                self.post_message(SnapshotReady(self.timeline.collect()))
            except RecordingError as e:  # that record is not ktop's: the screen stays
                self.call_from_thread(self.notify, str(e), severity="error", markup=False,
                                      timeout=15)

    def keep_panes(self, names: Sequence[str]) -> None:
        """The panes chosen with p, kept for the next start (ktop.config); said in one line."""
        if self.config_path is None:
            return
        from ktop.config import ConfigError, write_config  # noqa: PLC0415

        try:
            write_config(self.config_path, names)
        except ConfigError as e:
            self.notify(str(e), severity="error", timeout=10, markup=False)
            return
        self.notify(f"panes {','.join(names)}: kept in {printable(self.config_path)}",
                    timeout=6, markup=False)

    def action_save(self) -> None:
        name = time.strftime("ktop-%Y%m%d-%H%M%S.svg")
        path = os.path.join(self.save_dir, name)
        try:
            write_atomically(path, self.export_screenshot(title="ktop"))
        except SnapshotError as e:  # one line, its names escaped; never markup
            self.notify(str(e), severity="error", timeout=8, markup=False)
            return
        self.notify(f"saved {printable(os.path.abspath(path))}", timeout=8, markup=False)


def build_app(source: DataSource, **kwargs) -> KtopApp:
    """The app factory: tests hand it recorded data, the CLI live collectors."""
    return KtopApp(source, **kwargs)

