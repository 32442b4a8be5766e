"""The frame every live pane shares: a titled box, one table per view, a line that says
why the table is empty or the pane unavailable, and what Enter on a row opens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Region
from textual.widgets import Static

from ktop import registry as panes
from ktop.cgroups import in_subtree
from ktop.compare import Baseline
from ktop.model import Snapshot
from ktop.ui.widgets.table import Cell, Column, KeyedTable
from ktop.units import format_span

# A row as a pane makes it: its key (opaque outside the pane), its cells, the model row behind.
PaneRow = tuple[str, Sequence[Cell], Any]

@dataclass(frozen=True)
class CgroupFilter:
    """What Enter on a cgroup row opens: every pane filtered to that cgroup's subtree."""

    path: str


# What Enter on a row opens: a drill-down screen that still wants the app's newest data, a
# pid every pane then shows alone, a cgroup they then show alone, or None when nothing is
# behind the row.
if TYPE_CHECKING:  # the drill-down screens' module loads when the first one opens
    from collections.abc import Callable

    from textual.screen import Screen

    from ktop.ui.screens.drill import DrillHost

    Drill = Callable[[DrillHost], Screen] | int | CgroupFilter | None
else:
    Drill = object

def _cumulative(snapshot: Snapshot) -> bool:
    # (files written before the snapshot said so: their CPU profile does)
    return snapshot.cumulative or bool(snapshot.cpu and snapshot.cpu.cumulative)


def window_label(snapshot: Snapshot) -> str:
    """Over what time a pane's figures are, as every pane says it: "last 5s", or "cumulative
    463s" since start (key c)."""
    mode = "cumulative" if _cumulative(snapshot) else "last"
    return f"{mode} {format_span(snapshot.duration_s)}"


def in_window(snapshot: Snapshot) -> str:
    """The same, after "no such rows": "in the last 5s", "in 463s since start"."""
    span = format_span(snapshot.duration_s)
    return f"in {span} since start" if _cumulative(snapshot) else f"in the last {span}"


# Columns that only a zoomed (or very wide) pane has room for.
WIDE = 100
WIDER = 120


@dataclass(frozen=True)
class View:
    name: str
    columns: tuple[Column, ...]
    sort: str
    # The Snapshot field it reads when not its pane's (the block pane's disks view reads
    # /proc/diskstats' figures: shown where the pane's BPF program is unavailable too).
    field: str = ""


@dataclass(frozen=True)
class Display:
    """App-wide display settings the panes render with."""

    show_idle: bool = False
    pid: int | None = None  # show only this process (drill-down into a process, --pid)
    cgroup: str | None = None  # show only this cgroup v2 subtree (--cgroup, key G)
    cgroup_gone: bool = False  # that cgroup has been removed since
    recorded: bool = False  # a replayed file: a pane with no data now never gets any
    # Key b, --baseline: every pane compares its rows with this window's (ktop.compare).
    baseline: Baseline | None = field(default=None, compare=False)

    def shows(self, pid: int, cgroup: str) -> bool:
        """A row of this process and cgroup passes the --pid and --cgroup filters."""
        if self.pid is not None and pid != self.pid:
            return False
        return self.cgroup is None or in_subtree(cgroup, self.cgroup)

    @property
    def filtered(self) -> bool:
        return self.pid is not None or self.cgroup is not None


