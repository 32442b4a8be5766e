"""Drill-down screens: the call stacks behind a row.

Each screen follows the app's data as the pane it came from does (`space` freezes both), and
keeps showing what it had, marked stale, once its row has left the data. Stacks are one frame
a line, merged when they differ only in offsets of the same functions (`o` splits them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, Tree
from textual.widgets.tree import TreeNode

from ktop.model import (
    Bucket,
    IoProcess,
    IoRequest,
    IoSubmitStack,
    LockCaller,
    LockStack,
    LockUserStack,
    Snapshot,
    StackSample,
    UserFrame,
)
from ktop.stackmerge import call_path, group_by_call_path, merged_frames
from ktop.stacktree import (
    CALLERS_DROPPED,
    TRUNCATED,
    StackNode,
    callees_tree,
    callers_tree,
    processes_hitting,
    unique_stacks,
)
from ktop.text import format_pid, human_bytes, printable
from ktop.units import format_bucket, format_ns, format_span


class DrillHost(Protocol):
    """What a drill-down reads of the app under it (the app is one)."""

    @property
    def latest(self) -> Snapshot | None: ...  # the newest data, even while paused
    @property
    def paused(self) -> bool: ...
    @property
    def cumulative(self) -> bool: ...  # the figures are since start (key c)

_COMMON_BINDINGS = [
    Binding("escape,backspace", "back", "Back"),
    Binding("o", "toggle_offsets", "Offsets",
            tooltip="merge stacks that differ only in offsets of the same functions, or split them"),
    # In the help, not the footer: at 80 columns the footer keeps room for space and c.
    Binding("r", "refresh_data", "Refresh now (even paused)", show=False),
    Binding("s", "app.save", "Save SVG", show=False),
    Binding("question_mark,f1", "help", "Help"),
    Binding("q", "app.quit", "Quit", show=False),
]


def _safe(text: str, style: str = "") -> Text:
    return Text(printable(text), style=style)


def _frame_line(frame: str, style: str = "") -> Text:
    """One frame a line, cut at the screen's edge rather than wrapped into the next."""
    return Text(f"    {printable(frame)}", style=style, no_wrap=True, overflow="ellipsis")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _merged_note(variants: int) -> str:
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

    def still_present(self, snapshot: Snapshot) -> bool:
        """Whether the row is in `snapshot`; if so, the screen takes its new figures."""
        raise NotImplementedError

    def header(self) -> Text:
        """The line above the body: what this is, its figures, and PAUSED or STALE."""
        raise NotImplementedError

    def show_paused(self) -> None:
        """Space, pressed here or on the panes: the header says so (the body stays)."""
        if self.is_mounted:
            self.header_widget().update(self.header())

    def shown(self) -> object:
        """What the body is drawn from: an unchanged value is not drawn again."""
        raise NotImplementedError

    def rebuild(self) -> None:
        raise NotImplementedError

    def follow(self, snapshot: Snapshot) -> None:
        """A new snapshot, as the panes get each refresh: redrawn only if what this screen
        shows changed; a row gone from it keeps its last figures, marked stale."""
        before, was_stale = self.shown(), self.stale
        if self.still_present(snapshot):
            self.snapshot, self.stale = snapshot, False
        else:
            self.stale = True
        if self.stale != was_stale or self.shown() != before:
            self.rebuild()

    def window_label(self, window_s: float) -> str:
        """Over what time the figures are: the pane's window, or since start (key c)."""
        return "since start" if self.host.cumulative else f"in the last {format_span(window_s)}"

    def action_back(self) -> None:
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
        from ktop.screens.help import HelpScreen, bindings_help

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

    def stale_text(self) -> Text:
        """PAUSED (space) and STALE, as the panes' header says them."""
        text = Text()
        if self.host.paused:
            text.append("  PAUSED (space resumes)", style="bold reverse")
        if self.stale:
            text.append("  STALE: no longer in the latest data", style="bold reverse yellow")
        return text


