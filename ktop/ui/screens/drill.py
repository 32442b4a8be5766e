"""What every drill-down screen shares: the header line, following the app's data (`space`
freezes it), the stale mark once its row has left the data, back, refresh and help. Stacks are
one frame a line, merged when they differ only in offsets of the same functions (`o` splits
them): ktop.stackmerge.
"""

from __future__ import annotations

import time
from typing import Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from ktop.model import (
    Snapshot,
)
from ktop.text import printable
from ktop.ui.widgets.fit import MUST, Item, fit_items
from ktop.ui.widgets.footer import KeysFooter
from ktop.units import format_span


class DrillHost(Protocol):
    """What a drill-down reads of the app under it (the app is one)."""

    @property
    def latest(self) -> Snapshot | None: ...  # the newest data, even while paused
    @property
    def paused(self) -> bool: ...
    @property
    def cumulative(self) -> bool: ...  # the figures are since start (key c)
    @property
    def timeline(self) -> object | None: ...  # a replay's (the app's Timeline), else None
    # A replay's window moved from a drill-down: "step" (records), "seconds", "edge" (0 first,
    # 1 last), as the panes' keys move it.
    def move_timeline(self, how: str, amount: int) -> None: ...

COMMON_BINDINGS = [
    Binding("escape,backspace", "back", "Back"),
    Binding("o", "toggle_offsets", "Offsets",
            tooltip="merge stacks that differ only in offsets of the same functions, or split them"),
    # In the help, not the footer: at 80 columns the footer keeps room for space and c.
    Binding("r", "refresh_data", "Refresh now (even paused)", show=False),
    Binding("s", "app.save", "Save SVG", show=False),
    Binding("question_mark,f1", "help", "Help"),
    Binding("q", "app.quit", "Quit", show=False),
    # A replay's window moves here as on the panes, and the drill-down follows it.
    Binding("left", "timeline('step', -1)", "replay: one interval back", show=False, priority=True),
    Binding("right", "timeline('step', 1)", "replay: one interval on", show=False, priority=True),
    Binding("left_square_bracket", "timeline('seconds', -60)", "replay: a minute back",
            show=False),
    Binding("right_square_bracket", "timeline('seconds', 60)", "replay: a minute on",
            show=False),
    Binding("home", "timeline('edge', 0)", "replay: the first record", show=False),
    Binding("end", "timeline('edge', 1)", "replay: the last record", show=False),
]


def escaped(text: str, style: str = "") -> Text:
    return Text(printable(text), style=style)


def frame_line(frame: str, style: str = "") -> Text:
    """One frame a line, cut at the screen's edge rather than wrapped into the next."""
    return Text(f"    {printable(frame)}", style=style, no_wrap=True, overflow="ellipsis")


def merged_note(variants: int) -> str:
    return f"  ({variants} stacks, offsets merged)" if variants > 1 else ""


