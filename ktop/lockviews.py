"""Queries over a Snapshot's lock waits by owner and by name: the locks pane's owner and
name views and the owners in the caller and lock drill-downs (perf lock contention -o); a
caller's waits by the processes a filter shows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ktop.model import (
    OWNER_READERS,
    OWNER_TASK,
    OWNER_UNKNOWN,
    OWNER_UNTRACED,
    LockAddress,
    LockCaller,
    LockOwnerWait,
    LockProfile,
)


def caller_waits_of(caller: LockCaller, shows: Callable[[int, str], bool]) -> LockCaller | None:
    """The caller's waits by the tasks `shows` keeps (pid, cgroup), None if none of them
    waited here: the row's figures then add up to what the processes shown did, not the
    machine. The pane and its compare view both filter this way."""
    tasks = tuple(t for t in caller.tasks if shows(t.pid, t.cgroup))
    if not tasks:
        return None
    return replace(caller, tasks=tasks, contended=sum(t.contended for t in tasks),
                   total_wait_ns=sum(t.total_wait_ns for t in tasks),
                   max_wait_ns=max(t.max_wait_ns for t in tasks))


# The owner column of waits no single task is charged with.
NO_OWNER = {
    OWNER_READERS: "[read-held: no single owner]",
    OWNER_UNKNOWN: "[owner unknown: lock changing hands]",
    OWNER_UNTRACED: "[owners not traced on this kernel]",
}
NO_OWNER_FIELD = "[lock type records no owner]"
# The lock types whose owner field the BPF program reads (mutex; rwsem held for write):
# spinlocks, rwlocks, semaphores and per-CPU rwsems keep none.
OWNED_TYPES = ("mutex", "rwsem:R", "rwsem:W")


@dataclass(frozen=True)
class OwnerStack:
    frames: tuple[str, ...]  # the owner's kernel stack when it woke a waiter; () if not seen
    note: str  # why frames is empty
    contended: int
    total_wait_ns: int


@dataclass(frozen=True)
class LockOwner:
    """Waits charged to one owner (a task, or one of the NO_OWNER kinds), summed."""

    owner: str  # OWNER_* or "spinning"
    pid: int
    comm: str  # the owner's command, or the NO_OWNER / SPINNING text
    contended: int
    total_wait_ns: int
    max_wait_ns: int
    stacks: tuple[OwnerStack, ...] = ()  # most wait first

    @property
    def avg_wait_ns(self) -> int:
        return self.total_wait_ns // self.contended if self.contended else 0


def _owner_label(wait: LockOwnerWait) -> str:
    return wait.comm if wait.owner == OWNER_TASK else NO_OWNER.get(wait.owner, wait.owner)


def owners_of(waits: Iterable[LockOwnerWait]) -> list[LockOwner]:
    """Owner rows from owner waits: one per owner thread (and per no-owner kind), their
    stacks summed apart, most total wait first."""
    groups: dict[tuple[str, int, str], list[LockOwnerWait]] = {}
    for w in waits:
        groups.setdefault((w.owner, w.pid, _owner_label(w)), []).append(w)
    rows = []
    for (owner, pid, label), members in groups.items():
        stacks: dict[tuple[tuple[str, ...], str], list[int]] = {}
        for w in members:
            sums = stacks.setdefault((w.frames, w.stack_note), [0, 0])
            sums[0] += w.contended
            sums[1] += w.total_wait_ns
        rows.append(LockOwner(
            owner, pid, label, sum(w.contended for w in members),
            sum(w.total_wait_ns for w in members), max(w.max_wait_ns for w in members),
            tuple(OwnerStack(frames, note, n, total) for (frames, note), (n, total)
                  in sorted(stacks.items(), key=lambda kv: -kv[1][1])
                  if owner == OWNER_TASK),
        ))
    rows.sort(key=lambda r: (-r.total_wait_ns, r.comm, r.pid))
    return rows


def owners_by_task(locks: LockProfile) -> list[LockOwner]:
    """The owner view: who made others wait most, as `perf lock contention -o`; waits for
    locks that keep no owner (spinlocks, semaphores) are one row that says so, never
    charged to anyone."""
    rows = owners_of(locks.owners)
    unowned = [c for c in locks.callers if c.type not in OWNED_TYPES]
    if unowned:
        rows.append(LockOwner("none", 0, NO_OWNER_FIELD, sum(c.contended for c in unowned),
                              sum(c.total_wait_ns for c in unowned),
                              max(c.max_wait_ns for c in unowned)))
        rows.sort(key=lambda r: (-r.total_wait_ns, r.comm, r.pid))
    return rows


def owners_of_caller(locks: LockProfile, caller: str, lock_type: str) -> list[LockOwner]:
    return owners_of(w for w in locks.owners if w.caller == caller and w.type == lock_type)


def owners_of_lock(locks: LockProfile, address: str, lock_type: str) -> list[LockOwner]:
    return owners_of(w for w in locks.owners if w.address == address and w.type == lock_type)


def lock_label(lock: LockAddress) -> str:
    """The address view's lock column: name and instance, else the kallsyms symbol."""
    if lock.name:
        return f"{lock.name} {lock.instance}".rstrip()
    return lock.symbol


@dataclass(frozen=True)
class LockName:
    """Every lock of one name summed (`&inode->i_rwsem` over all inodes)."""

    name: str
    type: str
    locks: int
    contended: int
    total_wait_ns: int
    max_wait_ns: int


UNNAMED = "[unnamed]"


def locks_by_name(locks: LockProfile) -> list[LockName]:
    groups: dict[tuple[str, str], list[LockAddress]] = {}
    for lock in locks.locks:
        groups.setdefault((lock.name or UNNAMED, lock.type), []).append(lock)
    rows = [LockName(name, lock_type, len(members), sum(m.contended for m in members),
                     sum(m.total_wait_ns for m in members), max(m.max_wait_ns for m in members))
            for (name, lock_type), members in groups.items()]
    rows.sort(key=lambda r: (-r.total_wait_ns, r.name, r.type))
    return rows