class FunctionScreen(DrillScreen):
    """A hot function: its callers tree, callees tree, whole stacks, and who hit it."""

    TITLE = "Hot function: callers, callees, stacks"
    VIEWS = ("callers", "callees", "stacks")
    BINDINGS = [
        Binding("v,tab", "cycle_view", "Callers/callees/stacks", priority=True),
        Binding("plus", "expand_one", "Expand"),
        Binding("minus", "collapse_one", "Collapse"),
        Binding("e", "expand_branch", "Expand branch"),
        Binding("E", "expand_all", "Expand all"),
        Binding("C", "collapse_all", "Collapse all"),
        *_COMMON_BINDINGS,
    ]

    def __init__(self, function: str, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.function = function
        self.view = "callers"
        self._hits: tuple[StackSample, ...] = self._find(snapshot)

    def compose(self) -> ComposeResult:
        yield Static(id="stack-header")
        with Vertical(id="stack-body"):
            yield Tree(Text(self.function), id="stack-tree")
            with VerticalScroll(id="stack-list"):
                yield Static(id="stack-list-text")
            yield DataTable(id="stack-processes", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#stack-processes", DataTable)
        table.add_column(Text("PID", justify="right"), key="pid", width=8)
        table.add_column("COMM", key="comm", width=16)
        table.add_column(Text("samples", justify="right"), key="samples", width=8)
        table.add_column(Text("share", justify="right"), key="share", width=7)
        self.rebuild()
        self.query_one(Tree).focus()

    def _find(self, snapshot: Snapshot) -> tuple[StackSample, ...]:
        return tuple(unique_stacks(self.function, snapshot.cpu.stacks if snapshot.cpu else ()))

    def still_present(self, snapshot: Snapshot) -> bool:
        hits = self._find(snapshot)
        if hits:
            self._hits = hits
        return bool(hits)

    def shown(self) -> object:
        return self._hits, self.header().plain

    def _stacks(self) -> tuple[StackSample, ...]:
        """The stacks that landed in the function: all the trees and tables need."""
        return self._hits

    _TREE_ACTIONS = frozenset({"expand_one", "collapse_one", "expand_branch", "expand_all",
                               "collapse_all"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The trees merge by function already: offsets are split or merged in stacks alone,
        # and the stacks view has no branches to open.
        if action == "toggle_offsets":
            return self.view == "stacks"
        return self.view != "stacks" if action in self._TREE_ACTIONS else True

    def header(self) -> Text:
        cpu = self.snapshot.cpu
        hits = sum(s.samples for s in self._hits)
        text = Text()
        text.append(f"{self.view} of ", style="bold")
        text.append(printable(self.function), style="bold cyan")
        if cpu:
            expected = cpu.sample_hz * cpu.window_s * cpu.cpus or 1
            text.append(
                f"   {hits} samples, {100.0 * hits / expected:.2f}% of CPU time"
                f" {self.window_label(cpu.window_s)}"
            )
        hint = "o: merge/split offsets" if self.view == "stacks" else "+ - e E C: expand/collapse"
        text.append(f"   v: callers/callees/stacks  {hint}  Esc: back", style="dim")
        text.append_text(self.stale_text())
        return text

    def rebuild(self, keep_tree: bool = True) -> None:
        self.header_widget().update(self.header())
        tree = self.query_one(Tree)
        listing = self.query_one("#stack-list", VerticalScroll)
        tree.display = self.view != "stacks"
        listing.display = self.view == "stacks"
        if self.view == "stacks":
            self.query_one("#stack-list-text", Static).update(self._stacks_text())
        else:
            # New figures keep the branches the user opened or closed and the cursor's node.
            state = _tree_state(tree) if keep_tree and tree.root.data is not None else None
            build = callers_tree if self.view == "callers" else callees_tree
            root = build(self.function, self._stacks())
            tree.clear()
            tree.root.set_label(_node_label(root, root.samples))
            tree.root.data = root
            _add_children(tree.root, root, root.samples, depth=64)
            tree.root.expand()
            if state is not None:
                _restore_tree_state(tree, *state)
        self._fill_processes()

    def _fill_processes(self) -> None:
        table = self.query_one("#stack-processes", DataTable)
        cursor = table.cursor_row
        table.clear()
        hits = processes_hitting(self.function, self._stacks())
        total = sum(n for _, _, n in hits) or 1
        for pid, comm, samples in hits:
            table.add_row(
                Text(format_pid(pid), justify="right"),
                _safe(comm),
                Text(str(samples), justify="right"),
                Text(f"{100.0 * samples / total:.1f}%", justify="right"),
                key=f"{pid}|{comm}",
            )
        if cursor and table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1), animate=False)

    def _stacks_text(self) -> Group:
        parts = []
        stacks = (merge_cpu_stacks(self._stacks()) if self.merge_offsets
                  else [(s, 1) for s in self._stacks()])
        for stack, variants in stacks:
            head = Text(f"{_count(stack.samples, 'sample')}  pid {format_pid(stack.pid)} ", style="bold")
            head.append(printable(stack.comm), style="bold cyan")
            head.append(_merged_note(variants), style="dim")
            lines = [head]
            modules = stack.modules or ("",) * len(stack.frames)
            sources = stack.sources or ("",) * len(stack.frames)
            for frame, module, source in zip(stack.frames, modules, sources):
                line = _frame_line(f"{frame}  {module}")
                if source:
                    line.append(f"  {printable(source)}", style="cyan")
                lines.append(line)
            if stack.truncated:
                lines.append(Text(f"    {TRUNCATED}", style="yellow"))
            if stack.callers_dropped:
                lines.append(Text(f"    {CALLERS_DROPPED}", style="yellow"))
            for frame in stack.user_frames:
                lines.append(_frame_line(f"[user] {frame.symbol}  {frame.module}", "green"))
            lines.append(Text(""))
            parts.extend(lines)
        cpu = self.snapshot.cpu
        if cpu and cpu.line_info and not any(s.sources for s in self._stacks()):
            parts.append(Text(cpu.line_info, style="dim"))  # said once, quietly
        return Group(*parts) if parts else Group(Text("no stacks"))

    def action_cycle_view(self) -> None:
        self.view = self.VIEWS[(self.VIEWS.index(self.view) + 1) % len(self.VIEWS)]
        self.rebuild(keep_tree=False)
        self.refresh_bindings()  # `o` is the stacks view's alone

    def _cursor(self) -> TreeNode | None:
        return self.query_one(Tree).cursor_node

    def action_expand_one(self) -> None:
        node = self._cursor()
        if node is not None:
            _ensure_children(node)
            node.expand()

    def action_collapse_one(self) -> None:
        node = self._cursor()
        if node is not None:
            node.collapse()

    def action_expand_branch(self) -> None:
        node = self._cursor()
        if node is not None:
            _ensure_children(node, depth=10_000)
            node.expand_all()

    def action_expand_all(self) -> None:
        root = self.query_one(Tree).root
        _ensure_children(root, depth=10_000)
        root.expand_all()

    def action_collapse_all(self) -> None:
        root = self.query_one(Tree).root
        root.collapse_all()
        root.expand()

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        _ensure_children(event.node)


def _node_label(node: StackNode, total: int) -> Text:
    share = 100.0 * node.samples / total if total else 0.0
    label = Text(f"{share:6.2f}% {node.samples:>6}  ", style="bold" if share >= 10 else "")
    if node.user:
        label.append("[user] ", style="green")
    label.append(printable(node.name), style="green" if node.user else "")
    return label


def merge_cpu_stacks(stacks: Sequence[StackSample]) -> list[tuple[StackSample, int]]:
    """Stacks of one process whose kernel and user frames differ only in offsets, as one
    (with how many there were), most samples first."""
    merged = []
    for group in group_by_call_path(
        stacks,
        lambda s: (s.pid, s.comm, s.truncated, s.callers_dropped, call_path(s.frames),
                   call_path(f.symbol for f in s.user_frames)),
    ):
        first = group[0]
        users = merged_frames([[f.symbol for f in s.user_frames] for s in group])
        merged.append((
            replace(
                first,
                samples=sum(s.samples for s in group),
                frames=merged_frames([s.frames for s in group]),
                sources=tuple(
                    source if all(s.sources[i] == source for s in group if s.sources) else ""
                    for i, source in enumerate(first.sources)
                ),
                user_frames=tuple(UserFrame(name, f.module)
                                  for name, f in zip(users, first.user_frames)),
            ),
            len(group),
        ))
    return sorted(merged, key=lambda pair: -pair[0].samples)


def _node_path(node: TreeNode) -> tuple[str, ...]:
    """A tree node named by the functions from the root down to it."""
    names = []
    while node.parent is not None:
        data = node.data
        names.append(("u:" if data.user else "k:") + data.name if data else "")
        node = node.parent
    return tuple(reversed(names))


def _tree_nodes(node: TreeNode):
    yield node
    for child in node.children:
        yield from _tree_nodes(child)


def _tree_state(tree: Tree) -> tuple[set[tuple[str, ...]], tuple[str, ...] | None]:
    """The open branches and the cursor's node, by path."""
    opened = {_node_path(n) for n in _tree_nodes(tree.root) if n.is_expanded}
    cursor = tree.cursor_node
    return opened, _node_path(cursor) if cursor is not None else None


def _restore_tree_state(tree: Tree, opened: set[tuple[str, ...]], cursor: tuple[str, ...] | None) -> None:
    todo = [tree.root]
    while todo:
        node = todo.pop()
        path = _node_path(node)
        if path in opened:
            _ensure_children(node)
            node.expand()
            todo.extend(node.children)
        elif node.is_expanded:
            node.collapse()  # a hot branch the user closed stays closed
        if path == cursor:  # its line is known once the tree has drawn its new nodes
            tree.call_after_refresh(tree.move_cursor, node)


HOT_PATH_SHARE = 0.05  # branches with at least this share of samples open expanded


def _add_children(parent: TreeNode, node: StackNode, total: int, depth: int) -> None:
    """Tree nodes are made lazily: hot branches now and expanded, the rest when opened."""
    for child in node.sorted_children():
        item = parent.add(_node_label(child, total), data=child, allow_expand=bool(child.children))
        if depth > 1 and child.children and child.samples >= HOT_PATH_SHARE * total:
            _add_children(item, child, total, depth - 1)
            item.expand()


def _ensure_children(item: TreeNode, depth: int = 1) -> None:
    node: StackNode | None = item.data
    if node is None:
        return
    tree_root = item
    while tree_root.parent is not None:
        tree_root = tree_root.parent
    total = tree_root.data.samples if tree_root.data else node.samples
    if not item.children and node.children:
        _add_children(item, node, total, depth)
    elif depth > 1:
        for child in item.children:
            _ensure_children(child, depth - 1)


class DetailScreen(DrillScreen):
    """A drill-down that is a scrollable page of stacks and tables under a header line."""

    BINDINGS = list(_COMMON_BINDINGS)

    def compose(self) -> ComposeResult:
        yield Static(id="stack-header")
        with VerticalScroll(id="stack-list"):
            yield Static(id="stack-list-text")
        yield Footer()

    def on_mount(self) -> None:
        self.rebuild()
        self.query_one("#stack-list", VerticalScroll).focus()


def merge_lock_stacks(stacks: Sequence[LockStack]) -> list[tuple[LockStack, int]]:
    """Kernel stacks of the same functions as one (with how many there were), most wait first."""
    merged = [
        (LockStack(merged_frames([s.frames for s in group]),
                   sum(s.contended for s in group), sum(s.total_wait_ns for s in group),
                   max(s.max_wait_ns for s in group)), len(group))
        for group in group_by_call_path(stacks, lambda s: call_path(s.frames))
    ]
    return sorted(merged, key=lambda pair: -pair[0].total_wait_ns)


def merge_lock_user_stacks(stacks: Sequence[LockUserStack]) -> list[tuple[LockUserStack, int]]:
    merged = []
    for group in group_by_call_path(stacks, lambda s: call_path(f.symbol for f in s.frames)):
        names = merged_frames([[f.symbol for f in s.frames] for s in group])
        frames = tuple(UserFrame(name, f.module) for name, f in zip(names, group[0].frames))
        merged.append((LockUserStack(frames, sum(s.contended for s in group),
                                     sum(s.total_wait_ns for s in group)), len(group)))
    return sorted(merged, key=lambda pair: -pair[0].total_wait_ns)


def merge_io_stacks(stacks: Sequence[IoSubmitStack]) -> list[tuple[IoSubmitStack, int]]:
    merged = [
        (IoSubmitStack(merged_frames([s.frames for s in group]), sum(s.requests for s in group)),
         len(group))
        for group in group_by_call_path(stacks, lambda s: call_path(s.frames))
    ]
    return sorted(merged, key=lambda pair: -pair[0].requests)


def _title(text: str, merge: bool) -> Text:
    title = Text(text, style="bold", no_wrap=True, overflow="ellipsis")
    title.append("   offsets merged: o splits" if merge else "   offsets apart: o merges", style="dim")
    return title


class LockCallerScreen(DetailScreen):
    """A lock caller: the whole stacks that contended there, the wait histogram, the tasks."""

    TITLE = "Lock caller: stacks, waits, tasks"

    def __init__(self, caller: LockCaller, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.caller = caller

    def _find(self, snapshot: Snapshot) -> LockCaller | None:
        if snapshot.locks is None:
            return None
        return next(
            (c for c in snapshot.locks.callers
             if c.caller == self.caller.caller and c.type == self.caller.type),
            None,
        )

    def still_present(self, snapshot: Snapshot) -> bool:
        found = self._find(snapshot)
        if found is not None:
            self.caller = found
        return found is not None

    def shown(self) -> object:
        window = self.snapshot.locks.window_s if self.snapshot.locks else 0.0
        return self.caller, self.window_label(window)

    def header(self) -> Text:
        c = self.caller
        text = Text()
        text.append("lock waits at ", style="bold")
        text.append(printable(c.caller), style="bold cyan")
        window = self.snapshot.locks.window_s if self.snapshot.locks else 0.0
        text.append(
            f"  ({c.type})   {_count(c.contended, 'wait')} {self.window_label(window)},"
            f" total {format_ns(c.total_wait_ns)}, max {format_ns(c.max_wait_ns)},"
            f" avg {format_ns(c.avg_wait_ns)}"
        )
        text.append_text(self.stale_text())
        return text

    def rebuild(self) -> None:
        c = self.caller
        self.header_widget().update(self.header())

        lines = [_title("stacks that contended here", self.merge_offsets)]
        stacks = (merge_lock_stacks(c.stacks) if self.merge_offsets
                  else [(s, 1) for s in sorted(c.stacks, key=lambda s: -s.total_wait_ns)])
        for s, variants in stacks:
            head = Text(f"  {_count(s.contended, 'wait')}, total {format_ns(s.total_wait_ns)},"
                        f" max {format_ns(s.max_wait_ns)}", style="bold")
            head.append(_merged_note(variants), style="dim")
            lines.append(head)
            lines.extend(_frame_line(frame) for frame in s.frames)
        if not c.stacks:
            lines.append(Text("  no kernel stacks kept for this caller", style="dim"))
        lines.append(Text(""))
        lines.extend(self._user_stack_lines(c))
        self.query_one("#stack-list-text", Static).update(
            Group(*lines, _histogram_table("wait time distribution", c.hist_ns, 1), _lock_tasks_table(c))
        )

    def _user_stack_lines(self, c: LockCaller) -> list[Text]:
        if not c.user_stacks:
            return []
        lines = [_title("user-space stacks of the waiters", self.merge_offsets)]
        stacks = merge_lock_user_stacks(c.user_stacks) if self.merge_offsets else [
            (s, 1) for s in c.user_stacks
        ]
        for s, variants in stacks[:20]:
            head = Text(f"  {_count(s.contended, 'wait')}, total {format_ns(s.total_wait_ns)}", style="bold")
            head.append(_merged_note(variants), style="dim")
            lines.append(head)
            lines.extend(_frame_line(f"[user] {f.symbol}  {f.module}", "green") for f in s.frames)
            if not s.frames:
                lines.append(_frame_line("[no user stack]", "green"))
        lines.append(Text(""))
        return lines


def _heading(text: str) -> Text:
    """A table's title on a line of its own: a Rich title wraps to the table's width."""
    return Text(text, style="bold", no_wrap=True, overflow="ellipsis")


def _lock_tasks_table(c: LockCaller) -> Group:
    tasks = Table(box=None)
    tasks.add_column("pid", justify="right")
    tasks.add_column("comm")
    tasks.add_column("contended", justify="right")
    tasks.add_column("total wait", justify="right")
    for t in sorted(c.tasks, key=lambda t: -t.total_wait_ns):
        tasks.add_row(format_pid(t.pid), _safe(t.comm), str(t.contended), format_ns(t.total_wait_ns))
    return Group(_heading("tasks that waited"), tasks)


def _histogram_table(what: str, buckets: tuple[Bucket, ...], ns_per_unit: int) -> Group:
    """A log2 histogram whose buckets count in ns (locks) or us (block I/O), shown alike."""
    table = Table(box=None)
    table.add_column("range", justify="right")
    table.add_column("count", justify="right")
    table.add_column("distribution")
    peak = max((b.count for b in buckets), default=0) or 1
    for b in buckets:
        table.add_row(format_bucket(b.low * ns_per_unit, b.high * ns_per_unit), str(b.count),
                      "█" * round(40 * b.count / peak))
    return Group(_heading(f"{what} (log2 buckets)"), table, Text(""))


RECENT_REQUESTS = 50  # of one process, newest first


class IoProcessScreen(DetailScreen):
    """A process doing block I/O: the kernel stacks that submitted it, latencies, requests."""

    TITLE = "Block I/O of a process: stacks, latency, requests"

    def __init__(self, process: IoProcess, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.process = process

    def still_present(self, snapshot: Snapshot) -> bool:
        p = self.process
        found = next(
            (x for x in (snapshot.blockio.processes if snapshot.blockio else ())
             if (x.pid, x.disk, x.rw) == (p.pid, p.disk, p.rw)),
            None,
        )
        if found is not None:
            self.process = found
        return found is not None

    def _recent(self) -> list[IoRequest]:
        p = self.process
        return [r for r in (self.snapshot.blockio.requests if self.snapshot.blockio else ())
                if (r.pid, r.disk, r.rw) == (p.pid, p.disk, p.rw)][:RECENT_REQUESTS]

    def shown(self) -> object:
        window = self.snapshot.blockio.window_s if self.snapshot.blockio else 0.0
        return self.process, self._recent(), self.window_label(window)

    def header(self) -> Text:
        p = self.process
        text = Text()
        text.append("block I/O of ", style="bold")
        text.append(f"{format_pid(p.pid)} ", style="bold")
        text.append(printable(p.comm), style="bold cyan")
        window = self.snapshot.blockio.window_s if self.snapshot.blockio else 0.0
        text.append(
            f"  {p.disk} {'reads' if p.rw == 'R' else 'writes'} {self.window_label(window)}:"
            f" {_count(p.requests, 'request')}, {human_bytes(p.bytes)}B,"
            f" avg size {human_bytes(p.bytes / p.requests if p.requests else 0)}B,"
            f" avg {format_ns(p.avg_lat_ms * 1e6)} (queue {format_ns(p.avg_queue_ms * 1e6)})"
        )
        text.append_text(self.stale_text())
        return text

    def rebuild(self) -> None:
        p = self.process
        self.header_widget().update(self.header())

        lines = [_title("kernel stacks that submitted the I/O", self.merge_offsets)]
        stacks = (merge_io_stacks(p.stacks) if self.merge_offsets
                  else [(s, 1) for s in sorted(p.stacks, key=lambda s: -s.requests)])
        for s, variants in stacks:
            head = Text(f"  {_count(s.requests, 'request')}", style="bold")
            head.append(_merged_note(variants), style="dim")
            lines.append(head)
            lines.extend(_frame_line(frame) for frame in s.frames)
        if not p.stacks:
            lines.append(Text("  no kernel stacks kept for this process", style="dim"))
        lines.append(Text(""))
        requests = Table(box=None)
        for name in ("TIME(s)", "DISK", "T", "SECTOR", "BYTES", "QUE(ms)", "LAT(ms)"):
            requests.add_column(name, justify="left" if name in ("DISK", "T") else "right")
        recent = self._recent()
        for r in recent:
            requests.add_row(f"{r.time_s:.6f}", r.disk, r.rw, str(r.sector), str(r.bytes),
                             f"{r.queue_ms:.3f}", f"{r.lat_ms:.3f}")
        parts = [*lines, _histogram_table("latency distribution of this process", p.hist_us, 1000),
                 _heading("recent requests of this process"), requests]
        if not recent:
            parts.append(Text("  none completed in the window", style="dim"))
        self.query_one("#stack-list-text", Static).update(Group(*parts))
