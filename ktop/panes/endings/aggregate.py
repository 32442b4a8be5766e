"""The endings pane's window: each drain folded into counts and bounded lists of the
interval's signals and endings; a profile of the window, of all since start, or of the
newest interval alone (what a recording keeps, so a death at 03:12 is in the replay).
merge_profiles (replay) sums recorded intervals with the same fold."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ktop.aggregate.exited import crowded, fold_exited
from ktop.aggregate.window import Window, sum_lost
from ktop.panes.endings.exesyms import name_in_executable
from ktop.panes.endings.model import Ending, EndingsProfile, SignalCount, SignalSent
from ktop.panes.endings.names import FATAL, code_name, how_ended, result_name, signal_name
from ktop.symbolize.frames import KernelFrames

if TYPE_CHECKING:
    from ktop.panedef import PaneServices
    from ktop.panes.endings.collector import EndingsCollector, EndingsDrain, SignalRecord

# Rows an interval keeps of each list (a record holds at most these); past them the
# newest are kept and the rest counted (endings_not_kept).
KEEP_PER_INTERVAL = 200
MAX_ROWS = 500  # rows of each list a profile shows
KILLERS_KEPT = 4096
# The live list of endings and signals reaches back this far, past a shorter window: "what
# died in the last minute?" (the counts stay the window's).
RECENT_S = 60.0  # the latest signal sent to each process, for its ending to name

# (sig, result, sender_pid, sender_comm, target_pid, target_comm, cgroup)
CountKey = tuple[int, str, int, str, int, str, str]


@dataclass(slots=True)
class _Counts:
    signals: Counter = field(default_factory=Counter)
    sent: list[SignalSent] = field(default_factory=list)  # oldest first
    endings: list[Ending] = field(default_factory=list)  # oldest first
    exits: int = 0
    oom_kills: int = 0

    def merge(self, other: _Counts) -> None:
        self.signals.update(other.signals)
        self.sent.extend(other.sent)
        self.endings.extend(other.endings)
        if len(self.sent) > MAX_ROWS:
            del self.sent[:len(self.sent) - MAX_ROWS]
        if len(self.endings) > MAX_ROWS:
            del self.endings[:len(self.endings) - MAX_ROWS]
        self.exits += other.exits
        self.oom_kills += other.oom_kills


def _merge(into: _Counts, other: _Counts) -> None:
    into.merge(other)


UserResolver = Callable[[int, Any], Sequence[Any]]


class EndingsAggregator:
    def __init__(self, window_s: float = 5.0, symbols: Any = None,
                 resolve_user: UserResolver | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._window: Window[_Counts] = Window(window_s, _Counts, _merge)
        self._recent_endings: deque[Ending] = deque(maxlen=MAX_ROWS)
        self._recent_sent: deque[SignalSent] = deque(maxlen=MAX_ROWS)
        self._clock = clock
        self._now = 0.0
        self._frames = KernelFrames(symbols)
        self._resolve_user = resolve_user
        self._killers: dict[int, SignalSent] = {}  # target pid -> the latest fatal signal
        self._not_kept = 0

    def add(self, drain: EndingsDrain) -> None:
        lost = dict(drain.lost)
        counts = self._fold(drain)
        lost["endings_not_kept"] = self._not_kept
        self._window.add(drain.start, drain.end, counts, lost)
        self._recent_endings.extend(counts.endings)
        self._recent_sent.extend(counts.sent)
        self._now = self._clock()

    def _fold(self, drain: EndingsDrain) -> _Counts:
        counts = _Counts()
        for total in drain.totals:
            counts.signals[(total.sig, result_name(total.result), total.sender_pid,
                            total.sender_comm, total.target_pid, total.target_comm,
                            total.cgroup)] += total.count
        oom_victims = {o.victim_pid for o in drain.ooms}
        counts.oom_kills = len(drain.ooms)
        # Records beyond what an interval keeps: the newest stay (a kill is seldom alone
        # in a storm, and the newest are what a user asks about).
        records = drain.signals[-KEEP_PER_INTERVAL:]
        self._not_kept += len(drain.signals) - len(records)
        for record in records:
            sent = self._signal(record, record.sig == 9 and record.target_pid in oom_victims)
            counts.sent.append(sent)
            if sent.sig in FATAL:
                if len(self._killers) >= KILLERS_KEPT:
                    for pid in list(self._killers)[:KILLERS_KEPT // 2]:
                        del self._killers[pid]
                self._killers.pop(sent.target_pid, None)
                self._killers[sent.target_pid] = sent
        exits = drain.exits[-KEEP_PER_INTERVAL:]
        self._not_kept += len(drain.exits) - len(exits)
        counts.exits = len(drain.exits)
        for x in exits:
            how, code, sig_name = how_ended(x.status)
            killer = self._killers.pop(x.pid, None)
            if killer is not None and (not sig_name or killer.signal != sig_name):
                killer = None  # it ended otherwise than by that signal
            counts.endings.append(Ending(
                time=x.time, pid=x.pid, ppid=x.ppid, comm=x.comm, cgroup=x.cgroup, how=how,
                exit_code=code, signal=sig_name,
                lifetime_s=x.lifetime_ns / 1e9 if x.lifetime_ns >= 0 else -1.0,
                cpu_s=x.cpu_ns / 1e9, killer_pid=killer.sender_pid if killer else 0,
                killer_comm=killer.sender_comm if killer else "", killer=killer))
        return counts

    def _signal(self, record: SignalRecord, oom: bool) -> SignalSent:
        _, kernel = self._frames.without_tracing(record.kernel)
        return SignalSent(
            time=record.time, signal=signal_name(record.sig), sig=record.sig,
            code=code_name(record.sig, record.code), result=result_name(record.result),
            sender_pid=record.sender_pid, sender_tid=record.sender_tid,
            sender_comm=record.sender_comm, target_pid=record.target_pid,
            target_tid=record.target_tid, target_comm=record.target_comm,
            cgroup=record.cgroup, kernel=kernel, user=self._user(record), oom=oom)

    def _user(self, record: SignalRecord) -> tuple[str, ...]:
        """The sender's user frames: from its maps while it lives, else its own executable's
        from the file the program named (a process killed by its fault is gone by now)."""
        if not record.user:
            return ()
        named: list[str] = []
        if self._resolve_user is not None:
            try:
                frames = self._resolve_user(record.sender_pid, record.user)
            except (OSError, ValueError):
                frames = ()
            named = [user_frame_text(f.symbol, f.module) for f in frames]
        exe = record.exe
        if exe is not None and exe.path:
            for i, address in enumerate(record.user):
                if i < len(named) and not named[i].startswith(("0x", "[unknown]")):
                    continue
                if not exe.start_code <= address < exe.end_code:
                    continue
                name = name_in_executable(exe.path, exe.inode, exe.start_code, address)
                if name is not None:
                    text = user_frame_text(name, exe.path)
                    if i < len(named):
                        named[i] = text
                    else:
                        named.extend(f"{a:#x}" for a in record.user[len(named):i])
                        named.append(text)
        if len(named) < len(record.user):
            named.extend(f"{a:#x}" for a in record.user[len(named):])
        return tuple(named)

    def fold_exited(self, is_alive: Callable[[int], bool]) -> None:
        """Totals since start: signal counts of exited processes under one pid per command."""
        total = self._window.total.signals
        if crowded(total):
            fold_exited(total, is_alive, lambda key: key[2],
                        lambda key, pid: (key[0], key[1], pid, *key[3:]), lambda a, b: a + b)
            fold_exited(total, is_alive, lambda key: key[4],
                        lambda key, pid: (*key[:4], pid, *key[5:]), lambda a, b: a + b)

    def profile(self, cumulative: bool = False, latest: bool = False) -> EndingsProfile:
        if latest:
            counts, window_s = self._window.latest()
        else:
            counts, window_s = self._window.counts(cumulative)
        profile = profile_of(counts, self._window.lost(cumulative, latest), window_s)
        if latest or cumulative:
            return profile
        since = self._now - max(RECENT_S, window_s)
        return dataclasses.replace(
            profile, endings=tuple(e for e in reversed(self._recent_endings) if e.time >= since),
            signals=tuple(s for s in reversed(self._recent_sent) if s.time >= since))


def user_frame_text(symbol: str, module: str) -> str:
    base = module.rsplit("/", 1)[-1]
    return f"{symbol} ({base})" if base and base != symbol else symbol


def profile_of(counts: _Counts, lost: dict[str, int], window_s: float) -> EndingsProfile:
    rows = [SignalCount(signal=signal_name(sig), sig=sig, result=result, sender_pid=sender,
                        sender_comm=sender_comm, target_pid=target, target_comm=target_comm,
                        cgroup=cgroup, count=count)
            for (sig, result, sender, sender_comm, target, target_comm, cgroup), count
            in counts.signals.items()]
    # The signals that end processes first: every exit sends its parent a SIGCHLD.
    rows.sort(key=lambda c: (c.sig not in FATAL, -c.count, c.sig, c.sender_pid, c.target_pid))
    return EndingsProfile(
        lost=lost,
        endings=tuple(reversed(counts.endings[-MAX_ROWS:])),
        signals=tuple(reversed(counts.sent[-MAX_ROWS:])),
        counts=tuple(rows),
        exits=counts.exits,
        oom_kills=counts.oom_kills,
        window_s=window_s,
    )


def _counted(profile: EndingsProfile) -> _Counts:
    """A recorded interval's profile back to the counts it was built from."""
    counts = _Counts()
    for c in profile.counts:
        counts.signals[(c.sig, c.result, c.sender_pid, c.sender_comm, c.target_pid,
                        c.target_comm, c.cgroup)] += c.count
    counts.sent = list(reversed(profile.signals))
    counts.endings = list(reversed(profile.endings))
    counts.exits, counts.oom_kills = profile.exits, profile.oom_kills
    return counts


def merge_profiles(profiles: Sequence[EndingsProfile]) -> EndingsProfile:
    """Recorded intervals, oldest first, summed by the live window's own merge."""
    merged = _Counts()
    for profile in profiles:
        merged.merge(_counted(profile))
    return profile_of(merged, sum_lost(p.lost for p in profiles),
                      sum(p.window_s for p in profiles))


def build(source: PaneServices) -> tuple[EndingsCollector, EndingsAggregator]:
    """The endings pane's collector and aggregator (ktop.registry)."""
    from ktop.panes.endings.collector import EndingsCollector  # noqa: PLC0415

    return EndingsCollector(), EndingsAggregator(
        source.options.window_s, symbols=source.kallsyms(), resolve_user=source.resolve_user)
