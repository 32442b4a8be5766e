"""The syscalls pane's exports: folded stacks of slow calls, pprof `syscalls`, OpenMetrics
families with bounded labels (top N syscalls, the rest as "other"), CSV cells."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ktop.panes.syscalls.model import SlowSyscalls
from ktop.panes.syscalls.views import by_errno, by_syscall
from ktop.text import csv_cell

if TYPE_CHECKING:
    from ktop.model import Snapshot

CSV_COLUMNS = ("syscalls", "syscall_errors", "syscall_ms", "top_syscall", "top_syscall_calls",
               "top_syscall_errno", "top_syscall_errno_calls")


def slow_stack_frames(slow: SlowSyscalls) -> list[str]:
    """comm, user frames, the syscall, where it slept: root first."""
    from ktop.exports.folded import frame_name, kernel_frames, user_frames  # noqa: PLC0415

    return [frame_name(slow.comm), *user_frames(slow.user), frame_name(f"[{slow.syscall}]"),
            *kernel_frames(slow.frames)]


def slow_stacks(snapshot: Snapshot, include_idle: bool) -> Iterator[tuple[list[str], int]]:
    """Each slow call's stacks weighted by its time in us (--folded-of syscalls)."""
    profile = snapshot.syscalls
    for slow in profile.slow if profile else ():
        yield slow_stack_frames(slow), round(slow.total_ns / 1000)


def add_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    """Every call's time (`syscalls` in ns, `calls`) under a frame of its syscall; the slow
    ones under their stacks, the rest of a syscall's time under the syscall alone."""
    profile = snapshot.syscalls
    if profile is None:
        return
    slow_ns: dict[tuple[int, int, str, str], list[int]] = {}
    for s in profile.slow:
        key = (s.pid, s.tid, s.syscall, s.errno)
        kept = slow_ns.setdefault(key, [0, 0])
        kept[0] += s.total_ns
        kept[1] += s.count
        locations = (tables.kernel_stack(s.frames) if not s.frames[0].startswith("[") else [])
        locations += [tables.location(f"[{s.syscall}]", "[syscall]")]
        locations += tables.user_stack(s.user)
        tables.sample(locations, {"calls": s.count, "syscalls": s.total_ns},
                      {"pid": s.pid, "comm": s.comm, "syscall": s.syscall,
                       "errno": s.errno or "0"})
    for c in profile.calls:
        taken = slow_ns.get((c.pid, c.tid, c.syscall, c.errno), [0, 0])
        rest_ns, rest = c.total_ns - taken[0], c.count - taken[1]
        if rest <= 0:
            continue
        taken[0], taken[1] = max(0, taken[0] - c.total_ns), max(0, taken[1] - c.count)
        tables.sample([tables.location(f"[{c.syscall}]", "[syscall]")],
                      {"calls": rest, "syscalls": max(0, rest_ns)},
                      {"pid": c.pid, "comm": c.comm, "syscall": c.syscall,
                       "errno": c.errno or "0"})


def metric_families(metrics: Any, snapshot: Snapshot) -> list[Any]:
    """ktop_syscalls_total{syscall}, ktop_syscall_errors_total{syscall,errno},
    ktop_syscall_seconds_total{syscall}: the top N (by calls) and the rest as "other"."""
    from prometheus_client.core import CounterMetricFamily  # noqa: PLC0415

    from ktop.exports.openmetrics import OTHER, label_value  # noqa: PLC0415

    profile = snapshot.syscalls
    if profile is None:
        return []
    groups = by_syscall(profile)
    totals = {g.syscall: (float(g.count), g.total_ns / 1e9) for g in groups}
    top, other = metrics._top("syscalls", totals, 2)  # noqa: SLF001 - the shared top-N state
    calls = CounterMetricFamily("ktop_syscalls", "system calls made, by syscall (top N by "
                                "calls; the rest as syscall=\"other\")", labels=["syscall"])
    seconds = CounterMetricFamily("ktop_syscall_seconds", "time spent in system calls, entry "
                                  "to exit, by syscall", labels=["syscall"])
    for name, values in [*top, (OTHER, other)]:
        calls.add_metric([label_value(name)], values[0])
        seconds.add_metric([label_value(name)], values[1])
    failing = {(g.syscall, g.errno): (float(g.count),) for g in by_errno(profile)}
    top_errors, other_errors = metrics._top("syscall_errors", failing, 1)  # noqa: SLF001
    errors = CounterMetricFamily("ktop_syscall_errors", "failed system calls, by syscall and "
                                 "errno (top N; the rest as \"other\")",
                                 labels=["syscall", "errno"])
    for (name, err), values in top_errors:
        errors.add_metric([label_value(name), label_value(err)], values[0])
    errors.add_metric([OTHER, OTHER], other_errors[0])
    lost = CounterMetricFamily("ktop_syscall_lost_events", "system calls not counted whole, "
                               "by reason", labels=["reason"])
    for reason, count in sorted(profile.lost.items()):
        lost.add_metric([label_value(reason)], float(count))
    return [calls, seconds, errors, lost]


def csv_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    profile = snapshot.syscalls
    if profile is None:
        return [""] * len(CSV_COLUMNS)
    calls = sum(c.count for c in profile.calls)
    errors = sum(c.count for c in profile.calls if c.errno)
    busiest = max(by_syscall(profile), key=lambda g: g.count, default=None)
    failing = by_errno(profile)
    worst = failing[0] if failing else None
    return [calls, errors, f"{sum(c.total_ns for c in profile.calls) / 1e6:.3f}",
            csv_cell(busiest.syscall) if busiest else "", busiest.count if busiest else "",
            csv_cell(f"{worst.errno} {worst.syscall}") if worst else "",
            worst.count if worst else ""]
