"""Lock contention, as `perf lock contention` prints it, by caller, lock address, task,
owner (-o) or lock name."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ktop.cgroups import short_name
from ktop.lockviews import (
    UNNAMED,
    LockName,
    LockOwner,
    caller_waits_of,
    lock_label,
    locks_by_name,
    owners_by_task,
)
from ktop.model import OWNER_TASK, PANE_LOCKS, LockAddress, LockCaller, LockTask, Snapshot
from ktop.stacktree import function_name
from ktop.text import format_pid, printable
from ktop.ui.widgets.pane import WIDER, Display, Drill, Pane, PaneRow, View, in_window, window_label
from ktop.ui.widgets.table import Cell, Column, num
from ktop.units import format_ns

_WAIT_COLUMNS = (
    Column("contended", "contended", 9, right=True, priority=7),
    Column("total", "total wait", 11, right=True, priority=8),
    Column("max", "max wait", 9, right=True, priority=3),
    Column("avg", "avg wait", 9, right=True, priority=4),
    Column("type", "type", 9, descending=False, priority=5),
)


def _wait_cells(contended: int, total: int, max_ns: int, type_: str) -> tuple[Cell, ...]:
    avg = total // contended if contended else 0
    return (
        num(str(contended), contended),
        num(format_ns(total), total, "bold" if total >= 1_000_000 else ""),
        num(format_ns(max_ns), max_ns),
        num(format_ns(avg), avg),
        Cell(type_),
    )


class LocksPane(Pane):
    PANE = PANE_LOCKS
    COLUMN_HELP = {
        "contended": "waits for the lock, as perf lock contention counts them",
        "total wait": "time spent waiting, summed over the waits",
        "max wait": "the longest single wait",
        "avg wait": "total wait / contended",
        "type": "the lock's kind: spinlock, mutex, rwsem:R or :W, rwlock, ...",
        "caller": "who took the lock: the first function outside the lock and scheduler code",
        "address / symbol": "the lock's address, and what it is when ktop can tell "
                            "(&mm->mmap_lock of a pid, a directory's i_rwsem, a CPU's run queue)",
        "pid": "the process of the task that waited; in the owners view, of the owner",
        "owner": "the task holding the lock when the wait began (mutexes and rwsems held "
                 "for write record it; others say why there is none), and its command",
        "locks": "how many lock instances carry that name",
        "lock name": "what the lock is (&inode->i_rwsem summed over inodes); Enter lists them",
        "cgroup": "the cgroup of the task that waited",
        "comm": "the command of the tasks that waited",
        "tasks": "the tasks of that command that waited",
    }
    VIEWS = (
        View("callers", (*_WAIT_COLUMNS, Column("caller", "caller", None, descending=False, priority=9, min_width=20)), "total"),
        View(
            "addresses",
            (*_WAIT_COLUMNS, Column("lock", "address / symbol", None, descending=False, priority=9,
                   min_width=20)),
            "total",
        ),
        View(
            "tasks",
            (
                *_WAIT_COLUMNS[:4],
                Column("pid", "pid", 7, right=True, descending=False, priority=8),
                Column("cgroup", "cgroup", 14, descending=False, shown_from=WIDER),
                Column("comm", "comm", None, descending=False, priority=9, min_width=15),
            ),
            "total",
        ),
        View(
            "commands",
            (
                *_WAIT_COLUMNS[:4],
                Column("tasks", "tasks", 5, right=True),
                Column("comm", "comm", None, descending=False),
            ),
            "total",
        ),
        View(  # perf lock contention -o: the waits each lock owner caused
            "owners",
            (
                *_WAIT_COLUMNS[:4],
                Column("pid", "pid", 7, right=True, descending=False, priority=8),
                Column("owner", "owner", None, descending=False, priority=9, min_width=15),
            ),
            "total",
        ),
        View(
            "names",
            (
                *_WAIT_COLUMNS,
                Column("locks", "locks", 5, right=True, priority=2),
                Column("name", "lock name", None, descending=False, priority=9, min_width=20),
            ),
            "total",
        ),
    )

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        locks = snapshot.locks
        if locks is None:
            return [], "waiting for lock events...", ""
        rows: list[PaneRow]
        if self.view == "callers":
            callers = locks.callers
            if display.filtered:  # each caller's waits by the processes shown, alone
                callers = tuple(filter(None, (caller_waits_of(c, display.shows) for c in callers)))
            rows = [
                (
                    f"{c.caller}|{c.type}",
                    (*_wait_cells(c.contended, c.total_wait_ns, c.max_wait_ns, c.type), Cell(c.caller)),
                    c,
                )
                for c in callers
            ]
        elif self.view == "addresses":
            rows = [
                (
                    lock.address,
                    (
                        *_wait_cells(lock.contended, lock.total_wait_ns, lock.max_wait_ns, lock.type),
                        Cell(f"{label} ({lock.address})" if (label := lock_label(lock))
                             else lock.address),
                    ),
                    lock,
                )
                for lock in locks.locks
            ]
        elif self.view == "owners":
            rows = [
                (
                    f"{o.owner}|{o.pid}|{o.comm}",
                    (
                        *_wait_cells(o.contended, o.total_wait_ns, o.max_wait_ns, "")[:4],
                        num(format_pid(o.pid) if o.owner == OWNER_TASK else "", o.pid),
                        Cell(o.comm),
                    ),
                    o,
                )
                for o in owners_by_task(locks)
            ]
        elif self.view == "names":
            rows = [
                (
                    f"{n.name}|{n.type}",
                    (
                        *_wait_cells(n.contended, n.total_wait_ns, n.max_wait_ns, n.type),
                        num(str(n.locks), n.locks),
                        Cell(n.name),
                    ),
                    n,
                )
                for n in locks_by_name(locks)
            ]
        elif self.view == "commands":
            tasks = tuple(t for t in locks.tasks if display.shows(t.pid, t.cgroup))
            rows = [
                (
                    c.comm,
                    (
                        *_wait_cells(c.contended, c.total_wait_ns, c.max_wait_ns, "")[:4],
                        num(str(c.tasks), c.tasks),
                        Cell(c.comm),
                    ),
                    c,
                )
                for c in waits_by_command(tasks)
            ]
        else:
            tasks = locks.tasks
            if display.filtered:
                tasks = tuple(t for t in tasks if display.shows(t.pid, t.cgroup))
            rows = [
                (
                    str(t.pid),
                    (
                        *_wait_cells(t.contended, t.total_wait_ns, t.max_wait_ns, "")[:4],
                        num(format_pid(t.pid), t.pid),
                        Cell(short_name(t.cgroup), t.cgroup.lower()),
                        Cell(t.comm),
                    ),
                    t,
                )
                for t in tasks
            ]
        # The count the rows add up to, and the machine's when that differs (a filter, or a
        # wait no view could keep): a title must not promise rows that are not there.
        shown = sum(row[2].contended for row in rows)
        waits = f"{shown} waits" + (f" of {locks.events}" if shown != locks.events else "")
        whole = ("addresses", "owners", "names")
        scope = "  all processes" if display.filtered and self.view in whole else ""
        subtitle = f"by {self.view} (v)  {waits}, {window_label(snapshot)}{scope}"
        lost = sum(locks.lost.values())
        if lost:
            subtitle += f"  lost {lost}"
        if locks.notes:  # owners or names this kernel cannot give: said once, briefly
            subtitle += "  " + printable("; ".join(locks.notes))
        return rows, f"no lock contention {in_window(snapshot)}", subtitle

    def view_description(self) -> str:
        return {"callers": "by caller", "addresses": "by lock address",
                "tasks": "by waiting task", "commands": "by command",
                "owners": "by lock owner", "names": "by lock name"}.get(self.view, self.view)

    def row_named(self, what: str) -> str | None:
        """`--drill locks:do_unlinkat` names the caller with or without its `+0x...` offset:
        bare, it is the caller in that function with the most wait (rows come sorted so)."""
        exact = super().row_named(what)
        if exact is not None or "+" in what:
            return exact
        return next((key for key, row in self._shown.items()
                     if isinstance(row, LockCaller) and function_name(row.caller) == what), None)

    def drill_row(self, row: LockCaller | LockAddress | LockTask | LockOwner | LockName) -> Drill:
        snapshot = self._snapshot
        if isinstance(row, (LockCaller, LockAddress)):
            from ktop.ui.screens.details import LockAddressScreen, LockCallerScreen  # noqa: PLC0415  (loaded when first opened)

            if snapshot is None:  # no rows shown yet: nothing to open
                return None
            if isinstance(row, LockAddress):
                return partial(LockAddressScreen, row, snapshot)
            return partial(LockCallerScreen, row, snapshot)
        if isinstance(row, LockTask):
            return row.pid  # every pane shows this pid alone
        if isinstance(row, LockOwner) and row.owner == OWNER_TASK:
            return row.pid
        if isinstance(row, LockName):
            if row.name == UNNAMED:
                self.notify("these locks have no name: the address view lists them")
                return None
            self.show_locks_named(row.name)
            return None
        self.notify("no single task owns these locks")
        return None


    def show_locks_named(self, name: str) -> None:
        """The address view, filtered to the locks of one name (Enter on the names view)."""
        had_focus = self.table.has_focus
        self.table.display = False
        self.view = "addresses"
        self.table.display = True
        if had_focus:
            self.table.focus()
        self.table.set_filter(name)
        if self._snapshot is not None:
            self.show(self._snapshot, getattr(self.screen, "display_settings", Display()))


@dataclass(frozen=True)
class LockCommand:
    """The waits of every task of one command (the `commands` view, as htop groups)."""

    comm: str
    tasks: int
    contended: int
    total_wait_ns: int
    max_wait_ns: int


def waits_by_command(tasks: tuple[LockTask, ...]) -> list[LockCommand]:
    """One row per command, longest total wait first; tasks folded as exited count once."""
    groups: dict[str, list[LockTask]] = {}
    for t in tasks:
        groups.setdefault(t.comm, []).append(t)
    rows = [
        LockCommand(comm, len(members), sum(t.contended for t in members),
                    sum(t.total_wait_ns for t in members), max(t.max_wait_ns for t in members))
        for comm, members in groups.items()
    ]
    rows.sort(key=lambda c: (-c.total_wait_ns, c.comm))
    return rows

