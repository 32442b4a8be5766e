"""Drill-down screens: the call stacks behind a row.

Each screen renders the snapshot it was opened with, so what the user drilled into does not
change under them; `r` refreshes from the latest snapshot (and says so if the row is gone).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, Tree
from textual.widgets.tree import TreeNode

from ktop.model import Bucket, IoProcess, LockCaller, Snapshot
from ktop.stacktree import (
    StackNode,
    callees_tree,
    callers_tree,
    function_name,
    processes_hitting,
    unique_stacks,
)
from ktop.text import format_pid, printable
from ktop.units import format_ns, format_span

LatestSnapshot = Callable[[], "Snapshot | None"]

_COMMON_BINDINGS = [
    Binding("escape,backspace", "back", "Back"),
    Binding("r", "refresh_data", "Refresh"),
    Binding("s", "app.save", "Save SVG"),
    Binding("question_mark,f1", "help", "Help"),
    Binding("q", "app.quit", "Quit"),
]


def _safe(text: str, style: str = "") -> Text:
    return Text(printable(text), style=style)


class DrillScreen(Screen[None]):
    """What every drill-down shares: a header line, back, refresh, help."""

    def __init__(self, snapshot: Snapshot, latest: LatestSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot
        self._latest = latest
        self.stale = False

    def header(self) -> Text:
        raise NotImplementedError

    def still_present(self, snapshot: Snapshot) -> bool:
        raise NotImplementedError

    def rebuild(self) -> None:
        raise NotImplementedError

    def action_back(self) -> None:
        self.dismiss(None)

    def action_refresh_data(self) -> None:
        latest = self._latest()
        if latest is None:
            return
        if self.still_present(latest):
            self.snapshot, self.stale = latest, False
        else:
            self.stale = True  # keep the data it had, marked as such
            self.notify("gone from the latest data: showing what it had", severity="warning")
        self.rebuild()

    def action_help(self) -> None:
        from ktop.screens.help import HelpScreen, bindings_help

        self.app.push_screen(HelpScreen(type(self).__name__, bindings_help(list(self.BINDINGS))))

    def header_widget(self) -> Static:
        return self.query_one("#stack-header", Static)

    def stale_text(self) -> Text:
        return Text("  STALE: no longer in the latest data", style="bold reverse yellow") if self.stale else Text()


class FunctionScreen(DrillScreen):
    """A hot function: its callers tree, callees tree, whole stacks, and who hit it."""

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

    def __init__(self, function: str, snapshot: Snapshot, latest: LatestSnapshot) -> None:
        super().__init__(snapshot, latest)
        self.function = function
        self.view = "callers"

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

    def still_present(self, snapshot: Snapshot) -> bool:
        return bool(snapshot.cpu) and any(
            s.frames and function_name(s.frames[0]) == self.function for s in snapshot.cpu.stacks
        )

    def _stacks(self):
        return self.snapshot.cpu.stacks if self.snapshot.cpu else ()

    def header(self) -> Text:
        cpu = self.snapshot.cpu
        hits = sum(s.samples for s in unique_stacks(self.function, self._stacks()))
        text = Text()
        text.append(f"{self.view} of ", style="bold")
        text.append(printable(self.function), style="bold cyan")
        if cpu:
            expected = cpu.sample_hz * cpu.window_s * cpu.cpus or 1
            text.append(
                f"   {hits} samples, {100.0 * hits / expected:.2f}% of CPU time"
                f" in {format_span(cpu.window_s)}"
            )
        text.append("   v: callers/callees/stacks  + - e E C: expand/collapse  r: refresh  Esc: back",
                    style="dim")
        text.append_text(self.stale_text())
        return text

    def rebuild(self) -> None:
        self.header_widget().update(self.header())
        tree = self.query_one(Tree)
        listing = self.query_one("#stack-list", VerticalScroll)
        tree.display = self.view != "stacks"
        listing.display = self.view == "stacks"
        if self.view == "stacks":
            self.query_one("#stack-list-text", Static).update(self._stacks_text())
        else:
            build = callers_tree if self.view == "callers" else callees_tree
            root = build(self.function, self._stacks())
            tree.clear()
            tree.root.set_label(_node_label(root, root.samples))
            tree.root.data = root
            _add_children(tree.root, root, root.samples, depth=64)
            tree.root.expand()
        self._fill_processes()

    def _fill_processes(self) -> None:
        table = self.query_one("#stack-processes", DataTable)
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

    def _stacks_text(self) -> Group:
        parts = []
        for stack in unique_stacks(self.function, self._stacks()):
            head = Text(f"{stack.samples} samples  pid {format_pid(stack.pid)} ", style="bold")
            head.append(printable(stack.comm), style="bold cyan")
            lines = [head]
            modules = stack.modules or ("",) * len(stack.frames)
            sources = stack.sources or ("",) * len(stack.frames)
            for frame, module, source in zip(stack.frames, modules, sources):
                line = Text(f"    {printable(frame)}  {module}")
                if source:
                    line.append(f"  {printable(source)}", style="cyan")
                lines.append(line)
            if stack.truncated:
                lines.append(Text("    [truncated: deeper than the collected depth]", style="yellow"))
            for frame in stack.user_frames:
                lines.append(Text(f"    [user] {printable(frame.symbol)}  {printable(frame.module)}",
                                  style="green"))
            lines.append(Text(""))
            parts.extend(lines)
        cpu = self.snapshot.cpu
        if cpu and cpu.line_info and not any(s.sources for s in self._stacks()):
            parts.append(Text(cpu.line_info, style="dim"))  # said once, quietly
        return Group(*parts) if parts else Group(Text("no stacks"))

    def action_cycle_view(self) -> None:
        self.view = self.VIEWS[(self.VIEWS.index(self.view) + 1) % len(self.VIEWS)]
        self.rebuild()

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
    """A drill-down that is a scrollable page of tables under a header line."""

    BINDINGS = list(_COMMON_BINDINGS)

    def compose(self) -> ComposeResult:
        yield Static(id="stack-header")
        with VerticalScroll(id="stack-list"):
            yield Static(id="stack-list-text")
        yield Footer()

    def on_mount(self) -> None:
        self.rebuild()
        self.query_one("#stack-list", VerticalScroll).focus()


class LockCallerScreen(DetailScreen):
    """A lock caller: the whole stacks that contended there, the wait histogram, the tasks."""

    def __init__(self, caller: LockCaller, snapshot: Snapshot, latest: LatestSnapshot) -> None:
        super().__init__(snapshot, latest)
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

    def rebuild(self) -> None:
        c = self.caller
        text = Text()
        text.append("lock waits at ", style="bold")
        text.append(printable(c.caller), style="bold cyan")
        text.append(
            f"  ({c.type})   {c.contended} waits, total {format_ns(c.total_wait_ns)},"
            f" max {format_ns(c.max_wait_ns)}, avg {format_ns(c.avg_wait_ns)}"
        )
        text.append("   r: refresh  Esc: back", style="dim")
        text.append_text(self.stale_text())
        self.header_widget().update(text)

        stacks = Table(title="stacks that contended here", title_justify="left", box=None, expand=True)
        stacks.add_column("contended", justify="right")
        stacks.add_column("total wait", justify="right")
        stacks.add_column("max wait", justify="right")
        stacks.add_column("stack (innermost first)")
        for s in sorted(c.stacks, key=lambda s: -s.total_wait_ns):
            stacks.add_row(
                str(s.contended), format_ns(s.total_wait_ns), format_ns(s.max_wait_ns),
                _safe("\n".join(s.frames)),
            )
            stacks.add_row("", "", "", "")
        self.query_one("#stack-list-text", Static).update(
            Group(stacks, _user_stacks_table(c), _histogram_table("wait time", c.hist_ns, "ns"),
                  _lock_tasks_table(c))
        )


def _user_stacks_table(c: LockCaller) -> Table:
    table = Table(title="user-space stacks of the waiters", title_justify="left", box=None,
                  expand=True)
    table.add_column("contended", justify="right")
    table.add_column("total wait", justify="right")
    table.add_column("user stack (innermost first)")
    for s in c.user_stacks[:20]:
        lines = "\n".join(f"[user] {f.symbol}  {f.module}" for f in s.frames) or "[no user stack]"
        table.add_row(str(s.contended), format_ns(s.total_wait_ns), _safe(lines, "green"))
        table.add_row("", "", "")
    return table


def _lock_tasks_table(c: LockCaller) -> Table:
    tasks = Table(title="tasks that waited", title_justify="left", box=None)
    tasks.add_column("pid", justify="right")
    tasks.add_column("comm")
    tasks.add_column("contended", justify="right")
    tasks.add_column("total wait", justify="right")
    for t in sorted(c.tasks, key=lambda t: -t.total_wait_ns):
        tasks.add_row(format_pid(t.pid), _safe(t.comm), str(t.contended), format_ns(t.total_wait_ns))
    return tasks


def _histogram_table(what: str, buckets: tuple[Bucket, ...], unit: str) -> Table:
    table = Table(title=f"{what} distribution (log2 buckets, {unit})", title_justify="left", box=None)
    table.add_column(f"{unit} range", justify="right")
    table.add_column("count", justify="right")
    table.add_column("distribution")
    peak = max((b.count for b in buckets), default=0) or 1
    for b in buckets:
        table.add_row(f"{b.low} -> {b.high}", str(b.count), "█" * round(40 * b.count / peak))
    return table


class IoProcessScreen(DetailScreen):
    """A process doing block I/O: the kernel stacks that submitted it, latencies, requests."""

    def __init__(self, process: IoProcess, snapshot: Snapshot, latest: LatestSnapshot) -> None:
        super().__init__(snapshot, latest)
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

    def rebuild(self) -> None:
        p = self.process
        text = Text()
        text.append("block I/O of ", style="bold")
        text.append(f"{format_pid(p.pid)} ", style="bold")
        text.append(printable(p.comm), style="bold cyan")
        text.append(
            f"  {p.disk} {'reads' if p.rw == 'R' else 'writes'}: {p.requests} requests,"
            f" {p.bytes // 1024} KiB, avg {p.avg_lat_ms:.3f} ms (queue {p.avg_queue_ms:.3f} ms)"
        )
        text.append("   r: refresh  Esc: back", style="dim")
        text.append_text(self.stale_text())
        self.header_widget().update(text)

        stacks = Table(title="kernel stacks that submitted the I/O", title_justify="left",
                       box=None, expand=True)
        stacks.add_column("requests", justify="right")
        stacks.add_column("stack (innermost first)")
        for s in sorted(p.stacks, key=lambda s: -s.requests):
            stacks.add_row(str(s.requests), _safe("\n".join(s.frames)))
            stacks.add_row("", "")
        requests = Table(title="recent requests", title_justify="left", box=None)
        for name in ("TIME(s)", "DISK", "T", "SECTOR", "BYTES", "QUE(ms)", "LAT(ms)"):
            requests.add_column(name, justify="left" if name in ("DISK", "T") else "right")
        recent = [r for r in (self.snapshot.blockio.requests if self.snapshot.blockio else ())
                  if r.pid == p.pid]
        for r in recent[:50]:
            requests.add_row(f"{r.time_s:.6f}", r.disk, r.rw, str(r.sector), str(r.bytes),
                             f"{r.queue_ms:.3f}", f"{r.lat_ms:.3f}")
        self.query_one("#stack-list-text", Static).update(
            Group(stacks, _histogram_table("latency", p.hist_us, "us"), requests)
        )
