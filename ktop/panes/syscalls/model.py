"""The syscalls pane's profile: the JSON contract (decoded by ktop.codec from these hints)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ktop.frozen import quick_init
from ktop.userframe import UserFrame

HIST_SLOTS = 32  # SC_HIST_SLOTS: slot k holds calls of [2^k, 2^(k+1)) ns, the last longer


@quick_init
@dataclass(frozen=True, slots=True)
class SyscallStat:
    """Calls of one syscall by one thread, under one errno ("" for those that succeeded)."""

    pid: int  # the process (tgid)
    tid: int
    comm: str
    cgroup: str
    syscall: str  # "openat"; a compat call "ia32:open"
    errno: str  # "ENOENT"; "" for calls that returned >= 0
    count: int
    total_ns: int
    max_ns: int
    hist: tuple[int, ...]  # HIST_SLOTS log2 slots of latency in ns


@quick_init
@dataclass(frozen=True, slots=True)
class SlowSyscalls:
    """Slow calls (at least the profile's slow_ns) of one thread at one pair of stacks."""

    pid: int
    tid: int
    comm: str
    cgroup: str
    syscall: str
    errno: str
    frames: tuple[str, ...]  # where it first slept, innermost first; one "[...]" if not known
    user: tuple[UserFrame, ...]  # its call site, innermost first
    count: int
    total_ns: int
    max_ns: int
    hist: tuple[int, ...]


@quick_init
@dataclass(frozen=True, slots=True)
class SyscallProfile:
    calls: tuple[SyscallStat, ...]  # by total time, most first
    slow: tuple[SlowSyscalls, ...]  # by total time, most first
    lost: Mapping[str, int]  # by reason, over the profile's span
    notes: Mapping[str, int] = field(default_factory=dict)
    slow_ns: int = 0  # the slow calls' threshold
    window_s: float = 0.0
