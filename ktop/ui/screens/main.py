"""The panes' screen: header, replay timeline, the panes laid out, the filter line, and every
key that acts on the panes (as posting's MainScreen owns its bindings). A drill-down pushed
on top has its own keys; what works everywhere (quit, pause, save, record) is the app's."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.css.query import NoMatches
from textual.dom import DOMNode
from textual.widgets import Input

from ktop import cgroups, config
from ktop.text import printable
from ktop.ui.widgets.compositor import ChangedRowsScreen
from ktop.ui.widgets.footer import KeysFooter
from ktop.ui.widgets.header import Badge, HeaderBar, loss_lines
from ktop.ui.widgets.pane import CgroupFilter, Display, Pane
from ktop.ui.widgets.table import KeyedTable
from ktop.ui.widgets.tabs import PaneTabs

if TYPE_CHECKING:
    from ktop.compare import Baseline
    from ktop.engine import Timeline
    from ktop.ui.app import KtopApp

# Number keys for up to this many panes (ktop.registry has them, in order).
MAX_PANES = 9
# Below this size the panes cannot be read side by side (at 80x24 a symbol had 7 columns,
# the lock caller none): one pane at a time, with tabs, as htop and btop do.
COMPACT_WIDTH = 100
COMPACT_HEIGHT = 22
# A pane in the grid gets at least this many lines (its border, column labels, 3 rows),
# out of the screen's lines less the header and footer, or the screen shows one at a time.
MIN_PANE_LINES = 6
CHROME_LINES = 4


def main_keys(bindings: list[Binding], timeline: bool,
              order: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(keys, what they do) of the panes' screen, in the help's order: `?` shows those that
    apply, the man page (ktop.manpage) all of them. The number keys go to the panes shown
    (`order`), or to every pane in the registry's order."""
    from ktop.ui.screens.help import bindings_help  # noqa: PLC0415  (rich.table: not at start)

    first = next(i for i, b in enumerate(bindings) if b.action.startswith("focus_pane_number"))
    return [
        *bindings_help(bindings[:first]),
        *((str(number), spec.key_label)  # the panes by number
          for number, spec in enumerate(config.ordered(order or config.pane_names()), 1)),
        *bindings_help([b for b in bindings[first:]
                        if not b.action.startswith("focus_pane_number")]),
        ("Up Down PgUp PgDn" + ("" if timeline else " Home End"), "move in the focused table"),
        ("Enter", "drill down: the call stacks behind the row (a process: filter to it)"),
        ("Esc Backspace", "show all processes (or cgroups) again / leave the zoom"),
        ("mouse", "click a row to select it, click it again to drill down"),
    ]


