"""The endings pane's profile: the JSON contract (ktop.codec decodes it from these hints).

Imports nothing of ktop: ktop.model imports it for the Snapshot's field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ktop.frozen import quick_init


@quick_init
@dataclass(frozen=True, slots=True)
class SignalSent:
    """One signal sent, as signal_generate saw it in the sender's context."""

    time: float  # unix time
    signal: str  # "SIGKILL", "SIGRTMIN+3", "signal 70"
    sig: int
    code: str  # si_code: "SI_USER" (kill), "SI_KERNEL", "SEGV_MAPERR", "SI_TKILL"...
    result: str  # "delivered", "ignored", "already pending", "overflow", "info lost"
    sender_pid: int  # tgid
    sender_tid: int
    sender_comm: str
    target_pid: int  # tgid
    target_tid: int
    target_comm: str
    cgroup: str  # the sender's cgroup v2 path
    kernel: tuple[str, ...]  # the sender's kernel frames, innermost first, tracing cut
    user: tuple[str, ...]  # its user frames, innermost first: "main+0x1a (segv)"
    oom: bool = False  # the OOM killer's (oom:mark_victim named the target just before)


@quick_init
@dataclass(frozen=True, slots=True)
class Ending:
    """One process that ended (its last thread's exit)."""

    time: float  # unix time
    pid: int
    ppid: int
    comm: str
    cgroup: str
    how: str  # "exit 0", "exit 3", "SIGKILL", "SIGSEGV (core dumped)"
    exit_code: int  # -1 when a signal ended it
    signal: str  # "" for an exit
    lifetime_s: float  # -1 when its start is unknown
    cpu_s: float  # every thread's time on a CPU
    killer_pid: int = 0  # who sent the signal that ended it (0: an exit, or not seen)
    killer_comm: str = ""
    killer: SignalSent | None = None  # that signal, its sender's stacks


@quick_init
@dataclass(frozen=True, slots=True)
class SignalCount:
    """Signals per (signal, sender, target, result) over the window, counted in the kernel."""

    signal: str
    sig: int
    result: str
    sender_pid: int
    sender_comm: str
    target_pid: int
    target_comm: str
    cgroup: str  # the sender's
    count: int

    @property
    def pid(self) -> int:
        """The target's: `--drill endings:PID` names the process that was sent them."""
        return self.target_pid


@quick_init
@dataclass(frozen=True, slots=True)
class EndingsProfile:
    lost: Mapping[str, int]
    endings: tuple[Ending, ...]  # newest first
    signals: tuple[SignalSent, ...]  # newest first, those with a record
    counts: tuple[SignalCount, ...]  # most first
    exits: int  # processes ended (endings may keep fewer)
    oom_kills: int
    window_s: float = 0.0