class DrillScreen(Screen[None]):
    """What every drill-down shares: a header line, live updates, back, refresh, help."""

    TITLE = "Drill-down"  # the help screen's title

    def __init__(self, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.host = host
        self.stale = False
        self.merge_offsets = True  # as perf report: one stack per call path; `o` splits
        self._composed = False  # its widgets are mounted (on_mount)
        self._dismissed = False  # Esc: leaving, its widgets about to go

    def drawable(self) -> bool:
        """Whether its widgets are there to draw into. A refresh, a key or its own mount can
        come before they are composed (Enter, then r at once) or after Esc dismissed the
        screen and they are being removed (a crash, once in ~12,000 random keys): the data
        is still taken, nothing is drawn."""
        if not self._composed or self._dismissed or not self.is_attached:
            return False
        try:
            return self in self.app.screen_stack
        except Exception:  # noqa: BLE001 - no app any more (shutting down)
            return False

    def still_present(self, snapshot: Snapshot) -> bool:
        """Whether the row is in `snapshot`; if so, the screen takes its new figures."""
        raise NotImplementedError

    def header_items(self) -> list[Item]:
        """The parts of the line above the body: what this is (MUST) and its figures, each
        worth what it tells (the least worth go first on a narrow screen)."""
        raise NotImplementedError

    def header(self) -> Text:
        """The line above the body, as wide as the screen (ktop.ui.widgets.fit: whole parts
        dropped, never wrapped): what this is, its figures, and PAUSED or STALE."""
        return fit_items([*self.header_items(), *self.stale_items()], self._header_width())

    def _header_width(self) -> int | None:
        try:
            width = self.app.size.width
        except Exception:  # noqa: BLE001 - not in an app yet (no active app): no width
            return None
        headers = self.query("#stack-header")  # none before the screen is composed
        if headers:
            padding = headers.first().styles.padding
            width -= padding.left + padding.right
        return width

    def on_resize(self) -> None:
        headers = self.query("#stack-header")
        if headers:
            headers.first(Static).update(self.header())

    def show_paused(self) -> None:
        """Space, pressed here or on the panes: the header says so (the body stays)."""
        if self.drawable():
            self.header_widget().update(self.header())

    def shown(self) -> object:
        """What the body is drawn from: an unchanged value is not drawn again."""
        raise NotImplementedError

    def rebuild(self) -> None:
        """The header and the body drawn again from the screen's data, if it is drawable."""
        if self.drawable():
            self.draw()

    def draw(self) -> None:
        raise NotImplementedError

    def on_mount(self) -> None:
        self._composed = True
        if not self.drawable():  # dismissed before it was even mounted: its widgets go
            return
        self.prepare()
        self.draw()
        self.focus_body()
        self.refresh_bindings()  # its keys act from now on (check_action)

    def prepare(self) -> None:
        """Once its widgets are mounted, before the first draw (a table's columns)."""

    def focus_body(self) -> None:
        raise NotImplementedError

    def follow(self, snapshot: Snapshot, drawn: bool = True) -> None:
        """A new snapshot, as the panes get each refresh: redrawn only if what this screen
        shows changed; a row gone from it keeps its last figures, marked stale. In a replay
        the window moved: the title says its time. Not drawn: an overlay is on top (help),
        and the snapshot waits until this screen is on top again."""
        if not drawn:
            self._behind = snapshot
            return
        self._behind = None
        before, was_stale = (self.shown(), self._window()), self.stale
        if self.still_present(snapshot):
            self.snapshot, self.stale = snapshot, False
        else:
            self.stale = True
            self._moved_to = snapshot
        if self.stale != was_stale or (self.shown(), self._window()) != before:
            self.rebuild()

    def on_screen_resume(self) -> None:
        behind = getattr(self, "_behind", None)
        if behind is not None:
            self.follow(behind)

    def _window(self) -> tuple[float, float] | None:
        """The replayed window shown (its end and span); None live, where it always moves."""
        if self.host.timeline is None:
            return None
        return self.snapshot.taken_at, self.snapshot.duration_s

    def window_label(self, window_s: float) -> str:
        """Over what time the figures are: the pane's window, or since start (key c); in a
        replay, the window's own time ("in 19:53:00-19:53:30 (30s)")."""
        if self.host.timeline is not None:
            end = self.snapshot.taken_at
            clock = "%H:%M:%S"
            return (f"in {time.strftime(clock, time.localtime(end - window_s))}-"
                    f"{time.strftime(clock, time.localtime(end))} ({format_span(window_s)})")
        return "since start" if self.host.cumulative else f"in the last {format_span(window_s)}"

    # Keys that act whatever the screen shows: they draw nothing into its widgets.
    ALWAYS_ACTIONS = frozenset({"back", "help", "timeline"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The timeline keys move a replay only (live, the arrows are the body's); the keys
        that draw wait for the widgets (drawable)."""
        if action == "timeline":
            return self.host.timeline is not None
        return action in self.ALWAYS_ACTIONS or self.drawable()

    def action_timeline(self, how: str, amount: int) -> None:
        self.host.move_timeline(how, amount)

    def action_back(self) -> None:
        if not self._dismissed:  # a second Esc before it is gone would pop the screen under it
            self._dismissed = True
            self.dismiss(None)

    def action_refresh_data(self) -> None:
        """r: the latest data now, even while paused."""
        latest = self.host.latest
        if latest is None:
            return
        self.follow(latest)
        if self.stale:
            self.notify("gone from the latest data: showing what it had", severity="warning")

    def action_toggle_offsets(self) -> None:
        self.merge_offsets = not self.merge_offsets
        self.notify("stacks merged by function (offsets differ)" if self.merge_offsets
                    else "every offset its own stack")
        self.rebuild()

    def action_help(self) -> None:
        from ktop.ui.screens.help import HelpScreen, bindings_help

        own = [b for b in self.BINDINGS if self.check_action(b.action, ()) is not False]
        taken = {key for b in own for key in b.key.split(",")}
        app = self.app
        # The app's keys that do something here (space, c, R...), as its footer shows them.
        app_keys = [b for b in app.BINDINGS
                    if b.show and app.check_action(b.action, ()) is not False
                    and not taken & set(b.key.split(","))]
        keys = bindings_help(own + app_keys) + [("Up Down PgUp PgDn", "scroll")]
        self.app.push_screen(HelpScreen(self.TITLE, keys))

    def header_widget(self) -> Static:
        return self.query_one("#stack-header", Static)

    def stale_items(self) -> list[Item]:
        """PAUSED (space) and STALE, as the panes' header says them: never dropped."""
        items = []
        if self.host.paused:
            items.append(Item(Text("PAUSED (space resumes)", style="bold reverse"), MUST))
        if self.stale and self.host.timeline is not None:
            moved = getattr(self, "_moved_to", None)
            where = (f" ({time.strftime('%H:%M:%S', time.localtime(moved.taken_at))})"
                     if moved is not None else "")
            items.append(Item(Text(f"NOT IN THE WINDOW MOVED TO{where}: showing the last "
                                   "that had it", style="bold reverse yellow"), MUST,
                              Text(f"MOVED ON{where}: showing the last", style="bold reverse yellow")))
        elif self.stale:
            items.append(Item(Text("STALE: no longer in the latest data",
                                   style="bold reverse yellow"), MUST,
                              Text("STALE", style="bold reverse yellow")))
        return items


class DetailScreen(DrillScreen):
    """A drill-down that is a scrollable page of stacks and tables under a header line."""

    BINDINGS = list(COMMON_BINDINGS)

    def compose(self) -> ComposeResult:
        yield Static(id="stack-header")
        with VerticalScroll(id="stack-list"):
            yield Static(id="stack-list-text")
        yield KeysFooter()

    def focus_body(self) -> None:
        self.query_one("#stack-list", VerticalScroll).focus()


def offsets_title(text: str, merge: bool) -> Text:
    title = Text(text, style="bold", no_wrap=True, overflow="ellipsis")
    title.append("   offsets merged: o splits" if merge else "   offsets apart: o merges", style="dim")
    return title


def heading(text: str) -> Text:
    """A table's title on a line of its own: a Rich title wraps to the table's width."""
    return Text(text, style="bold", no_wrap=True, overflow="ellipsis")


