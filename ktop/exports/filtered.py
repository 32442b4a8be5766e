"""`--pid` and `--cgroup` for the data a snapshot writes (.json, .folded, .pb.gz, .prom): the
Snapshot cut to the rows of the processes the filter shows, as the panes cut theirs
(ktop.ui.widgets.pane.Display.shows), so every output of one command agrees with its screen.

What no process owns stays whole: the machine's CPU split and sample totals (percentages
are of the machine's CPU time, as on the screen), the disks, /proc/diskstats, pressure and
the losses. What belongs to processes but cannot be told apart by process is left out: the
lock addresses and their owners (the screen's owner and name views show those for all
processes, and say so), and a lock caller's wait histogram and stacks where other processes
waited there too (its stacks by task are kept, where the recording has them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ktop.cgroups import in_subtree
from ktop.lockviews import caller_waits_of
from ktop.model import (
    BlockProfile,
    CpuProfile,
    EndingsProfile,
    LockCaller,
    LockProfile,
    Snapshot,
    SyscallProfile,
    WaitProfile,
)
from ktop.stacktree import hot_functions

Shows = Callable[[int, str], bool]


def shows_of(pid: int | None, cgroup: str | None) -> Shows | None:
    """Whether a row of (pid, cgroup) passes --pid and --cgroup; None without either."""
    if pid is None and cgroup is None:
        return None

    def shows(row_pid: int, row_cgroup: str) -> bool:
        if pid is not None and row_pid != pid:
            return False
        return cgroup is None or in_subtree(row_cgroup, cgroup)

    return shows


def filtered_snapshot(snapshot: Snapshot, pid: int | None = None,
                      cgroup: str | None = None) -> Snapshot:
    """The snapshot with only the rows of the processes --pid/--cgroup show."""
    shows = shows_of(pid, cgroup)
    if shows is None:
        return snapshot
    return dataclasses.replace(
        snapshot,
        processes=tuple(p for p in snapshot.processes if shows(p.parent or p.pid, p.cgroup)),
        cpu=_cpu(snapshot.cpu, shows) if snapshot.cpu else None,
        locks=_locks(snapshot.locks, shows) if snapshot.locks else None,
        blockio=_blockio(snapshot.blockio, shows) if snapshot.blockio else None,
        waits=_waits(snapshot.waits, shows) if snapshot.waits else None,
        syscalls=_syscalls(snapshot.syscalls, shows) if snapshot.syscalls else None,
        endings=_endings(snapshot.endings, shows) if snapshot.endings else None,
    )


def _cpu(cpu: CpuProfile, shows: Shows) -> CpuProfile:
    stacks = tuple(s for s in cpu.stacks if shows(s.pid, s.cgroup))
    return dataclasses.replace(cpu, stacks=stacks,
                               functions=hot_functions(stacks, cpu.expected_samples))


def _caller(caller: LockCaller, shows: Shows) -> LockCaller | None:
    kept = caller_waits_of(caller, shows)
    if kept is None or len(kept.tasks) == len(caller.tasks):  # none, or all its waits
        return kept
    pids = {t.pid for t in kept.tasks}
    task_stacks = tuple(s for s in caller.task_stacks if s.pid in pids)
    # The caller's stacks and histogram sum every task's: only the tasks' own can be kept.
    return dataclasses.replace(kept, task_stacks=task_stacks, stacks=(), user_stacks=(),
                               hist_ns=())


def _locks(locks: LockProfile, shows: Shows) -> LockProfile:
    callers = tuple(c for c in (_caller(c, shows) for c in locks.callers) if c is not None)
    return dataclasses.replace(
        locks, callers=callers, tasks=tuple(t for t in locks.tasks if shows(t.pid, t.cgroup)),
        locks=(), owners=(), events=sum(c.contended for c in callers))


def _syscalls(profile: SyscallProfile, shows: Shows) -> SyscallProfile:
    return dataclasses.replace(
        profile, calls=tuple(c for c in profile.calls if shows(c.pid, c.cgroup)),
        slow=tuple(s for s in profile.slow if shows(s.pid, s.cgroup)))


def _endings(profile: EndingsProfile, shows: Shows) -> EndingsProfile:
    """As the pane cuts them: an ending by its process, a signal by its sender (its pid and
    cgroup) or its target (its pid: the target's cgroup is not recorded)."""
    return dataclasses.replace(
        profile, endings=tuple(e for e in profile.endings if shows(e.pid, e.cgroup)),
        signals=tuple(s for s in profile.signals
                      if shows(s.sender_pid, s.cgroup) or shows(s.target_pid, "")),
        counts=tuple(c for c in profile.counts
                     if shows(c.sender_pid, c.cgroup) or shows(c.target_pid, "")))


def _blockio(block: BlockProfile, shows: Shows) -> BlockProfile:
    return dataclasses.replace(
        block, processes=tuple(p for p in block.processes if shows(p.pid, p.cgroup)),
        requests=tuple(r for r in block.requests if shows(r.pid, r.cgroup)))


def _waits(waits: WaitProfile, shows: Shows) -> WaitProfile:
    return dataclasses.replace(
        waits, processes=tuple(p for p in waits.processes if shows(p.pid, p.cgroup)),
        stacks=tuple(s for s in waits.stacks if shows(s.pid, s.cgroup)))
