"""The drill-down into a hot function: its callers tree, callees tree, whole stacks, and the
processes whose samples landed in it."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static, Tree
from textual.widgets.tree import TreeNode

from ktop.model import (
    Snapshot,
    StackSample,
)
from ktop.stackmerge import merge_cpu_stacks
from ktop.stacktree import (
    CALLERS_DROPPED,
    TRUNCATED,
    StackNode,
    callees_tree,
    callers_tree,
    processes_hitting,
    unique_stacks,
)
from ktop.text import format_pid, printable
from ktop.ui.screens.drill import (
    COMMON_BINDINGS,
    DrillHost,
    DrillScreen,
    escaped,
    frame_line,
    merged_note,
)
from ktop.ui.widgets.fit import MUST, Item, item
from ktop.ui.widgets.footer import KeysFooter
from ktop.units import count_of


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
        *COMMON_BINDINGS,
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
        yield KeysFooter()

    def prepare(self) -> None:
        table = self.query_one("#stack-processes", DataTable)
        table.add_column(Text("PID", justify="right"), key="pid", width=8)
        table.add_column("COMM", key="comm", width=16)
        table.add_column(Text("samples", justify="right"), key="samples", width=8)
        table.add_column(Text("share", justify="right"), key="share", width=7)

    def focus_body(self) -> None:
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
        allowed = super().check_action(action, parameters)
        if not allowed or action not in self._TREE_ACTIONS | {"toggle_offsets"}:
            return allowed
        return (self.view == "stacks") == (action == "toggle_offsets")

    def header_items(self) -> list[Item]:
        cpu = self.snapshot.cpu
        hits = sum(s.samples for s in self._hits)
        title = Text(f"{self.view} of ", style="bold")
        title.append(printable(self.function), style="bold cyan")
        items = [Item(title, MUST)]
        if cpu:
            expected = cpu.sample_hz * cpu.window_s * cpu.cpus or 1
            share = f"{hits} samples, {100.0 * hits / expected:.2f}% of CPU time"
            items.append(item(f"{share} {self.window_label(cpu.window_s)}", 90,
                              short=share, gap="   "))
        hint = "o: merge/split offsets" if self.view == "stacks" else "+ - e E C: expand/collapse"
        items.append(item(f"v: callers/callees/stacks  {hint}  Esc: back", 10, "dim",
                          short="v: callers/callees/stacks", gap="   "))
        return items

    def draw(self, keep_tree: bool = True) -> None:
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
                escaped(comm),
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
            head = Text(f"{count_of(stack.samples, 'sample')}  pid {format_pid(stack.pid)} ", style="bold")
            head.append(printable(stack.comm), style="bold cyan")
            head.append(merged_note(variants), style="dim")
            lines = [head]
            modules = stack.modules or ("",) * len(stack.frames)
            sources = stack.sources or ("",) * len(stack.frames)
            for frame, module, source in zip(stack.frames, modules, sources):
                line = frame_line(f"{frame}  {module}")
                if source:
                    line.append(f"  {printable(source)}", style="cyan")
                lines.append(line)
            if stack.truncated:
                lines.append(Text(f"    {TRUNCATED}", style="yellow"))
            if stack.callers_dropped:
                lines.append(Text(f"    {CALLERS_DROPPED}", style="yellow"))
            for frame in stack.user_frames:
                lines.append(frame_line(f"[user] {frame.symbol}  {frame.module}", "green"))
            lines.append(Text(""))
            parts.extend(lines)
        cpu = self.snapshot.cpu
        if cpu and cpu.line_info and not any(s.sources for s in self._stacks()):
            parts.append(Text(cpu.line_info, style="dim"))  # said once, quietly
        return Group(*parts) if parts else Group(Text("no stacks"))

    def action_cycle_view(self) -> None:
        self.view = self.VIEWS[(self.VIEWS.index(self.view) + 1) % len(self.VIEWS)]
        if self.drawable():
            self.draw(keep_tree=False)
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


