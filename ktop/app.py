"""The Textual app: a header, four panes, a footer of keys. It renders Snapshots and knows
nothing of bcc: `build_app` takes any data source, live collectors or recorded data."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Footer, Input
from textual.worker import get_current_worker

from ktop.cgroups import cgroup_exists
from ktop.engine import DataSource
from ktop.model import PANE_FUNCTIONS, Snapshot
from ktop.panes import PANES
from ktop.text import printable
from ktop.widgets.compositor import ChangedRowsScreen
from ktop.widgets.header import Badge, HeaderBar, loss_lines
from ktop.widgets.pane import CgroupFilter, Display, Pane
from ktop.widgets.table import KeyedTable
from ktop.widgets.tabs import PaneTabs
from ktop.writer import SnapshotError, write_atomically

if TYPE_CHECKING:
    from ktop.recorder import SessionRecorder

# Number keys for up to this many panes (ktop.panes has them, in order).
MAX_PANES = 9
FIRST_REFRESH_S = 0.15  # the first screen: processes' CPU% over this much time
FIRST_DATA_S = 0.2  # a pane's first refresh after its collector attaches: samples enough
LOADING_REFRESH_S = 0.25
# Keys of the panes alone: a drill-down's footer and help do not offer them.
PANES_ONLY_ACTIONS = frozenset({"toggle_idle", "filter", "filter_cgroup", "zoom", "sort", "losses"})
# Below this size four panes cannot be read (at 80x24 a symbol had 7 columns, the lock caller
# none): one pane at a time, with tabs, as htop and btop do.
COMPACT_WIDTH = 100
COMPACT_HEIGHT = 22


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


def _drill_screens(stack) -> list:
    """The drill-down screens open. Their module is imported when the first one opens (its
    widgets cost 18 ms on the way to the first screen): none before."""
    stacks = sys.modules.get("ktop.screens.stacks")
    return [s for s in stack[1:] if isinstance(s, stacks.DrillScreen)] if stacks else []


class KtopApp(App[None]):
    CSS_PATH = "ktop.tcss"
    TITLE = "ktop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark,f1", "help", "Help"),
        Binding("tab", "focus_pane_step(1)", "Next pane", show=False, priority=True),
        Binding("shift+tab", "focus_pane_step(-1)", "Previous pane", show=False, priority=True),
        # 1, 2, 3...: the panes in screen order (the help names them from ktop.panes).
        *(Binding(str(i), f"focus_pane_number({i})", f"pane {i}", show=False)
          for i in range(1, MAX_PANES + 1)),
        Binding("space", "pause", "Pause", priority=True),
        Binding("i", "toggle_idle", "Idle rows"),
        Binding("c", "toggle_cumulative", "Cumulative"),
        Binding("v", "cycle_view", "View"),
        Binding("less_than_sign", "sort(-1)", "sort by the column to the left", show=False),
        Binding("greater_than_sign", "sort(1)", "sort by the column to the right", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("G", "filter_cgroup", "Cgroup filter", show=False),
        Binding("z", "zoom", "Zoom"),
        Binding("s", "save", "Save SVG"),
        Binding("R", "record", "Record"),
        Binding("L", "losses", "list each loss the header counts, and why", show=False),
        # A replayed recording's timeline (check_action: only there, and only on the panes).
        Binding("left", "timeline_step(-1)", "replay: one interval back", show=False, priority=True),
        Binding("right", "timeline_step(1)", "replay: one interval on", show=False, priority=True),
        Binding("left_square_bracket", "timeline_seconds(-60)", "replay: a minute back", show=False),
        Binding("right_square_bracket", "timeline_seconds(60)", "replay: a minute on", show=False),
        Binding("home", "timeline_edge(0)", "replay: the first record", show=False, priority=True),
        Binding("end", "timeline_edge(1)", "replay: the last record", show=False, priority=True),
        Binding("g", "timeline_prompt('time')", "Go to time"),
        Binding("w", "timeline_prompt('window')", "Window length"),
    ]

    def get_driver_class(self):
        """Textual's own, but on Linux one whose input thread sleeps until a key comes
        (ktop/driver.py); TEXTUAL_DRIVER still chooses."""
        driver = super().get_driver_class()
        from textual.drivers.linux_driver import LinuxDriver  # noqa: PLC0415

        if driver is LinuxDriver:
            from ktop.driver import QuietLinuxDriver  # noqa: PLC0415

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
    ) -> None:
        super().__init__()
        self.source = source
        self.interval_s = interval_s
        self.display_settings = Display(show_idle=show_idle, pid=pid, cgroup=cgroup)
        self.save_dir = save_dir
        self.snapshot: Snapshot | None = None
        self.paused = False
        self.zoomed: str | None = None
        self.compact = False  # one pane at a time, with tabs (a small terminal)
        self._panes: dict[str, Pane] = {}
        self._header: HeaderBar | None = None
        self.pane_order = tuple(spec.name for spec in PANES)
        self.compact_pane = self.pane_order[0]  # the pane shown then
        self.note = ""
        self.source_note = source_note  # "replay of FILE": the data is not live
        self.latest: Snapshot | None = None  # newest data, even while paused or drilled in
        self._stop = threading.Event()
        self._wake = threading.Event()  # a pane attached, or quitting: the collector wakes
        self._collected_at: float | None = None  # the first snapshot, when collected at mount
        self.recorder: SessionRecorder | None = None  # `R`: the live session to a file
        self.timeline = source.timeline  # a replayed recording moves through time
        self._prompt_for = ""

    # ---- layout -------------------------------------------------------------------------

    def get_default_screen(self) -> ChangedRowsScreen:
        return ChangedRowsScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        if self.timeline is not None:
            # Imported for a replay only: the live screen's start-up does not wait for it.
            from ktop.widgets.timeline import TimelineBar  # noqa: PLC0415

            yield TimelineBar(self.timeline.view(), id="timeline")
        yield PaneTabs([(spec.name, f"{spec.number} {spec.key_label}", f"{spec.number} {spec.short_label}")
                        for spec in PANES], id="tabs")
        with Grid(id="panes"):
            for spec in PANES:
                yield spec.widget()()
        yield Input(placeholder="filter rows (Enter keeps, Esc clears)", id="filter")
        if self.timeline is not None:
            yield Input(id="timeline-prompt")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self._fit_layout(self.size.width, self.size.height, first=True)
        if self.timeline is not None:
            self.query_one("#timeline-prompt", Input).display = False
            dropped = self.timeline.view().note
            if dropped:
                self.notify(f"the recording's end was cut off: {dropped}",
                            severity="warning", timeout=10, markup=False)
        self.header_bar().show(None)
        self.pane(PANE_FUNCTIONS).table.focus()
        # kill, a closed terminal or kill -INT: leave like `q` does, terminal restored.
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            loop.add_signal_handler(signum, self.action_quit)
        self._collect_first()
        self.collect_loop()

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

    @property
    def cumulative(self) -> bool:
        """The figures are since start (key c): drill-downs say so."""
        return self.source.cumulative

    @property
    def main_screen(self):
        """The screen holding the panes: App.query_one would search a drill-down on top."""
        return self.screen_stack[0]

    def pane(self, name: str) -> Pane:
        pane = self._panes.get(name)
        if pane is None:  # a DOM query walks the screen: once, not several times a refresh
            pane = self._panes[name] = self.main_screen.query_one(f"#pane-{name}", Pane)
        return pane

    def header_bar(self) -> HeaderBar:
        if self._header is None:  # as pane(): found once
            self._header = self.main_screen.query_one(HeaderBar)
        return self._header

    def focused_pane(self) -> Pane:
        widget = self.focused
        while widget is not None and not isinstance(widget, Pane):
            widget = widget.parent
        return widget if isinstance(widget, Pane) else self.pane(PANE_FUNCTIONS)

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
            while not worker.is_cancelled and not self._stop.is_set():
                if self._wake.wait(max(0.0, next_at - time.monotonic())):
                    self._wake.clear()
                    next_at = min(next_at, time.monotonic() + FIRST_DATA_S)
                    continue
                snapshot = self.source.collect()
                recorder = self.recorder
                if recorder is not None and not recorder.append(
                    self.source.interval_snapshot(snapshot)
                ) and recorder.error:
                    self.post_message(RecordingStopped(recorder))
                # While panes load, their messages count the seconds: refresh more often.
                next_at += min(LOADING_REFRESH_S, self.interval_s) if snapshot.loading else self.interval_s
                self.post_message(SnapshotReady(snapshot))
        finally:
            self.source.close()

    def _on_source_attached(self) -> None:
        self._wake.set()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self.latest = message.snapshot
        if self.paused:
            return
        first = self.snapshot is None
        self.snapshot = message.snapshot
        self.refresh_panes()
        for screen in _drill_screens(self.screen_stack):  # they follow the data as panes do
            screen.follow(message.snapshot)
        if first:  # drawn at the next frame: the compile can have the CPU now
            self.call_after_refresh(self.source.hurry_loading)

    def refresh_panes(self) -> None:
        snapshot = self.snapshot
        try:
            self._show_header()
            if self.timeline is not None:
                self.main_screen.query_one("#timeline").show(self.timeline.view())
        except (NoMatches, IndexError):  # before mount or while shutting down: next refresh
            return
        if snapshot is None:
            return
        with self.batch_update():
            for name in self.pane_order:
                self.pane(name).show(snapshot, self.display_settings)

    def _badges(self) -> list[Badge]:
        """What the screen shows, if not everything live: first on the header's top line,
        the shortest and most easily missed first (a recording's file name is long)."""
        badges = []
        pid = self.display_settings.pid
        if pid is not None:
            badges.append(Badge(f"pid {pid} only (Esc: all)"))
        cgroup = self._cgroup_note()
        if cgroup:
            badges.append(Badge(cgroup))
        for name in self.pane_order:
            try:
                pane = self.pane(name)
            except NoMatches:
                continue
            if pane.table.filter_text:
                badges.append(Badge(f"{pane.spec.number}: /{pane.table.filter_text}"))
        if self.paused:
            badges.append(Badge("PAUSED"))
        if self.source_note.startswith("replay of "):
            name = os.path.basename(self.source_note.removeprefix("replay of "))
            badges.append(Badge(f"replay of {name}", "bold reverse cyan"))
        elif self.source_note:
            badges.append(Badge(self.source_note, "bold reverse cyan"))
        recording = self._recording_badge()
        if recording:
            badges.append(Badge(recording, "bold reverse red"))
        return badges

    def _show_header(self) -> None:
        badges = self._badges()
        self.note = "   ".join(b.text for b in badges)
        self.header_bar().show(self.snapshot, badges, filtered=self.display_settings.filtered,
                               idle_hidden=not self.display_settings.show_idle)

    def action_losses(self) -> None:
        """L: each loss the header's total folds, with why it happens."""
        if self.screen is not self.main_screen:
            return
        from ktop.screens.losses import LossesScreen  # noqa: PLC0415 - on the first L only
        from ktop.units import format_span  # noqa: PLC0415

        def latest():  # what the header shows now (paused: the paused frame)
            snapshot = self.snapshot
            return loss_lines(snapshot), format_span(snapshot.duration_s if snapshot else 0)

        self.push_screen(LossesScreen(latest, min(self.interval_s, 1.0)))

    def _cgroup_note(self) -> str:
        """What the cgroup filter shows; a live cgroup removed since is said so."""
        cgroup = self.display_settings.cgroup
        if cgroup is None:
            return ""
        gone = self.source.live and not cgroup_exists(cgroup)
        if gone != self.display_settings.cgroup_gone:
            self.display_settings = replace(self.display_settings, cgroup_gone=gone)
        if gone:
            return f"cgroup {cgroup} removed (Esc: all)"
        return f"cgroup {cgroup} only (Esc: all)"

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()

    # ---- actions --------------------------------------------------------------------------

    def action_quit(self) -> None:
        self._stop.set()
        self._wake.set()
        self.exit()

    def action_focus_pane(self, name: str) -> None:
        if self.screen is not self.main_screen:
            return
        if self.zoomed and self.zoomed != name:
            self._set_zoom(name)
        elif self.compact and self.compact_pane != name:
            self.compact_pane = name
            self._show_layout()
        self.pane(name).table.focus()

    def action_focus_pane_number(self, number: int) -> None:
        if number <= len(self.pane_order):
            self.action_focus_pane(self.pane_order[number - 1])

    def action_focus_pane_step(self, step: int) -> None:
        if self.screen is not self.main_screen:  # Tab on a drill-down switches its view
            cycle = getattr(self.screen, "action_cycle_view", None)
            if cycle:
                cycle()
            return
        order = self.pane_order
        current = order.index(self.focused_pane().PANE)
        self.action_focus_pane(order[(current + step) % len(order)])

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._show_header()
        for screen in _drill_screens(self.screen_stack):
            screen.show_paused()

    def action_toggle_idle(self) -> None:
        if self.screen is not self.main_screen:
            return
        self.display_settings = replace(self.display_settings, show_idle=not self.display_settings.show_idle)
        self.notify("idle rows shown" if self.display_settings.show_idle else "idle rows hidden")
        self.refresh_panes()

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

    def action_cycle_view(self) -> None:
        if self.screen is not self.main_screen:
            cycle = getattr(self.screen, "action_cycle_view", None)
            if cycle:
                cycle()
            return
        pane = self.focused_pane()
        view = pane.cycle_view(self.snapshot, self.display_settings)
        label = pane.spec.key_label
        self.notify(f"{label}: {view}" if view else f"{label}: one view only")

    def action_sort(self, step: int) -> None:
        if self.screen is not self.main_screen:
            return
        label = self.focused_pane().table.cycle_sort(step)
        self.notify(f"sorted by {label}")

    def action_filter(self) -> None:
        if self.screen is not self.main_screen:
            return
        box = self.query_one("#filter", Input)
        box.value = self.focused_pane().table.filter_text
        box.display = True
        self._filter_target = self.focused_pane()
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self._filter_target.table.set_filter(event.value)
            self._show_header()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = False
            self._filter_target.table.focus()
            self.refresh_panes()
        elif event.input.id == "timeline-prompt":
            self._timeline_answer(event.input)

    def on_key(self, event) -> None:
        if self.screen is not self.screen_stack[0]:
            return
        if self.timeline is not None and self.query_one("#timeline-prompt", Input).has_focus:
            if event.key == "escape":  # the typed time or window is dropped
                self._close_prompt()
                event.stop()
            return  # Backspace and the rest are the prompt's
        box = self.query_one("#filter", Input)
        if event.key in ("escape", "backspace") and not box.has_focus:
            if self.display_settings.pid is not None:
                self.display_settings = replace(self.display_settings, pid=None)
                self.refresh_panes()
                event.stop()
            elif self.display_settings.cgroup is not None:
                self._set_cgroup(None)
                event.stop()
            elif self.zoomed:
                self._set_zoom(None)
                event.stop()
            return
        if event.key == "escape" and box.has_focus:
            box.value = ""
            box.display = False
            self._filter_target.table.set_filter("")
            self._filter_target.table.focus()
            self.refresh_panes()
            event.stop()

    def action_zoom(self) -> None:
        if self.screen is not self.main_screen:
            return
        self._set_zoom(None if self.zoomed else self.focused_pane().PANE)

    def _set_zoom(self, name: str | None) -> None:
        self.zoomed = name
        if name is not None:
            self.compact_pane = name  # leaving the zoom on a small screen keeps this pane
        self._show_layout()

    def on_pane_tabs_selected(self, message: PaneTabs.Selected) -> None:
        self.action_focus_pane(message.pane)

    def on_resize(self, event) -> None:
        self._fit_layout(event.size.width, event.size.height)

    def _fit_layout(self, width: int, height: int, first: bool = False) -> None:
        compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        if compact != self.compact or first:
            self.compact = compact
            if compact:
                self.compact_pane = self.focused_pane().PANE
            self._show_layout()

    def _show_layout(self) -> None:
        """The zoomed pane alone; on a small screen the chosen pane alone, under tabs; else
        every pane, two a row (an odd last one the row's width)."""
        alone = self.zoomed or (self.compact_pane if self.compact else None)
        screen = self.main_screen
        grid = screen.query_one("#panes", Grid)
        count = 1 if alone is not None else len(self.pane_order)
        columns = min(2, count)
        rows = (count + 1) // 2 if count > 1 else 1
        grid.styles.grid_size_columns, grid.styles.grid_size_rows = columns, rows
        grid.styles.grid_columns = " ".join(["1fr"] * columns)
        grid.styles.grid_rows = " ".join(["1fr"] * rows)
        tabs = screen.query_one("#tabs", PaneTabs)
        tabs.display = self.compact
        tabs.show(alone or self.compact_pane)
        for index, pane_name in enumerate(self.pane_order):
            pane = self.pane(pane_name)
            pane.display = alone is None or pane_name == alone
            odd_last = alone is None and count % 2 == 1 and index == count - 1 and count > 1
            pane.styles.column_span = 2 if odd_last else 1

    # ---- drill-down ---------------------------------------------------------------------

    def on_keyed_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
        if self.screen is self.main_screen:
            self.open_drill(self.focused_pane(), event.row_key)

    def open_drill(self, pane: Pane, key: str) -> bool:
        """Open what is behind a row (Enter on it, or --drill); False if nothing is."""
        target = pane.drill(key)
        if isinstance(target, int):  # a process: every pane shows it alone
            self.display_settings = replace(self.display_settings, pid=target)
            self.refresh_panes()
        elif isinstance(target, CgroupFilter):
            self._set_cgroup(target.path)
        elif target is not None:
            self.push_screen(target(self))
        return target is not None

    def action_filter_cgroup(self) -> None:
        """G: every pane shows the selected row's cgroup subtree alone; G again shows all."""
        if self.screen is not self.main_screen:
            return
        if self.display_settings.cgroup is not None:
            self._set_cgroup(None)
            return
        pane = self.focused_pane()
        key = pane.table.selected_key
        row = pane.model_row(key) if key is not None else None
        cgroup = getattr(row, "cgroup", None)
        if not cgroup or cgroup.startswith("["):
            self.notify("no cgroup on this row: select a process, a lock task, "
                        "an I/O process or a cgroup (4, v)", severity="warning")
            return
        self._set_cgroup(cgroup)

    def _set_cgroup(self, cgroup: str | None) -> None:
        self.display_settings = replace(self.display_settings, cgroup=cgroup, cgroup_gone=False)
        self.refresh_panes()

    def action_help(self) -> None:
        from ktop.screens.help import HelpScreen, bindings_help  # noqa: PLC0415  (rich.table: 7 ms at start)

        bindings = [b for b in self.BINDINGS if self._applies(b.action)]
        first = next(i for i, b in enumerate(bindings) if b.action.startswith("focus_pane_number"))
        keys = [
            *bindings_help(bindings[:first]),
            *((str(spec.number), spec.key_label) for spec in PANES),  # the panes by number
            *bindings_help([b for b in bindings[first:]
                            if not b.action.startswith("focus_pane_number")]),
            ("Up Down PgUp PgDn" + ("" if self.timeline else " Home End"),
             "move in the focused table"),
            ("Enter", "drill down: the call stacks behind the row (a process: filter to it)"),
            ("Esc Backspace", "show all processes (or cgroups) again / leave the zoom"),
            ("mouse", "click a row to select it, click it again to drill down"),
        ]
        self.push_screen(HelpScreen("ktop", keys))

    # ---- recording (live) and replaying a recording ---------------------------------------

    def _applies(self, action: str) -> bool:
        """Timeline keys move a replayed recording; R records live data."""
        if action.startswith("timeline_"):
            return self.timeline is not None
        return self.source.live if action == "record" else True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        drill = next(iter(_drill_screens(self.screen_stack)), None)
        if drill is not None:  # open, maybe under its help: the panes' own keys do nothing
            if action in PANES_ONLY_ACTIONS:
                return False
            if action == "cycle_view":
                return hasattr(drill, "action_cycle_view")
        if action.startswith("timeline_"):
            # Only on the panes: on a drill-down or in a typed line the keys are theirs.
            return (self._applies(action) and self.screen is self.main_screen
                    and not isinstance(self.focused, Input))
        return self._applies(action)

    def _recording_badge(self) -> str:
        recorder = self.recorder
        if recorder is None:
            return ""
        return f"● REC {printable(os.path.basename(recorder.path))} {recorder.describe()}"

    def action_record(self) -> None:
        """Start or stop recording the live session, one record per interval, to a new file
        beside where `s` saves (replay it with `ktop --replay FILE`)."""
        recorder = self.recorder
        if recorder is not None:
            self.recorder = None
            recorder.stop()
            self.notify(f"recording stopped: {printable(os.path.abspath(recorder.path))} "
                        f"({recorder.describe()})", timeout=8, markup=False)
        else:
            from ktop.recorder import SessionRecorder  # noqa: PLC0415 - on the first R only
            from ktop.recording import RecordingError  # noqa: PLC0415

            path = os.path.join(self.save_dir, time.strftime("ktop-%Y%m%d-%H%M%S.krec"))
            try:
                self.recorder = SessionRecorder(path)
            except RecordingError as e:
                self.notify(str(e), severity="error", markup=False, timeout=8)
                return
            self.notify(f"recording to {printable(os.path.abspath(path))} (R stops)", timeout=8,
                        markup=False)
        self._show_header()

    def on_recording_stopped(self, message: RecordingStopped) -> None:
        if self.recorder is message.recorder:
            self.recorder = None
        self.notify(message.recorder.error, severity="error", markup=False, timeout=15)
        self._show_header()

    def action_timeline_step(self, records: int) -> None:
        self.timeline.step(records)
        self._timeline_moved()

    def action_timeline_seconds(self, seconds: float) -> None:
        self.timeline.step_seconds(seconds)
        self._timeline_moved()

    def action_timeline_edge(self, last: int) -> None:
        self.timeline.go_to(len(self.timeline.records) - 1 if last else 0)
        self._timeline_moved()

    def action_timeline_prompt(self, what: str) -> None:
        prompt = self.query_one("#timeline-prompt", Input)
        self._prompt_for = what
        prompt.placeholder = (
            "go to a time: HH:MM:SS or YYYY-MM-DD HH:MM:SS (Enter goes, Esc cancels)"
            if what == "time" else
            "window: a number of records, or a span like 30s, 5m, 1h (Enter sets, Esc cancels)"
        )
        prompt.value = ""
        self._prompt_return = self.focused_pane()
        prompt.display = True
        prompt.focus()

    def _close_prompt(self) -> None:
        self.query_one("#timeline-prompt", Input).display = False
        self._prompt_return.table.focus()

    def _timeline_answer(self, prompt: Input) -> None:
        from ktop.replay import parse_window

        self._close_prompt()
        text = prompt.value.strip()
        if not text:
            return
        try:
            if self._prompt_for == "time":
                self.timeline.go_to_time(text)
            else:
                self.timeline.set_window(parse_window(text, self.timeline.interval_s))
        except ValueError as e:
            self.notify(printable(str(e)), severity="warning", timeout=8, markup=False)
            return
        self._timeline_moved()

    def _timeline_moved(self) -> None:
        self.main_screen.query_one("#timeline").show(self.timeline.view())
        self._show_timeline_position()

    @work(thread=True, exclusive=True, group="timeline")
    def _show_timeline_position(self) -> None:
        """Merging a long window of records takes a moment: off the UI thread."""
        self.post_message(SnapshotReady(self.timeline.collect()))

    def action_save(self) -> None:
        name = time.strftime("ktop-%Y%m%d-%H%M%S.svg")
        path = os.path.join(self.save_dir, name)
        try:
            write_atomically(path, self.export_screenshot(title="ktop"))
        except SnapshotError as e:
            self.notify(str(e), severity="error", timeout=8)
            return
        self.notify(f"saved {os.path.abspath(path)}", timeout=8)


def build_app(source: DataSource, **kwargs) -> KtopApp:
    """The app factory: tests hand it recorded data, the CLI live collectors."""
    return KtopApp(source, **kwargs)

