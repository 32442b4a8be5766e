"""The syscalls pane's definition (its entry in ktop.registry). Imports nothing of its own
parts at module level: each is loaded when used."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ktop.panedef import (
    Aggregator,
    Collector,
    Comparison,
    CsvColumns,
    Figure,
    FoldedExport,
    PaneDef,
    PaneServices,
    PprofExport,
    Shows,
    WeightedStack,
)

if TYPE_CHECKING:
    from ktop.model import Snapshot
    from ktop.panes.syscalls.model import SyscallProfile

PANE_SYSCALLS = "syscalls"


def _widget() -> type[Any]:
    from ktop.panes.syscalls.widget import SyscallsPane  # noqa: PLC0415

    return SyscallsPane


def _build(source: PaneServices) -> tuple[Collector, Aggregator]:
    from ktop.panes.syscalls.aggregate import build  # noqa: PLC0415

    return build(source)


def _merge(profiles: Sequence[SyscallProfile]) -> SyscallProfile:
    from ktop.panes.syscalls.aggregate import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _calls(snapshot: Snapshot) -> float:
    """Every call in the interval (drawn per second)."""
    profile = snapshot.syscalls
    return float(sum(c.count for c in profile.calls)) if profile else math.nan


def _per_second(snapshot: Snapshot) -> float:
    profile = snapshot.syscalls
    window = (profile.window_s if profile else 0.0) or snapshot.duration_s
    return 1.0 / window if window > 0 else 0.0


def _compared(snapshot: Snapshot, shows: Shows | None) -> Sequence[Any]:
    from ktop.panes.syscalls.views import by_syscall  # noqa: PLC0415

    return by_syscall(snapshot.syscalls, shows) if snapshot.syscalls else ()


def _stacks(snapshot: Snapshot, group: Any) -> Iterable[WeightedStack]:
    from ktop.panes.syscalls.exports import slow_stack_frames  # noqa: PLC0415

    for slow in snapshot.syscalls.slow if snapshot.syscalls else ():
        if slow.syscall == group.syscall:
            yield slow_stack_frames(slow), float(slow.count)


def _folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.panes.syscalls.exports import slow_stacks  # noqa: PLC0415

    return slow_stacks(snapshot, include_idle)


def _pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    from ktop.panes.syscalls.exports import add_pprof  # noqa: PLC0415

    add_pprof(tables, snapshot, include_idle)


def _csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.panes.syscalls.exports import csv_cells  # noqa: PLC0415

    return csv_cells(snapshot, show_idle)


def _metrics(metrics: Any, snapshot: Snapshot) -> list[Any]:
    from ktop.panes.syscalls.exports import metric_families  # noqa: PLC0415

    return metric_families(metrics, snapshot)


SYSCALLS = PaneDef(
    name=PANE_SYSCALLS, field="syscalls", title="Syscalls", key_label="Syscalls",
    short_label="Sys", drill_by="key", widget=_widget, build=_build, merge=_merge,
    figure=Figure("syscalls", "sys", _calls, "/s", True), loss_prefix="sys",
    bpf_programs=("sc_sys_", "sc_sched_switch"),
    # Calls a second, syscall by syscall; a syscall's stacks are its slow calls'.
    compare=Comparison(
        "calls/s", "/s", _compared, key=lambda g: (g.syscall,), name=lambda g: g.syscall,
        amount=lambda g: g.count, scale=_per_second, stacks=_stacks, stack_scale=_per_second,
        folded_of="syscalls"),
    folded=(FoldedExport("syscalls", "slow syscalls' time in us", _folded),),
    pprof=PprofExport("syscalls", "system calls: count and time, slow ones with their stacks",
                      (("calls", "count"), ("syscalls", "nanoseconds")), "syscalls", _pprof),
    csv=CsvColumns(("syscalls", "syscall_errors", "syscall_ms", "top_syscall",
                    "top_syscall_calls", "top_syscall_errno", "top_syscall_errno_calls"), _csv),
    metrics=_metrics,
)