class MainScreen(ChangedRowsScreen):
    # In the footer's order; "app." keys are the app's, here so they keep their place.
    BINDINGS = [
        Binding("q", "app.quit", "Quit"),
        Binding("ctrl+c", "app.quit", "Quit", show=False, priority=True),
        Binding("question_mark,f1", "help", "Help"),
        Binding("tab", "focus_pane_step(1)", "Next pane", show=False, priority=True),
        Binding("shift+tab", "focus_pane_step(-1)", "Previous pane", show=False, priority=True),
        # 1, 2, 3...: the panes in screen order (the help names them from ktop.registry).
        *(Binding(str(i), f"focus_pane_number({i})", f"pane {i}", show=False)
          for i in range(1, MAX_PANES + 1)),
        Binding("space", "app.pause", "Pause", priority=True),
        Binding("i", "toggle_idle", "Idle rows"),
        Binding("c", "app.toggle_cumulative", "Cumulative"),
        Binding("v", "cycle_view", "View"),
        # Shown with a baseline only (check_action).
        Binding("m", "toggle_match", "Match",
                tooltip="compared rows of processes: matched by pid or by command"),
        Binding("less_than_sign", "sort(-1)", "sort by the column to the left", show=False),
        Binding("greater_than_sign", "sort(1)", "sort by the column to the right", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("G", "filter_cgroup", "Cgroup filter", show=False),
        Binding("z", "zoom", "Zoom"),
        Binding("p", "choose_panes", "Panes",
                tooltip="choose the panes shown (kept for the next start)"),
        Binding("s", "app.save", "Save SVG"),
        Binding("R", "app.record", "Record"),
        Binding("L", "losses", "list each loss the header counts, and why", show=False),
        Binding("b", "mark_baseline", "compare the panes with this window",
                show=False),
        Binding("B", "clear_baseline", "clear the baseline: no compare", show=False),
        # A replayed recording's timeline (check_action: only with one, never in a typed line).
        Binding("left", "timeline_step(-1)", "replay: one interval back", show=False, priority=True),
        Binding("right", "timeline_step(1)", "replay: one interval on", show=False, priority=True),
        Binding("left_square_bracket", "timeline_seconds(-60)", "replay: a minute back", show=False),
        Binding("right_square_bracket", "timeline_seconds(60)", "replay: a minute on", show=False),
        Binding("home", "timeline_edge(0)", "replay: the first record", show=False, priority=True),
        Binding("end", "timeline_edge(1)", "replay: the last record", show=False, priority=True),
        Binding("g", "timeline_prompt('time')", "Go to time"),
        Binding("w", "timeline_prompt('window')", "Window length"),
    ]

    def __init__(self, ktop: KtopApp, display: Display, timeline: Timeline | None,
                 panes: Sequence[str] | None = None) -> None:
        super().__init__(id="_default")
        self.ktop = ktop  # (self.app is typed as any App)
        self.display_settings = display
        self.timeline = timeline
        # The panes shown, in the order chosen (--panes, key p): number keys follow it.
        self.pane_order = tuple(panes or config.pane_names())[:MAX_PANES]
        self.zoomed: str | None = None
        self.compact = False  # one pane at a time, with tabs (a small terminal)
        self.compact_pane = self.pane_order[0]  # the pane shown then
        self.note = ""  # the header's badges, as text
        self._panes: dict[str, Pane] = {}
        self._header: HeaderBar | None = None
        self._filter_target: Pane | None = None
        self._prompt_for = ""
        self._prompt_return: Pane | None = None
        self.behind = False  # data came while another screen was on top: not shown yet
        self.baseline_loading = ""  # the header's word while --baseline FILE is merged

    # ---- layout -------------------------------------------------------------------------

    def widgets(self) -> ComposeResult:
        """The screen's widgets: the app composes them into this, its default screen, so
        they are mounted by the time the app's on_mount lays them out."""
        yield HeaderBar(id="header")
        if self.timeline is not None:
            # Imported for a replay only: the live screen's start-up does not wait for it.
            from ktop.ui.widgets.timeline import TimelineBar  # noqa: PLC0415

            yield TimelineBar(self.timeline.view(), id="timeline")
        yield PaneTabs(self._tab_labels(), id="tabs")
        with Grid(id="panes"):
            for number, spec in enumerate(config.ordered(self.pane_order), 1):
                yield self._make_pane(spec.name, number)
        yield Input(placeholder="filter rows (Enter keeps, Esc clears)", id="filter")
        if self.timeline is not None:
            yield Input(id="timeline-prompt")
        yield KeysFooter()

    def _tab_labels(self) -> list[tuple[str, str, str]]:
        return [(spec.name, f"{number} {spec.key_label}", f"{number} {spec.short_label}")
                for number, spec in enumerate(config.ordered(self.pane_order), 1)]

    def _make_pane(self, name: str, number: int) -> Pane:
        pane = config.ordered([name])[0].widget()()
        pane.set_number(number)
        return pane

    async def set_panes(self, names: Sequence[str]) -> None:
        """Show these panes, in this order (key p): the others are unmounted and their BPF
        programs unloaded, those added mounted and loaded; the number keys follow."""
        names = tuple(dict.fromkeys(n for n in names if n in config.pane_names()))[:MAX_PANES]
        if not names or names == self.pane_order:
            return
        focused = self.focused_pane().PANE if self.pane_order else None
        removed = [self.pane(n) for n in self.pane_order if n not in names]
        # Until the new panes are mounted (their tables made), the screen has those kept.
        self.pane_order = tuple(n for n in self.pane_order if n in names)
        for pane in removed:
            del self._panes[pane.PANE]
            if self._filter_target is pane:
                self._filter_target = None
            pane.display = False  # out of the layout first: nothing of it drawn after
            await pane.remove()
        grid = self.query_one("#panes", Grid)
        added = {n: self._make_pane(n, 0) for n in names if n not in self.pane_order}
        if added:
            await grid.mount_all(added.values())
            self._panes.update(added)
        self.pane_order = names
        previous: Pane | None = None
        for number, name in enumerate(names, 1):  # laid out in the order of the choice
            pane = self.pane(name)
            pane.set_number(number)
            grid.move_child(pane, before=0) if previous is None else grid.move_child(
                pane, after=previous)
            previous = pane
        if self.zoomed not in names:
            self.zoomed = None
        if self.compact_pane not in names:
            self.compact_pane = names[0]
        self.query_one("#tabs", PaneTabs).set_labels(self._tab_labels())
        self.fit_layout(self.ktop.size.width, self.ktop.size.height, first=True)
        source = self.ktop.source
        if source.live and hasattr(source, "set_panes"):  # the engine loads what shows
            source.set_panes(config.bpf_names(names))
        self.refresh_panes()
        self.pane(focused if focused in names else names[0]).table.focus()

    def action_choose_panes(self) -> None:
        """p: tick the panes to show; the choice is kept for the next start."""
        from ktop.ui.screens.panes import PanesScreen  # noqa: PLC0415 - on the first p only

        async def chosen(names: tuple[str, ...] | None) -> None:
            if not names or names == self.pane_order:
                return
            await self.set_panes(names)
            self.ktop.keep_panes(self.pane_order)

        self.ktop.push_screen(PanesScreen(self.pane_order), chosen)

    def ready(self) -> None:
        """Once the app is mounted (the panes' own widgets with it): layout and focus."""
        self.query_one("#filter", Input).display = False
        self.fit_layout(self.ktop.size.width, self.ktop.size.height, first=True)
        if self.timeline is not None:
            self.query_one("#timeline-prompt", Input).display = False
        self.header_bar().show(None)
        self.pane(self.pane_order[0]).table.focus()

    def pane(self, name: str) -> Pane:
        pane = self._panes.get(name)
        if pane is None:  # a DOM query walks the screen: once, not several times a refresh
            pane = self._panes[name] = self.query_one(f"#pane-{name}", Pane)
        return pane

    def header_bar(self) -> HeaderBar:
        if self._header is None:  # as pane(): found once
            self._header = self.query_one(HeaderBar)
        return self._header

    def focused_pane(self) -> Pane:
        node: DOMNode | None = self.focused
        while node is not None and not isinstance(node, Pane):
            node = node.parent
        if isinstance(node, Pane) and node.PANE in self.pane_order:  # (not one removed)
            return node
        return self.pane(self.pane_order[0])

    def on_resize(self, event) -> None:
        self.fit_layout(event.size.width, event.size.height)

    def fit_layout(self, width: int, height: int, first: bool = False) -> None:
        # Many panes chosen on a short screen: one at a time too, rather than a grid of
        # panes two rows tall.
        grid_rows = (len(self.pane_order) + 1) // 2
        crowded = grid_rows and (height - CHROME_LINES) / grid_rows < MIN_PANE_LINES
        compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT or bool(crowded)
        if compact != self.compact or first:
            self.compact = compact
            if compact:
                self.compact_pane = self.focused_pane().PANE
            self._show_layout()

    def _show_layout(self) -> None:
        """The zoomed pane alone; on a small screen the chosen pane alone, under tabs; else
        every pane, two a row (an odd last one the row's width)."""
        alone = self.zoomed or (self.compact_pane if self.compact else None)
        grid = self.query_one("#panes", Grid)
        count = 1 if alone is not None else len(self.pane_order)
        columns = min(2, count)
        rows = (count + 1) // 2 if count > 1 else 1
        grid.styles.grid_size_columns, grid.styles.grid_size_rows = columns, rows
        grid.styles.grid_columns = " ".join(["1fr"] * columns)
        grid.styles.grid_rows = " ".join(["1fr"] * rows)
        tabs = self.query_one("#tabs", PaneTabs)
        tabs.display = self.compact
        tabs.show(alone or self.compact_pane)
        for index, pane_name in enumerate(self.pane_order):
            pane = self.pane(pane_name)
            pane.display = alone is None or pane_name == alone
            odd_last = alone is None and count % 2 == 1 and index == count - 1 and count > 1
            pane.styles.column_span = 2 if odd_last else 1
            if pane.display:
                pane.catch_up()  # what came while it was hidden

    # ---- what the panes and the header show -----------------------------------------------

    def on_screen_resume(self) -> None:
        """On top again (an overlay or a drill-down closed): the data that came meanwhile."""
        if self.behind:
            self.refresh_panes()

    def refresh_panes(self) -> None:
        self.behind = False
        snapshot = self.ktop.snapshot
        try:
            self.show_header()
            if self.timeline is not None:
                self.query_one("#timeline").show(self.timeline.view())  # type: ignore[attr-defined]
        except (NoMatches, IndexError):  # before mount or while shutting down: next refresh
            return
        if snapshot is None:
            return
        with self.ktop.batch_update():
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
                badges.append(Badge(f"{pane.number}: /{pane.table.filter_text}"))
        if self.baseline_loading:
            badges.append(Badge(self.baseline_loading, "bold reverse magenta"))
        baseline = self.display_settings.baseline
        if baseline is not None:
            badges.append(Badge(f"vs baseline {baseline.label} (B clears)", "bold reverse magenta"))
        if self.ktop.paused:
            badges.append(Badge("PAUSED"))
        source_note = self.ktop.source_note
        if source_note.startswith("replay of "):
            name = os.path.basename(source_note.removeprefix("replay of "))
            badges.append(Badge(f"replay of {name}", "bold reverse cyan"))
        elif source_note:
            badges.append(Badge(source_note, "bold reverse cyan"))
        recording = self.ktop.recording_badge()
        if recording:
            badges.append(Badge(recording, "bold reverse red"))
        return badges

    def show_header(self) -> None:
        badges = self._badges()
        self.note = "   ".join(b.text for b in badges)
        self.header_bar().show(self.ktop.snapshot, badges, filtered=self.display_settings.filtered,
                               idle_hidden=not self.display_settings.show_idle)

    def _cgroup_note(self) -> str:
        """What the cgroup filter shows; a live cgroup removed since is said so."""
        cgroup = self.display_settings.cgroup
        if cgroup is None:
            return ""
        gone = self.ktop.source.live and not cgroups.cgroup_exists(cgroup)
        if gone != self.display_settings.cgroup_gone:
            self.display_settings = replace(self.display_settings, cgroup_gone=gone)
        if gone:
            return f"cgroup {cgroup} removed (Esc: all)"
        return f"cgroup {cgroup} only (Esc: all)"

    # ---- the panes' keys ------------------------------------------------------------------

    def _applies(self, action: str) -> bool:
        """Timeline keys move a replayed recording; R records live data."""
        if action.startswith("timeline_"):
            return self.timeline is not None
        if action == "toggle_match":
            return self.display_settings.baseline is not None
        return self.ktop.source.live if action == "app.record" else True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action.startswith("timeline_"):  # in a typed line the keys are the line's
            return self._applies(action) and not isinstance(self.focused, Input)
        return self._applies(action)

    def action_losses(self) -> None:
        """L: each loss the header's total folds, with why it happens."""
        from ktop.ui.screens.losses import LossesScreen  # noqa: PLC0415 - on the first L only
        from ktop.units import format_span  # noqa: PLC0415

        def latest():  # what the header shows now (paused: the paused frame)
            snapshot = self.ktop.snapshot
            cost = ((tuple(snapshot.cost.bpf_panes.items()), snapshot.cost.bpf_every)
                    if snapshot and snapshot.cost else ((), 1))
            span = format_span(snapshot.duration_s if snapshot else 0)
            # The losses of the window the header shows, or since start with c.
            label = f"since start ({span})" if self.ktop.cumulative else f"in the last {span}"
            # Each pane named by its number on this screen (the panes chosen), not the
            # registry's.
            numbered = {spec.numbered_title: f"{n} {spec.title}"
                        for n, spec in enumerate(config.ordered(self.pane_order), 1)}
            lines = [(numbered.get(pane, pane), *rest) for pane, *rest in loss_lines(snapshot)]
            return lines, label, cost

        self.ktop.push_screen(LossesScreen(latest, min(self.ktop.interval_s, 1.0),
                                           changed=self.show_header))

    def action_mark_baseline(self) -> None:
        """b: the window shown now is the baseline; every pane compares with it."""
        from ktop.compare import baseline_of  # noqa: PLC0415

        snapshot = self.ktop.snapshot
        if snapshot is None:
            self.notify("no data yet to mark", severity="warning")
            return
        baseline = baseline_of(snapshot)
        self.set_baseline(baseline)
        move = "[ ] ← → move on" if self.timeline is not None else "the panes go on"
        self.notify(f"baseline {baseline.label}: {move}, each pane's first view shows the "
                    "change (B clears)", timeout=6, markup=False)

    def set_baseline(self, baseline: Baseline) -> None:
        """Every pane compares with `baseline` from now on (b, or --baseline once loaded)."""
        self.display_settings = replace(self.display_settings, baseline=baseline)
        self.refresh_bindings()  # m, matching the compared rows, applies now
        self.refresh_panes()

    def action_clear_baseline(self) -> None:
        if self.display_settings.baseline is None:
            self.notify("no baseline to clear: b marks one", severity="warning")
            return
        self.display_settings = replace(self.display_settings, baseline=None)
        self.notify("baseline cleared")
        self.refresh_bindings()
        self.refresh_panes()

    def action_focus_pane(self, name: str) -> None:
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
        order = self.pane_order
        current = order.index(self.focused_pane().PANE)
        self.action_focus_pane(order[(current + step) % len(order)])

    def action_toggle_idle(self) -> None:
        self.display_settings = replace(self.display_settings,
                                        show_idle=not self.display_settings.show_idle)
        self.notify("idle rows shown" if self.display_settings.show_idle else "idle rows hidden")
        self.refresh_panes()

    def action_cycle_view(self) -> None:
        pane = self.focused_pane()
        view = pane.cycle_view(self.ktop.snapshot, self.display_settings)
        label = pane.spec.key_label
        self.notify(f"{label}: {view}" if view else f"{label}: one view only")

    def action_toggle_match(self) -> None:
        pane = self.focused_pane()
        self.notify(f"{pane.spec.key_label}: "
                    f"{pane.toggle_match(self.ktop.snapshot, self.display_settings)}")

    def action_sort(self, step: int) -> None:
        label = self.focused_pane().table.cycle_sort(step)
        self.notify(f"sorted by {label}")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.focused_pane().table.filter_text
        box.display = True
        self._filter_target = self.focused_pane()
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter" and self._filter_target is not None:
            self._filter_target.table.set_filter(event.value)
            self.show_header()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter" and self._filter_target is not None:
            event.input.display = False
            self._filter_target.table.focus()
            self.refresh_panes()
        elif event.input.id == "timeline-prompt":
            self._timeline_answer(event.input)

    def on_key(self, event) -> None:
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
        if event.key == "escape" and box.has_focus and self._filter_target is not None:
            box.value = ""
            box.display = False
            self._filter_target.table.set_filter("")
            self._filter_target.table.focus()
            self.refresh_panes()
            event.stop()

    def action_zoom(self) -> None:
        self._set_zoom(None if self.zoomed else self.focused_pane().PANE)

    def _set_zoom(self, name: str | None) -> None:
        self.zoomed = name
        if name is not None:
            self.compact_pane = name  # leaving the zoom on a small screen keeps this pane
        self._show_layout()

    def on_pane_tabs_selected(self, message: PaneTabs.Selected) -> None:
        self.action_focus_pane(message.pane)

    def action_help(self) -> None:
        from ktop.ui.screens.help import HelpScreen  # noqa: PLC0415  (rich.table: not at start)

        bindings = [b for b in self.BINDINGS if isinstance(b, Binding) and self._applies(b.action)]
        keys = main_keys(bindings, self.timeline is not None, self.pane_order)
        pane = self.focused_pane()
        view = f", {pane.view} view (v: the others)" if len(pane.VIEWS) > 1 else ""
        if pane.comparing:
            view = ", compared with the baseline (v: the other views, m: match by pid or command)"
        self.ktop.push_screen(HelpScreen("ktop", keys, pane.column_help(),
                                         f"the columns of {pane.numbered_title}{view}"))

    # ---- drill-down ---------------------------------------------------------------------

    def on_keyed_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
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
            self.ktop.push_screen(target(self.ktop))
        return target is not None

    def action_filter_cgroup(self) -> None:
        """G: every pane shows the selected row's cgroup subtree alone; G again shows all."""
        if self.display_settings.cgroup is not None:
            self._set_cgroup(None)
            return
        pane = self.focused_pane()
        key = pane.table.selected_key
        row = pane.model_row(key) if key is not None else None
        cgroup = getattr(row, "cgroup", None)  # rows of several model types; some have one
        if not cgroup or cgroup.startswith("["):
            self.notify("no cgroup on this row: select a process, a lock task, "
                        "an I/O process or a cgroup (4, v)", severity="warning")
            return
        self._set_cgroup(cgroup)

    def _set_cgroup(self, cgroup: str | None) -> None:
        self.display_settings = replace(self.display_settings, cgroup=cgroup, cgroup_gone=False)
        self.refresh_panes()

    # ---- the replay's timeline ------------------------------------------------------------

    def _moving(self) -> Timeline:
        assert self.timeline is not None, "check_action offers the timeline keys with one only"
        return self.timeline

    def action_timeline_step(self, records: int) -> None:
        self._moving().step(records)
        self._timeline_moved()

    def action_timeline_seconds(self, seconds: float) -> None:
        self._moving().step_seconds(seconds)
        self._timeline_moved()

    def action_timeline_edge(self, last: int) -> None:
        timeline = self._moving()
        timeline.go_to(len(timeline.records) - 1 if last else 0)
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
        if self._prompt_return is not None:
            self._prompt_return.table.focus()

    def _timeline_answer(self, prompt: Input) -> None:
        from ktop.record.replay import parse_window  # noqa: PLC0415

        timeline = self._moving()
        self._close_prompt()
        text = prompt.value.strip()
        if not text:
            return
        try:
            if self._prompt_for == "time":
                timeline.go_to_time(text)
            else:
                timeline.set_window(parse_window(text, timeline.interval_s))
        except ValueError as e:
            self.notify(printable(str(e)), severity="warning", timeout=8, markup=False)
            return
        self._timeline_moved()

    def _timeline_moved(self) -> None:
        self.query_one("#timeline").show(self._moving().view())  # type: ignore[attr-defined]
        self.ktop.collect_timeline()
