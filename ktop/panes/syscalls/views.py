"""The pane's views of a profile: by syscall, by process, by errno (strace -c, -Z). Pure
functions of the profile, for the widget, the exports and the tests alike."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import add

from ktop.panes.syscalls.model import HIST_SLOTS, SyscallProfile, SyscallStat

Shows = Callable[[int, str], bool]


@dataclass
class SyscallGroup:
    """Calls summed over what a view groups them by."""

    key: str
    syscall: str = ""
    pid: int = 0
    tid: int = 0
    comm: str = ""
    errno: str = ""
    count: int = 0
    errors: int = 0
    total_ns: int = 0
    max_ns: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * HIST_SLOTS)
    pids: set[int] = field(default_factory=set)
    by_call: dict[str, int] = field(default_factory=dict)  # total ns by syscall (process view)
    by_errno: dict[str, int] = field(default_factory=dict)  # failed calls by errno

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    @property
    def processes(self) -> int:
        return len(self.pids)

    @property
    def top(self) -> str:
        """The syscall with most time (a process's), or its commonest errno (a syscall's)."""
        table = self.by_call or self.by_errno
        return max(table, key=table.__getitem__) if table else ""

    def add(self, row: SyscallStat) -> None:
        self.count += row.count
        self.total_ns += row.total_ns
        self.max_ns = max(self.max_ns, row.max_ns)
        if any(row.hist):
            self.hist = list(map(add, self.hist, row.hist))
        self.pids.add(row.pid)
        if row.errno:
            self.errors += row.count
            self.by_errno[row.errno] = self.by_errno.get(row.errno, 0) + row.count


def shown_calls(profile: SyscallProfile, shows: Shows | None) -> Iterable[SyscallStat]:
    return (c for c in profile.calls if shows is None or shows(c.pid, c.cgroup))


def _grouped(rows: Iterable[SyscallStat], key: Callable[[SyscallStat], str],
             make: Callable[[SyscallStat], SyscallGroup]) -> list[SyscallGroup]:
    groups: dict[str, SyscallGroup] = {}
    for row in rows:
        k = key(row)
        group = groups.get(k)
        if group is None:
            group = groups[k] = make(row)
        group.add(row)
    return sorted(groups.values(), key=lambda g: (-g.total_ns, g.key))


def by_syscall(profile: SyscallProfile, shows: Shows | None = None) -> list[SyscallGroup]:
    return _grouped(shown_calls(profile, shows), lambda r: r.syscall,
                    lambda r: SyscallGroup(key=r.syscall, syscall=r.syscall))


def by_process(profile: SyscallProfile, shows: Shows | None = None) -> list[SyscallGroup]:
    groups = _grouped(shown_calls(profile, shows), lambda r: f"{r.pid}|{r.comm}",
                      lambda r: SyscallGroup(key=f"{r.pid}|{r.comm}", pid=r.pid, comm=r.comm))
    calls: dict[str, dict[str, int]] = {}
    for row in shown_calls(profile, shows):
        per = calls.setdefault(f"{row.pid}|{row.comm}", {})
        per[row.syscall] = per.get(row.syscall, 0) + row.total_ns
    for g in groups:
        g.by_call = calls.get(g.key, {})
    return groups


def by_thread(profile: SyscallProfile, pid: int) -> list[SyscallGroup]:
    """One process's calls by thread and syscall (the drill-down)."""
    return _grouped((c for c in profile.calls if c.pid == pid), lambda r: f"{r.tid}|{r.syscall}",
                    lambda r: SyscallGroup(key=f"{r.tid}|{r.syscall}", syscall=r.syscall,
                                           pid=r.pid, tid=r.tid, comm=r.comm))


def by_errno(profile: SyscallProfile, shows: Shows | None = None) -> list[SyscallGroup]:
    """Failing calls by (errno, syscall), most calls first: strace -c -Z's question."""
    groups = _grouped((c for c in shown_calls(profile, shows) if c.errno),
                      lambda r: f"{r.errno}|{r.syscall}",
                      lambda r: SyscallGroup(key=f"{r.errno}|{r.syscall}", syscall=r.syscall,
                                             errno=r.errno))
    return sorted(groups, key=lambda g: (-g.count, g.key))


def hist_buckets_ns(slots: Iterable[int]) -> list[tuple[int, int, int]]:
    """Log2 ns slots as (low ns, high ns inclusive, count), first to last non-empty."""
    counts = list(slots)
    used = [k for k, n in enumerate(counts) if n]
    if not used:
        return []
    return [(1 << k if k else 0, (1 << (k + 1)) - 1, counts[k]) for k in range(used[0], used[-1] + 1)]
