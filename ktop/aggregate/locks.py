"""Fold drained lock waits into the lock contention profile over a window of recent seconds.
Their stacks and callers are named by ktop.symbolize.frames."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import add
from typing import TYPE_CHECKING, Any, TypeVar

from ktop.aggregate.exited import crowded, fold_exited, forget_addresses, rekey
from ktop.aggregate.window import Window, sum_lost
from ktop.collectors.locks import (
    HIST_SLOTS,
    OWNER_READERS,
    OWNER_TASK,
    OWNER_UNKNOWN,
    LockDrain,
)
from ktop.model import (
    EXITED_PID,
    OWNER_UNTRACED,
    Bucket,
    LockAddress,
    LockCaller,
    LockOwnerWait,
    LockProfile,
    LockStack,
    LockTask,
    LockTaskStack,
    LockUserStack,
    UserFrame,
)
from ktop.model import OWNER_READERS as READ_HELD
from ktop.model import OWNER_TASK as HELD_BY_TASK
from ktop.model import OWNER_UNKNOWN as OWNER_NOT_KNOWN
from ktop.symbolize.frames import StackSymbolizer
from ktop.symbolize.kernel import Kallsyms
from ktop.symbolize.locknames import LockNamer

if TYPE_CHECKING:
    from ktop.collectors.locks import LockCollector
    from ktop.panedef import PaneServices

# Lock type flags of lock:contention_begin (include/trace/events/lock.h).
LCB_F_SPIN = 1 << 0
LCB_F_READ = 1 << 1
LCB_F_WRITE = 1 << 2
LCB_F_RT = 1 << 3
LCB_F_PERCPU = 1 << 4
LCB_F_MUTEX = 1 << 5

# perf's lock_type_table (tools/perf/builtin-lock.c), with the names perf 6.1 prints.
LOCK_TYPES = {
    0: "semaphore",
    LCB_F_SPIN: "spinlock",
    LCB_F_SPIN | LCB_F_READ: "rwlock:R",
    LCB_F_SPIN | LCB_F_WRITE: "rwlock:W",
    LCB_F_READ: "rwsem:R",
    LCB_F_WRITE: "rwsem:W",
    LCB_F_RT: "rtmutex",
    LCB_F_RT | LCB_F_READ: "rwlock-rt:R",
    LCB_F_RT | LCB_F_WRITE: "rwlock-rt:W",
    LCB_F_PERCPU | LCB_F_READ: "pcpu-sem:R",
    LCB_F_PERCPU | LCB_F_WRITE: "pcpu-sem:W",
    LCB_F_MUTEX: "mutex",
    LCB_F_MUTEX | LCB_F_SPIN: "mutex",  # a mutex's optimistic spin, before it sleeps
}

# Why a stack is missing, as its caller column says it.
_MISSING_STACK = {
    -errno.EEXIST: "[stack lost: collision]",
    -errno.ENOMEM: "[stack lost: map full]",
    -errno.EFAULT: "[no kernel stack]",
}


def lock_type_name(flags: int) -> str:
    """'spinlock', 'rwsem:W', ... as perf names them; 'unknown:0x..' for anything else."""
    return LOCK_TYPES.get(flags, f"unknown:{flags:#x}")


def hist_buckets(slots: Sequence[int]) -> tuple[Bucket, ...]:
    """Log2 slots as buckets of ns, from the first to the last non-empty slot.

    Slot k counts waits of 2^k .. 2^(k+1) - 1 ns; slot 0 also holds a wait of 0 ns.
    """
    used = [k for k, count in enumerate(slots) if count]
    if not used:
        return ()
    return tuple(
        Bucket(0 if k == 0 else 1 << k, (1 << (k + 1)) - 1, slots[k])
        for k in range(used[0], used[-1] + 1)
    )


# Stacks the totals since start keep whole, over every caller's kernel stacks, user stacks
# and stacks per task. Under process churn distinct ones never stop coming (~1,000 a minute
# beside 2 dd and ~100 short processes a second): past this many, the rarest (fewest waits)
# of each caller merge into one entry that says so; its waits, histogram and tasks stay
# exact, and the window is never cut.
LOCK_STACKS_KEPT = 1000
RARE_STACKS = "[rare stacks not kept]"  # the frame of that entry

# Lock addresses named lately (a cache: locks in allocated memory come and go with the
# processes and files that hold them).
LOCK_NAMES_KEPT = 4096


@dataclass(slots=True)
class _Waits:
    contended: int = 0
    total_ns: int = 0
    max_ns: int = 0
    min_ns: int = 0

    def add(self, contended: int, total_ns: int, max_ns: int, min_ns: int) -> None:
        if not contended:
            return
        self.min_ns = min(self.min_ns, min_ns) if self.contended else min_ns
        self.contended += contended
        self.total_ns += total_ns
        self.max_ns = max(self.max_ns, max_ns)

    def merge(self, other: _Waits) -> None:
        self.add(other.contended, other.total_ns, other.max_ns, other.min_ns)

    def copy(self) -> _Waits:
        """What merging it into a new _Waits() gives."""
        if not self.contended:
            return _Waits()
        return _Waits(self.contended, self.total_ns, self.max_ns, self.min_ns)


K = TypeVar("K")
TaskStackKey = tuple[int, str, tuple[str, ...], tuple[UserFrame, ...]]
TaskKey = tuple[int, str, str]  # (tid, comm, cgroup)
# (owner kind, tid, tgid, comm, owner's frames, why none, waiter's caller, type, lock address)
OwnerKey = tuple[str, int, int, str, tuple[str, ...], str, str, str, int]

_OWNER_KINDS = {OWNER_TASK: HELD_BY_TASK, OWNER_READERS: READ_HELD, OWNER_UNKNOWN: OWNER_NOT_KNOWN}
# Why an owner's stack is missing, by bpf_get_stackid's -errno or the program's own codes.
_MISSING_OWNER_STACK = {
    -errno.ENODATA: "not seen: the owner did not wake this waiter",
    -errno.ESTALE: "taken before a drain: left out",
    -errno.EEXIST: "lost: stack map collision",
    -errno.ENOMEM: "lost: stack map full",
}
# Owner rows the totals since start keep, as for stacks: the rarest merge past it.
LOCK_OWNERS_KEPT = 2000


def _forget_task_stack_addresses(key: TaskStackKey) -> TaskStackKey:
    return (*key[:3], forget_addresses(key[3]))


@dataclass(slots=True)
class _CallerWaits:
    waits: _Waits = field(default_factory=_Waits)
    hist: list[int] = field(default_factory=lambda: [0] * HIST_SLOTS)
    stacks: dict[tuple[str, ...], _Waits] = field(default_factory=dict)
    tasks: dict[TaskKey, _Waits] = field(default_factory=dict)
    user_stacks: dict[tuple[UserFrame, ...], _Waits] = field(default_factory=dict)
    # (tid, comm, kernel frames, user frames): the stacks each task waited under
    task_stacks: dict[TaskStackKey, _Waits] = field(default_factory=dict)

    def merge(self, other: _CallerWaits) -> None:
        self.waits.merge(other.waits)
        self.hist = list(map(add, self.hist, other.hist))
        _merge_into(self.stacks, other.stacks)
        _merge_into(self.tasks, other.tasks)
        _merge_into(self.user_stacks, other.user_stacks)
        _merge_into(self.task_stacks, other.task_stacks)

    def copy(self) -> _CallerWaits:
        return _CallerWaits(self.waits.copy(), list(self.hist), _copied(self.stacks),
                            _copied(self.tasks), _copied(self.user_stacks),
                            _copied(self.task_stacks))


@dataclass(slots=True)
class _Contention:
    """Waits of one interval or several: by (caller, type), by (lock, type), by task."""

    callers: dict[tuple[str, str], _CallerWaits] = field(default_factory=dict)
    locks: dict[tuple[int, str], _Waits] = field(default_factory=dict)
    tasks: dict[TaskKey, _Waits] = field(default_factory=dict)
    owners: dict[OwnerKey, _Waits] = field(default_factory=dict)

    def merge(self, other: _Contention) -> None:
        callers = self.callers
        for key, caller in other.callers.items():
            mine = callers.get(key)
            if mine is None:
                callers[key] = caller.copy()
            else:
                mine.merge(caller)
        _merge_into(self.locks, other.locks)
        _merge_into(self.tasks, other.tasks)
        _merge_into(self.owners, other.owners)


def _merged(into: _Waits, other: _Waits) -> _Waits:
    into.merge(other)
    return into


def _merge_into(into: dict[K, _Waits], other: dict[K, _Waits]) -> None:
    for key, waits in other.items():
        mine = into.get(key)
        if mine is None:
            into[key] = waits.copy()
        else:
            mine.merge(waits)


def _copied(waits: dict[K, _Waits]) -> dict[K, _Waits]:
    return {key: w.copy() for key, w in waits.items()}


_RARE_KERNEL = (RARE_STACKS,)
_RARE_USER = (UserFrame(RARE_STACKS, RARE_STACKS),)


def _merge_rare_stacks(callers: Iterable[_CallerWaits]) -> None:
    """Past LOCK_STACKS_KEPT stacks in these callers' totals, the rarest down to 3/4 of it
    merge into their caller's (or task's) one entry of rare stacks."""
    entries: list[tuple[int, Any, dict[Any, _Waits], Any]] = []
    for caller in callers:
        entries += [(w.contended, key, caller.stacks, _RARE_KERNEL)
                    for key, w in caller.stacks.items() if key != _RARE_KERNEL]
        entries += [(w.contended, key, caller.user_stacks, _RARE_USER)
                    for key, w in caller.user_stacks.items() if key != _RARE_USER]
        entries += [(w.contended, key, caller.task_stacks, (*key[:2], _RARE_KERNEL, ()))
                    for key, w in caller.task_stacks.items() if key[2] != _RARE_KERNEL]
    if len(entries) <= LOCK_STACKS_KEPT:
        return
    entries.sort(key=lambda entry: entry[0])
    for _, key, table, rare in entries[:len(entries) - LOCK_STACKS_KEPT * 3 // 4]:
        table.setdefault(rare, _Waits()).merge(table.pop(key))


class LockAggregator:
    def __init__(
        self,
        kallsyms: Kallsyms,
        window_s: float = 5.0,
        resolve_user: Callable[[int, Sequence[int]], Sequence[UserFrame]] | None = None,
    ) -> None:
        """resolve_user: (pid, user addresses) -> frames, named while the process lives."""
        self._resolve_user = resolve_user
        self.symbolizer = StackSymbolizer(kallsyms)
        # Waits cannot be taken back out of a sum (their min and max), so no subtract.
        self._window = Window(window_s, _Contention, _Contention.merge)
        self._lock_names: dict[int, tuple[str, str, str]] = {}  # address -> symbol, name, instance
        self._namer = LockNamer()
        self._notes: tuple[str, ...] = ()

    def add(self, drain: LockDrain) -> None:
        self._name_locks(drain)
        self._window.add(drain.start, drain.end, self._fold(drain), drain.lost)
        self._notes = drain.notes

    def _name_locks(self, drain: LockDrain) -> None:
        """Names for the drained locks, kept while they are seen (a lock in freed memory may
        be something else next time: names found now replace older ones)."""
        found = drain.names or {}
        run_queues = drain.run_queues or {}
        for row in drain.locks:
            known = self._lock_names.get(row.address)
            if known is not None and known[1] and row.address not in found:
                continue
            if len(self._lock_names) > LOCK_NAMES_KEPT:
                self._lock_names.clear()
            symbol = known[0] if known else self.symbolizer.lock_symbol(row.address)
            name, instance = self._namer.name(row.address, found.get(row.address), run_queues,
                                              symbol)
            self._lock_names[row.address] = (symbol, name, instance)

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: one entry per command for tasks that have exited."""
        total = self._window.total
        callers = total.callers.values()
        if crowded(total.tasks, *(c.task_stacks for c in callers)):
            for tasks in [total.tasks, *(c.tasks for c in callers)]:
                fold_exited(tasks, is_alive, lambda task: task[0],
                            lambda task, tid: (tid, *task[1:]), _merged)
            for caller in callers:
                fold_exited(caller.task_stacks, is_alive, lambda key: key[0],
                            lambda key, tid: (tid, *key[1:]), _merged)
        for caller in callers:  # user stacks carry no pid to test
            if crowded(caller.user_stacks):
                rekey(caller.user_stacks, forget_addresses, _merged)
            if crowded(caller.task_stacks):
                rekey(caller.task_stacks, _forget_task_stack_addresses, _merged,
                      only=lambda key: key[0] == EXITED_PID)
        _merge_rare_stacks(callers)
        if crowded(total.owners):
            fold_exited(total.owners, is_alive, lambda key: key[1],
                        lambda key, tid: (key[0], tid, *key[2:]), _merged)
        _merge_rare_owners(total.owners)

    def _fold(self, drain: LockDrain) -> _Contention:
        contention = _Contention()
        for row in drain.stacks:
            frames, caller = self._stack(row.kernel, row.kernel_error)
            waits = contention.callers.setdefault(
                (caller, lock_type_name(row.flags)), _CallerWaits()
            )
            waits.waits.add(row.contended, row.total_ns, row.max_ns, row.min_ns)
            waits.hist = list(map(add, waits.hist, row.hist))
            waits.stacks.setdefault(frames, _Waits()).add(
                row.contended, row.total_ns, row.max_ns, row.min_ns
            )
        for task_row in drain.tasks:
            frames, caller = self._stack(task_row.kernel, task_row.kernel_error)
            task = (task_row.tid, task_row.comm, task_row.cgroup)
            stats = (task_row.contended, task_row.total_ns, task_row.max_ns, task_row.min_ns)
            contention.tasks.setdefault(task, _Waits()).add(*stats)
            found = contention.callers.get((caller, lock_type_name(task_row.flags)))
            if found is not None:  # None only if the per-stack map was full
                found.tasks.setdefault(task, _Waits()).add(*stats)
                user: tuple[UserFrame, ...] = ()
                if task_row.user and self._resolve_user is not None:
                    user = tuple(self._resolve_user(task_row.tgid, task_row.user))
                    found.user_stacks.setdefault(user, _Waits()).add(*stats)
                found.task_stacks.setdefault((task_row.tid, task_row.comm, frames, user),
                                             _Waits()).add(*stats)
        for owner_row in drain.owners:
            _, caller = self._stack(owner_row.kernel, owner_row.kernel_error)
            owner_frames: tuple[str, ...] = ()
            note = ""
            if owner_row.owner_kernel:
                owner_frames, _ = self.symbolizer.resolve(owner_row.owner_kernel)
            elif owner_row.owner_kind == OWNER_TASK:
                note = _MISSING_OWNER_STACK.get(owner_row.owner_kernel_error,
                                                f"lost: {owner_row.owner_kernel_error}")
            kind = _OWNER_KINDS.get(owner_row.owner_kind, OWNER_UNTRACED)
            owner_key = (kind, owner_row.owner_tid, owner_row.owner_tgid, owner_row.owner_comm,
                         owner_frames, note, caller, lock_type_name(owner_row.flags),
                         owner_row.address)
            contention.owners.setdefault(owner_key, _Waits()).add(
                owner_row.contended, owner_row.total_ns, owner_row.max_ns, owner_row.min_ns)
        for lock_row in drain.locks:
            key = (lock_row.address, lock_type_name(lock_row.flags))
            contention.locks.setdefault(key, _Waits()).add(
                lock_row.contended, lock_row.total_ns, lock_row.max_ns, lock_row.min_ns
            )
        return contention

    def _stack(self, kernel: tuple[int, ...], error: int) -> tuple[tuple[str, ...], str]:
        if not kernel:
            return (), _MISSING_STACK.get(error, f"[no stack: {error}]")
        return self.symbolizer.resolve(kernel)

    def _lock_name(self, address: int) -> tuple[str, str, str]:
        """(kallsyms symbol, name, instance) of a lock address."""
        known = self._lock_names.get(address)
        if known is None:
            if len(self._lock_names) > LOCK_NAMES_KEPT:
                self._lock_names.clear()
            symbol = self.symbolizer.lock_symbol(address)
            known = self._lock_names[address] = (symbol, *self._namer.name(address, None, {},
                                                                            symbol))
        return known

    def profile(self, cumulative: bool = False, latest: bool = False) -> LockProfile:
        """The window's profile, the totals since start, or the newest interval's alone."""
        contention, window_s = self._window.latest() if latest else self._window.counts(cumulative)
        return build_profile(contention, window_s, self._window.lost(cumulative, latest),
                             self._lock_name, self._notes)