class Pane(Vertical):
    PANE: ClassVar[str]
    VIEWS: ClassVar[tuple[View, ...]]
    # What each column of its views is, by the column's label, a line each: `?` on the pane
    # lists those of the view shown, as htop's F1 does.
    COLUMN_HELP: ClassVar[dict[str, str]]

    def __init__(self, **kwargs) -> None:
        super().__init__(id=f"pane-{self.PANE}", classes="pane", **kwargs)
        self.view = self.VIEWS[0].name
        self.spec = panes.pane(self.PANE)  # its name, title... (ktop.registry)
        # Its number key: its place among the panes chosen (the screen sets it).
        self.number = self.spec.number
        self.border_title = self.numbered_title
        self._snapshot: Snapshot | None = None  # what the rows shown were made from
        self._shown: dict[str, Any] = {}  # key -> the model row behind it, current view
        self._pending: tuple[Snapshot, Display] | None = None  # came while hidden
        self._tables: dict[str, KeyedTable] = {}  # view -> its table, made in compose()
        self.comparing = False  # showing the compare table (a baseline is set: key b)
        self._baseline: Baseline | None = None  # what the compare table was made against
        self.compare_by_command: bool | None = None  # m while comparing; None: the baseline's
        self.compare_hidden = False  # v moved on from the compare table to the pane's views
        self._display = Display()  # the settings the compare table was made with
        self._changes: dict[str, Any] = {}  # compare table's key -> its ktop.compare.Change

    def compose(self) -> ComposeResult:
        views = list(self.VIEWS)
        if self.spec.compare is not None:
            from ktop.ui.widgets.comparing import compare_view  # noqa: PLC0415

            views.append(compare_view(self.spec))
        for index, view in enumerate(views):
            table = KeyedTable(view.columns, view.sort, id=f"{self.PANE}-{view.name}")
            self._tables[view.name] = table
            table.display = index == 0
            table.message = "starting collectors..."
            yield table
        note = Static("", id=f"{self.PANE}-note", classes="pane-note", markup=False)
        note.display = False
        yield note

    @property
    def numbered_title(self) -> str:
        return f"{self.number} {self.spec.title}"

    def set_number(self, number: int) -> None:
        """Its number key changed (panes chosen with p): its titles say the new one."""
        old, self.number = f"{self.number} ", number
        for name in ("border_title", "_view_title"):
            title = getattr(self, name, None)
            if isinstance(title, str) and title.startswith(old):
                setattr(self, name, f"{number} {title.removeprefix(old)}")

    @property
    def table(self) -> KeyedTable:
        """The current view's table (asked several times a refresh: no DOM query)."""
        return self._tables["compare" if self.comparing else self.view]

    def _set_comparing(self, comparing: bool) -> None:
        """The compare table in the view's place, or back; the focus goes with it."""
        if comparing == self.comparing:
            return
        had_focus = self.table.has_focus
        self.table.display = False
        self.comparing = comparing
        self.table.display = True
        if had_focus:
            self.table.focus()
        # A view's own title (hot user functions...) does not name what is compared.
        if comparing:
            self._view_title, self.border_title = self.border_title, self.numbered_title
        else:
            self.border_title = self._view_title

    def column_help(self) -> list[tuple[str, str, bool]]:
        """(label, what it is, whether the table shows it now) for the current view's columns
        (the compare table's, while a baseline is set)."""
        table = self.table
        described = self.COLUMN_HELP
        if self.comparing and self.spec.compare is not None:
            described = {
                self.spec.compare.label: "the figure a second in this window",
                "baseline": "the same a second in the baseline window (new: not in it)",
                "change": "this window's minus the baseline's (gone: not in this window)",
                "name": "the row compared",
            }
        return [(c.label, described[c.label], table.is_mounted and table.shows(c))
                for c in table.table_columns]

    def view_description(self) -> str:
        """What the current view shows, said when `v` switches to it."""
        return self.view

    def cycle_view(self, snapshot: Snapshot | None, display: Display) -> str:
        """The next view; what `v` should say about it ("" when there is no other view).
        With a baseline the compare table is one more view, first in the cycle: v goes
        from it through the pane's own views (the disks view too) and back to it."""
        names = [v.name for v in self.VIEWS]
        comparable = display.baseline is not None and self.spec.compare is not None
        if len(names) == 1 and not comparable:
            return ""
        had_focus = self.table.has_focus
        self._set_comparing(False)
        self.table.display = False
        if comparable and not self.compare_hidden:  # the compare table -> the first view
            self.compare_hidden = True
            self.view = names[0]
        elif comparable and self.view == names[-1]:  # the last view -> the compare table
            self.compare_hidden = False
            self.view = names[0]
        else:
            self.view = names[(names.index(self.view) + 1) % len(names)]
        self.table.display = True
        if had_focus:
            self.table.focus()
        if snapshot is not None:
            self.show(snapshot, display)
        if comparable and not self.compare_hidden:
            return "compared with the baseline (m: match by pid or command)"
        if comparable:
            return f"{self.view_description()}, not compared"
        return self.view_description()

    def compares(self, display: Display) -> bool:
        """Whether the compare table is shown: a baseline is set and v has not moved on
        to the pane's own views."""
        return (display.baseline is not None and self.spec.compare is not None
                and not self.compare_hidden)

    @property
    def current_view(self) -> View:
        return next(v for v in self.VIEWS if v.name == self.view)

    def toggle_match(self, snapshot: Snapshot | None, display: Display) -> str:
        """m while comparing: rows of processes matched by process or by command, where the
        pane lists processes; what to say about it."""
        comparison = self.spec.compare
        if not self.comparing:
            return "m matches the compared rows: v to the compared view"
        if comparison is None or comparison.command_key is None:
            return "rows matched by name (no processes to match by pid or command)"
        self.compare_by_command = not self.by_command(display)
        if snapshot is not None:
            self.show(snapshot, display)
        return "compared by command" if self.compare_by_command else "compared by process"

    def by_command(self, display: Display) -> bool:
        """Compared rows matched by command: as v chose, else as the baseline suggests."""
        if self.compare_by_command is not None:
            return self.compare_by_command
        return display.baseline is not None and display.baseline.by_command

    def show(self, snapshot: Snapshot, display: Display) -> None:
        """The snapshot's rows; a hidden pane (another tab of a small screen, beside a zoomed
        one) makes them only once shown (catch_up), or when asked for a row."""
        if not self.display:
            self._pending = (snapshot, display)
            return
        self._show_now(snapshot, display)

    def catch_up(self) -> None:
        """The rows of the newest snapshot shown while hidden, if any."""
        if self._pending is not None:
            self._show_now(*self._pending)

    def _show_now(self, snapshot: Snapshot, display: Display) -> None:
        self._pending = None
        self._snapshot = snapshot
        own_field = self.current_view.field
        if own_field:  # a view of other data than the pane's program collects
            if display.recorded and getattr(snapshot, own_field) is None:
                self._show_rows([])
                self._set_chrome("not in this file (written by a ktop without this view)", "")
                return
            self._show_rows_and_chrome(snapshot, display)
            return
        reason = snapshot.unavailable.get(self.PANE)
        if reason:
            self._show_rows([])
            self._set_chrome(f"unavailable: {reason}", "unavailable")
            return
        loading = snapshot.loading.get(self.PANE)
        if loading:
            self._show_rows([])
            self._set_chrome(loading, "loading")
            return
        if display.recorded and getattr(snapshot, panes.pane(self.PANE).field) is None:
            self._show_rows([])
            self._set_chrome("not in this file (written by a ktop without this pane, or before "
                             "it attached)", "")
            return
        self._show_rows_and_chrome(snapshot, display)

    def _show_rows_and_chrome(self, snapshot: Snapshot, display: Display) -> None:
        if display.baseline is not self._baseline:  # a new baseline: compared, its own matching
            self._baseline = display.baseline
            self.compare_by_command = None
            self.compare_hidden = False
        self._set_comparing(self.compares(display))
        if self.comparing:
            from ktop.ui.widgets.comparing import compared, row_key  # noqa: PLC0415

            changes, rows, empty_message, subtitle = compared(self.spec, snapshot, display,
                                                              self.by_command(display))
            self._display = display
            self._changes = {row_key(c): c for c in changes}
        else:
            rows, empty_message, subtitle = self.rows(snapshot, display)
        if display.cgroup is not None and not rows:
            gone = " (removed)" if display.cgroup_gone else ""
            empty_message = f"nothing from cgroup {display.cgroup}{gone} here (Esc shows all)"
        self._show_rows(rows)
        if self.table.filter_text:
            subtitle = f"{subtitle}  filter: {self.table.filter_text}".strip()
        self._set_chrome(empty_message if not rows else "", subtitle)
        self._set_note(self.note(snapshot, display))

    def note(self, snapshot: Snapshot, display: Display) -> str:
        """A line under the table that says what the rows alone do not; "" for none."""
        return ""

    def _set_note(self, text: str) -> None:
        """Shown and hidden only when it changes: either asks for a layout pass."""
        if text == getattr(self, "_note", ""):
            return
        self._note = text
        note = self.query_one(f"#{self.PANE}-note", Static)
        note.update(Text(text))
        note.display = bool(text)

    def _show_rows(self, rows: Sequence[PaneRow]) -> None:
        self._shown = {key: row for key, _, row in rows}
        self.table.show_rows([(key, cells) for key, cells, _ in rows])

    def row_named(self, what: str) -> str | None:
        """The key of the row `--drill PANE:WHAT` names: by the field its pane names rows by."""
        self.catch_up()
        field = self.spec.drill_by
        return next(
            (key for key, row in self._shown.items()
             if hasattr(row, field) and str(getattr(row, field)) == what),
            None,
        )

    def model_row(self, key: str) -> Any:
        """The model row behind the row `key` of the current view, or None."""
        self.catch_up()
        return self._shown.get(key)

    def drill(self, key: str) -> Drill:
        """What Enter on the row `key` opens (`--drill` comes here too)."""
        self.catch_up()
        if self.comparing:
            return self._drill_compared(key)
        row = self._shown.get(key)
        return None if row is None else self.drill_row(row)

    def _drill_compared(self, key: str) -> Drill:
        """The stacks behind a compared row, stack by stack against the baseline."""
        change = self._changes.get(key)
        baseline = self._baseline
        if change is None or self._snapshot is None or baseline is None:
            return None
        from functools import partial  # noqa: PLC0415

        from ktop.ui.screens.compare import CompareStacksScreen  # noqa: PLC0415

        return partial(CompareStacksScreen, self.spec, change, baseline,
                       self.by_command(self._display), self._snapshot)

    def drill_row(self, row: Any) -> Drill:
        """What opens from one model row this pane shows."""
        raise NotImplementedError

    def _set_chrome(self, message_text: str, subtitle: str) -> None:
        """The table says why it is empty; the subtitle is touched only when it changes (set
        through Textual, it would repaint the whole pane)."""
        self.table.set_message(message_text)
        if subtitle != getattr(self, "_subtitle", None):
            self._subtitle = subtitle
            self._set_subtitle(subtitle)

    def _set_subtitle(self, subtitle: str) -> None:
        """The subtitle sits in the bottom border line: repaint that line alone (Textual's
        border_subtitle setter repaints every line of the pane, each second). The text is
        ours, but may hold a filter the user typed: it is escaped, never markup."""
        if not self.is_mounted or not self.size:
            self.border_subtitle = Text(subtitle)
            return
        self._border_subtitle = Content(subtitle)
        # Refresh regions are relative to the content area, inside the border.
        left, top = self.content_offset
        height = self.outer_size.height
        self.refresh(Region(-left, height - 1 - top, self.outer_size.width, 1))

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[Sequence[PaneRow], str, str]:
        """(rows of the current view, what to say when there are none, border subtitle)."""
        raise NotImplementedError
