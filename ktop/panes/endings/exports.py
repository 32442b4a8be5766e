"""The endings pane's exports: OpenMetrics families and --dump csv cells."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ktop.model import Snapshot
from ktop.text import csv_cell

CSV_COLUMNS = ("ended", "ended_by_signal", "signals", "oom_kills", "last_killed_pid",
               "last_killed_comm", "last_killed_how", "last_killed_by")


def csv_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    """One recorded interval's endings: how many, and the newest one a signal ended."""
    endings = snapshot.endings
    if endings is None:
        return [""] * len(CSV_COLUMNS)
    killed = [e for e in endings.endings if e.signal]
    last = killed[0] if killed else None
    return [endings.exits, len(killed), sum(c.count for c in endings.counts), endings.oom_kills,
            last.pid if last else "", csv_cell(last.comm) if last else "",
            csv_cell(last.how) if last else "",
            csv_cell(f"{last.killer_comm} {last.killer_pid}") if last and last.killer_pid else ""]


def metric_families(metrics: Any, snapshot: Snapshot) -> list[Any]:
    """ktop_signals_total{signal}, ktop_oom_kills_total, ktop_process_exits_total and the
    pane's losses (metrics: exports.openmetrics.SnapshotMetrics)."""
    from prometheus_client.core import CounterMetricFamily  # noqa: PLC0415

    from ktop.exports.openmetrics import label_value  # noqa: PLC0415

    endings = snapshot.endings
    if endings is None:
        return []
    by_signal: Counter[str] = Counter()
    for c in endings.counts:
        by_signal[c.signal] += c.count
    signals = CounterMetricFamily("ktop_signals", "signals sent, by signal (signal_generate)",
                                  labels=["signal"])
    for name, count in sorted(by_signal.items()):
        signals.add_metric([label_value(name)],
                           metrics._monotonic(f"signals/{name}", float(count)))
    ooms = CounterMetricFamily("ktop_oom_kills", "processes the OOM killer chose "
                               "(oom:mark_victim)")
    ooms.add_metric([], metrics._monotonic("oom_kills", float(endings.oom_kills)))
    exits = CounterMetricFamily("ktop_process_exits", "processes ended (their last "
                                "thread's exit: sched_process_exit)")
    exits.add_metric([], metrics._monotonic("exits", float(endings.exits)))
    lost = CounterMetricFamily("ktop_endings_lost_events", "signals and exits not counted "
                               "whole, by reason", labels=["reason"])
    for reason, count in sorted(endings.lost.items()):
        lost.add_metric([label_value(reason)], float(count))
    return [signals, ooms, exits, lost]


def _user_frames(texts: tuple[str, ...]) -> list[Any]:
    """"main+0x1a (segv)" -> UserFrame("main+0x1a", "segv")."""
    from ktop.model import UserFrame  # noqa: PLC0415

    frames = []
    for text in texts:
        symbol, _, module = text.partition(" (")
        frames.append(UserFrame(symbol, module.rstrip(")") or "[unknown]"))
    return frames


def sender_stack(s: Any) -> list[str]:
    """A signal's sender as one folded stack, root first: sender comm, its user frames, its
    kernel frames, then the signal (so a flame graph splits senders by what they sent)."""
    from ktop.exports.folded import frame_name, kernel_frames, user_frames  # noqa: PLC0415

    return [frame_name(s.sender_comm), *user_frames(_user_frames(s.user)),
            *kernel_frames(s.kernel), frame_name(f"[{s.signal}]")]


def folded_stacks(snapshot: Snapshot, include_idle: bool) -> Any:
    """Each signal with a record, weighed 1: the stacks that sent signals."""
    for s in snapshot.endings.signals if snapshot.endings else ():
        yield sender_stack(s), 1


def add_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    for s in snapshot.endings.signals if snapshot.endings else ():
        locations = tables.kernel_stack(s.kernel) + tables.user_stack(tuple(_user_frames(s.user)))
        tables.sample(locations, {"signals": 1},
                      {"pid": s.sender_pid, "comm": s.sender_comm, "signal": s.signal,
                       "target_pid": s.target_pid, "target": s.target_comm})
