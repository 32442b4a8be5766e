"""The drill-downs into a lock caller (its stacks, wait histogram, tasks, owners), a lock
(what it is, its owners and their stacks) and a process doing block I/O (its submitting
stacks, latency histogram, newest requests)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ktop.lockviews import (
    NO_OWNER_FIELD,
    OWNED_TYPES,
    LockOwner,
    lock_label,
    owners_of_caller,
    owners_of_lock,
)
from ktop.model import (
    OWNER_TASK,
    Bucket,
    LockAddress,
    LockCaller,
    Snapshot,
)
from ktop.stackmerge import (
    merge_lock_stacks,
    merge_lock_user_stacks,
)
from ktop.text import format_pid, printable
from ktop.ui.screens.drill import (
    DetailScreen,
    DrillHost,
    escaped,
    frame_line,
    heading,
    merged_note,
    offsets_title,
)
from ktop.ui.widgets.fit import MUST, Item, item
from ktop.units import count_of, format_bucket, format_ns


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

    def header_items(self) -> list[Item]:
        c = self.caller
        title = Text("lock waits at ", style="bold")
        title.append(printable(c.caller), style="bold cyan")
        window = self.snapshot.locks.window_s if self.snapshot.locks else 0.0
        waits = count_of(c.contended, "wait")
        return [Item(title, MUST), item(f"({printable(c.type)})", 60),
                item(f"{waits} {self.window_label(window)}", 90, short=f"{waits}", gap="   "),
                item(f"total {format_ns(c.total_wait_ns)}", 80, gap=", "),
                item(f"max {format_ns(c.max_wait_ns)}", 40, gap=", "),
                item(f"avg {format_ns(c.avg_wait_ns)}", 30, gap=", ")]

    def draw(self) -> None:
        c = self.caller
        self.header_widget().update(self.header())

        lines = [offsets_title("stacks that contended here", self.merge_offsets)]
        stacks = (merge_lock_stacks(c.stacks) if self.merge_offsets
                  else [(s, 1) for s in sorted(c.stacks, key=lambda s: -s.total_wait_ns)])
        for s, variants in stacks:
            head = Text(f"  {count_of(s.contended, 'wait')}, total {format_ns(s.total_wait_ns)},"
                        f" max {format_ns(s.max_wait_ns)}", style="bold")
            head.append(merged_note(variants), style="dim")
            lines.append(head)
            lines.extend(frame_line(frame) for frame in s.frames)
        if not c.stacks:
            lines.append(Text("  no kernel stacks kept for this caller", style="dim"))
        lines.append(Text(""))
        lines.extend(self._user_stack_lines(c))
        owners = (owners_of_caller(self.snapshot.locks, c.caller, c.type)
                  if self.snapshot.locks else [])
        self.query_one("#stack-list-text", Static).update(
            Group(*lines, _histogram_table("wait time distribution", c.hist_ns, 1),
                  _lock_tasks_table(c), Text(""), _owners_group(owners, c.type))
        )

    def _user_stack_lines(self, c: LockCaller) -> list[Text]:
        if not c.user_stacks:
            return []
        lines = [offsets_title("user-space stacks of the waiters", self.merge_offsets)]
        stacks = merge_lock_user_stacks(c.user_stacks) if self.merge_offsets else [
            (s, 1) for s in c.user_stacks
        ]
        for s, variants in stacks[:20]:
            head = Text(f"  {count_of(s.contended, 'wait')}, total {format_ns(s.total_wait_ns)}", style="bold")
            head.append(merged_note(variants), style="dim")
            lines.append(head)
            lines.extend(frame_line(f"[user] {f.symbol}  {f.module}", "green") for f in s.frames)
            if not s.frames:
                lines.append(frame_line("[no user stack]", "green"))
        lines.append(Text(""))
        return lines


def _lock_tasks_table(c: LockCaller) -> Group:
    tasks = Table(box=None)
    tasks.add_column("pid", justify="right")
    tasks.add_column("comm")
    tasks.add_column("contended", justify="right")
    tasks.add_column("total wait", justify="right")
    for t in sorted(c.tasks, key=lambda t: -t.total_wait_ns):
        tasks.add_row(format_pid(t.pid), escaped(t.comm), str(t.contended), format_ns(t.total_wait_ns))
    return Group(heading("tasks that waited"), tasks)


OWNER_STACKS_SHOWN = 5  # per owner, most wait first


def _owners_group(owners: list[LockOwner], lock_type: str) -> Group:
    """Who held the lock when the waits began, the waits charged to each, and each owner's
    stack when it woke a waiter (its unlock path); locks that keep no owner say so."""
    parts: list[Text | Table] = [heading("lock owners when the waits began (perf lock contention -o)")]
    if lock_type not in OWNED_TYPES:
        parts.append(Text(f"  {NO_OWNER_FIELD} ({printable(lock_type)})", style="dim"))
        return Group(*parts)
    if not owners:
        parts.append(Text("  none recorded for these waits", style="dim"))
        return Group(*parts)
    table = Table(box=None)
    for name, right in (("pid", True), ("owner", False), ("contended", True),
                        ("total wait", True), ("max wait", True)):
        table.add_column(name, justify="right" if right else "left")
    for o in owners:
        table.add_row(format_pid(o.pid) if o.owner == OWNER_TASK else "", escaped(o.comm),
                      str(o.contended), format_ns(o.total_wait_ns), format_ns(o.max_wait_ns))
    parts.append(table)
    for o in owners:
        if o.owner != OWNER_TASK:
            continue
        parts.append(Text(""))
        parts.append(Text(f"  owner {format_pid(o.pid)} {printable(o.comm)}: its stack when it "
                          "woke a waiter (the unlock path)", style="bold"))
        for st in o.stacks[:OWNER_STACKS_SHOWN]:
            head = Text(f"  {count_of(st.contended, 'wait')}, total {format_ns(st.total_wait_ns)}",
                        style="bold")
            if not st.frames:
                head.append(f"  stack {printable(st.note)}", style="dim")
            parts.append(head)
            parts.extend(frame_line(frame) for frame in st.frames)
        if len(o.stacks) > OWNER_STACKS_SHOWN:
            parts.append(Text(f"  ... {len(o.stacks) - OWNER_STACKS_SHOWN} more stacks", style="dim"))
    return Group(*parts)


class LockAddressScreen(DetailScreen):
    """One lock: what it is, and who held it while others waited (sleeping locks)."""

    TITLE = "Lock: name, owners"

    def __init__(self, lock: LockAddress, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.row = lock

    def still_present(self, snapshot: Snapshot) -> bool:
        found = next((lock for lock in (snapshot.locks.locks if snapshot.locks else ())
                      if lock.address == self.row.address and lock.type == self.row.type), None)
        if found is not None:
            self.row = found
        return found is not None

    def shown(self) -> object:
        window = self.snapshot.locks.window_s if self.snapshot.locks else 0.0
        return self.row, self.window_label(window)

    def header_items(self) -> list[Item]:
        lock = self.row
        title = Text("lock ", style="bold")
        title.append(printable(lock_label(lock) or "[unnamed]"), style="bold cyan")
        window = self.snapshot.locks.window_s if self.snapshot.locks else 0.0
        waits = count_of(lock.contended, "wait")
        kind = f"({printable(lock.type)})"
        return [Item(title, MUST),
                item(f"{printable(lock.address)} {kind}", 50, short=kind),
                item(f"{waits} {self.window_label(window)}", 90, short=f"{waits}", gap="   "),
                item(f"total {format_ns(lock.total_wait_ns)}", 80, gap=", "),
                item(f"max {format_ns(lock.max_wait_ns)}", 40, gap=", ")]

    def draw(self) -> None:
        self.header_widget().update(self.header())
        locks = self.snapshot.locks
        owners = owners_of_lock(locks, self.row.address, self.row.type) if locks else []
        parts: list[Text | Group] = []
        if locks is not None and locks.notes:
            parts.extend(Text(f"  {printable(note)}", style="dim") for note in locks.notes)
        parts.append(_owners_group(owners, self.row.type))
        self.query_one("#stack-list-text", Static).update(Group(*parts))


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
    return Group(heading(f"{what} (log2 buckets)"), table, Text(""))