def _merge_rare_owners(owners: dict[OwnerKey, _Waits]) -> None:
    """Past LOCK_OWNERS_KEPT owner rows in the totals, the rarest lose their owner's stack
    (and then merge with the rows that differ only by it)."""
    if len(owners) <= LOCK_OWNERS_KEPT:
        return
    rare = sorted(owners, key=lambda key: owners[key].contended)
    for key in rare[:len(owners) - LOCK_OWNERS_KEPT * 3 // 4]:
        if key[4] != _RARE_KERNEL:
            owners.setdefault((*key[:4], _RARE_KERNEL, "", *key[6:]), _Waits()).merge(
                owners.pop(key))


def build_profile(contention: _Contention, window_s: float, lost: Mapping[str, int],
                  lock_name: Callable[[int], tuple[str, str, str]],
                  notes: tuple[str, ...] = ()) -> LockProfile:
    """The profile of waits counted over `window_s`: live, and for a replayed window."""
    callers = tuple(
        LockCaller(
            caller=caller,
            type=lock_type,
            contended=w.waits.contended,
            total_wait_ns=w.waits.total_ns,
            max_wait_ns=w.waits.max_ns,
            min_wait_ns=w.waits.min_ns,
            stacks=tuple(
                LockStack(frames, s.contended, s.total_ns, s.max_ns)
                for frames, s in _by_total_wait(w.stacks)
            ),
            hist_ns=hist_buckets(w.hist),
            tasks=_tasks(w.tasks),
            user_stacks=tuple(
                LockUserStack(frames, s.contended, s.total_ns)
                for frames, s in sorted(w.user_stacks.items(), key=lambda kv: -kv[1].total_ns)
            ),
            task_stacks=tuple(
                LockTaskStack(tid, comm, frames, user, s.contended, s.total_ns)
                for (tid, comm, frames, user), s in sorted(
                    # user frames do not order: ties keep their order of arrival
                    w.task_stacks.items(), key=lambda kv: (-kv[1].total_ns, kv[0][:3])
                )
            ),
        )
        for (caller, lock_type), w in sorted(
            contention.callers.items(), key=lambda kv: (-kv[1].waits.total_ns, kv[0])
        )
    )
    locks = tuple(_lock_address(address, lock_type, w, lock_name(address))
                  for (address, lock_type), w in _by_total_wait(contention.locks))
    owners = tuple(
        LockOwnerWait(
            owner=kind, pid=tid, tgid=tgid, comm=comm, frames=frames, stack_note=note,
            caller=caller, type=lock_type, address=f"{address:#x}",
            contended=w.contended, total_wait_ns=w.total_ns, max_wait_ns=w.max_ns,
        )
        for (kind, tid, tgid, comm, frames, note, caller, lock_type, address), w in sorted(
            contention.owners.items(), key=lambda kv: (-kv[1].total_ns, kv[0][:4], kv[0][5:]))
    )
    return LockProfile(
        events=sum(c.contended for c in callers),
        lost=dict(lost),
        callers=callers,
        locks=locks,
        tasks=_tasks(contention.tasks),
        window_s=window_s,
        owners=owners,
        notes=notes,
    )


def _lock_address(address: int, lock_type: str, w: _Waits,
                  named: tuple[str, str, str]) -> LockAddress:
    symbol, name, instance = named
    return LockAddress(address=f"{address:#x}", symbol=symbol, type=lock_type,
                       contended=w.contended, total_wait_ns=w.total_ns, max_wait_ns=w.max_ns,
                       name=name, instance=instance)


def _counted(profile: LockProfile) -> _Contention:
    """A recorded interval's profile back to the waits it was built from."""
    contention = _Contention()
    for c in profile.callers:
        waits = contention.callers[c.caller, c.type] = _CallerWaits(
            _Waits(c.contended, c.total_wait_ns, c.max_wait_ns, c.min_wait_ns))
        for bucket in c.hist_ns:  # slot k holds 2^k .. 2^(k+1) - 1 ns
            waits.hist[min(max(0, bucket.high.bit_length() - 1), HIST_SLOTS - 1)] += bucket.count
        waits.stacks = {s.frames: _Waits(s.contended, s.total_wait_ns, s.max_wait_ns)
                        for s in c.stacks}
        waits.tasks = {(t.pid, t.comm, t.cgroup): _Waits(t.contended, t.total_wait_ns, t.max_wait_ns)
                       for t in c.tasks}
        waits.user_stacks = {u.frames: _Waits(u.contended, u.total_wait_ns) for u in c.user_stacks}
        waits.task_stacks = {(t.pid, t.comm, t.frames, t.user_frames):
                             _Waits(t.contended, t.total_wait_ns) for t in c.task_stacks}
    contention.locks = {(_recorded_address(lock.address), lock.type):
                        _Waits(lock.contended, lock.total_wait_ns, lock.max_wait_ns)
                        for lock in profile.locks}
    contention.tasks = {(t.pid, t.comm, t.cgroup): _Waits(t.contended, t.total_wait_ns, t.max_wait_ns)
                        for t in profile.tasks}
    contention.owners = {(o.owner, o.pid, o.tgid, o.comm, o.frames, o.stack_note, o.caller, o.type,
                          _recorded_address(o.address)):
                         _Waits(o.contended, o.total_wait_ns, o.max_wait_ns)
                         for o in profile.owners}
    return contention


def _recorded_address(text: str) -> int:
    """A recorded lock's address ("0xffff..."); one that is none (a forged file) counts as
    0, an unknown address, rather than ending the replay."""
    try:
        return int(text, 16)
    except ValueError:
        return 0


def merge_profiles(profiles: Sequence[LockProfile]) -> LockProfile:
    """Recorded intervals, oldest first, as the live window sums them: each counted back,
    summed by the window's own merge, built by build_profile; losses (each record's own) summed."""
    merged = _Contention()
    for profile in profiles:
        merged.merge(_counted(profile))
    names = {_recorded_address(lock.address): (lock.symbol, lock.name, lock.instance)
             for p in profiles for lock in p.locks}
    return build_profile(merged, sum(p.window_s for p in profiles),
                         sum_lost(p.lost for p in profiles),
                         lambda address: names.get(address, ("", "", "")), profiles[-1].notes)


def _tasks(waits: dict[TaskKey, _Waits]) -> tuple[LockTask, ...]:
    return tuple(
        LockTask(pid=tid, comm=comm, contended=w.contended, total_wait_ns=w.total_ns,
                 max_wait_ns=w.max_ns, cgroup=cgroup)
        for (tid, comm, cgroup), w in _by_total_wait(waits)
    )


def _by_total_wait(waits: dict) -> list:
    return sorted(waits.items(), key=lambda kv: (-kv[1].total_ns, kv[0]))


def build(source: PaneServices) -> tuple[LockCollector, LockAggregator]:
    """The lock contention pane's collector and aggregator (ktop.registry)."""
    from ktop.collectors.locks import LockCollector  # noqa: PLC0415

    return LockCollector(source.options.interval_s), LockAggregator(
        source.kallsyms(), source.options.window_s, resolve_user=source.resolve_user
    )
