"""Every pane, once: what each is, in screen order (a pane's number key is its place here).

The engine builds the BPF panes' collectors and aggregators from this list, the app lays out
their widgets, the header names their losses, a replay merges their profiles, a recording
draws their timeline figures, the JSON export rounds their floats, `--drill` and the help
name them. A new pane is its own files (collector, aggregator, widget), its profile's field
in model.Snapshot, and one entry here (plus its stylesheet, if it needs one).

Nothing here imports Textual or a collector: each part that does is imported when used.
What a pane is (PaneDef and its parts) is described in ktop.panedef, which imports no pane.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ktop.lockviews import caller_waits_of
from ktop.model import (
    CpuProfile,
    HotFunction,
    LockCaller,
    LockProfile,
    Snapshot,
    WaitProfile,
)
from ktop.panedef import (
    PANES,
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
    StackSource,
    WeightedStack,
)
from ktop.panes.blockio.pane import BLOCKIO
from ktop.panes.processes.pane import PROCESSES
from ktop.panes.syscalls.pane import SYSCALLS

if TYPE_CHECKING:
    from ktop.ui.widgets.pane import Pane

__all__ = ["PANES", "Aggregator", "Collector", "Comparison", "CsvColumns", "Figure",
           "FoldedExport", "PaneDef", "PaneServices", "PprofExport", "Shows", "StackSource",
           "WeightedStack", "bpf_panes", "figured_panes", "folded_exports", "pane",
           "pprof_exports"]


# ---- hot kernel functions -----------------------------------------------------------------


def _functions_widget() -> type[Pane]:
    from ktop.ui.widgets.functions import FunctionsPane  # noqa: PLC0415

    return FunctionsPane


def _build_functions(source: PaneServices) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.cpu import build  # noqa: PLC0415

    return build(source)


def _merge_functions(profiles: Sequence[CpuProfile]) -> CpuProfile:
    from ktop.aggregate.cpu import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _kernel_percent(snapshot: Snapshot) -> float:
    return snapshot.cpu.times.kernel if snapshot.cpu else math.nan


def _cpu_scale(snapshot: Snapshot) -> float:
    """Samples -> % of the machine's CPU time over the window (as Overhead is)."""
    cpu = snapshot.cpu
    expected = cpu.sample_hz * cpu.window_s * cpu.cpus if cpu else 0.0
    return 100.0 / expected if expected else 0.0


def _compared_functions(snapshot: Snapshot, shows: Shows | None) -> Sequence[HotFunction]:
    """The functions samples landed in (Self), idle ones left out: they compare nothing."""
    cpu = snapshot.cpu
    if cpu is None:
        return ()
    functions: Sequence[HotFunction] = cpu.functions
    if shows is not None:  # the sampler's data for the processes shown alone, as the pane
        from ktop.stacktree import hot_functions  # noqa: PLC0415

        functions = hot_functions((s for s in cpu.stacks if shows(s.pid, s.cgroup)),
                                  cpu.sample_hz * cpu.window_s * cpu.cpus)
    return [f for f in functions if f.samples and not f.idle]


def _function_name(function: HotFunction) -> str:
    kernel = function.module in ("", "[kernel.kallsyms]")
    return function.symbol if kernel else f"{function.symbol} {function.module}"


def _function_stacks(snapshot: Snapshot, function: HotFunction) -> Iterable[WeightedStack]:
    """The stacks whose samples landed in the function, as the folded export writes them."""
    from ktop.exports.folded import cpu_stack_frames  # noqa: PLC0415
    from ktop.stacktree import function_name  # noqa: PLC0415

    for stack in snapshot.cpu.stacks if snapshot.cpu else ():
        if (stack.frames and not stack.idle
                and function_name(stack.frames[0]) == function.symbol
                and (stack.modules[0] if stack.modules else "") == function.module):
            yield cpu_stack_frames(stack), stack.samples


def _cpu_folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.exports.folded import cpu_stacks  # noqa: PLC0415

    return cpu_stacks(snapshot, include_idle)


def _cpu_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    from ktop.exports.pprof import add_cpu  # noqa: PLC0415

    add_cpu(tables, snapshot, include_idle)


def _functions_csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.record.dump import functions_cells  # noqa: PLC0415

    return functions_cells(snapshot, show_idle)


# ---- lock contention ----------------------------------------------------------------------


def _locks_widget() -> type[Pane]:
    from ktop.ui.widgets.locks import LocksPane  # noqa: PLC0415

    return LocksPane


def _build_locks(source: PaneServices) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.locks import build  # noqa: PLC0415

    return build(source)


def _merge_locks(profiles: Sequence[LockProfile]) -> LockProfile:
    from ktop.aggregate.locks import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _lock_wait_ms(snapshot: Snapshot) -> float:
    locks = snapshot.locks
    return sum(c.total_wait_ns for c in locks.callers) / 1e6 if locks else math.nan


def _compared_callers(snapshot: Snapshot, shows: Shows | None) -> Sequence[LockCaller]:
    """Each caller's waits, by the tasks shown alone when filtered (as the pane)."""
    locks = snapshot.locks
    if locks is None:
        return ()
    if shows is None:
        return locks.callers
    return [waits for c in locks.callers if (waits := caller_waits_of(c, shows)) is not None]


def _lock_scale(snapshot: Snapshot) -> float:
    """Wait ns -> ms of waiting a second of the window."""
    window = snapshot.locks.window_s if snapshot.locks else 0.0
    window = window or snapshot.duration_s
    return 1e-6 / window if window > 0 else 0.0


def _lock_stacks(snapshot: Snapshot, caller: LockCaller) -> Iterable[WeightedStack]:
    from ktop.exports.folded import lock_stacks  # noqa: PLC0415

    return lock_stacks(caller)


def _locks_folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.exports.folded import lock_wait_stacks  # noqa: PLC0415

    return lock_wait_stacks(snapshot, include_idle)


def _locks_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    from ktop.exports.pprof import add_locks  # noqa: PLC0415

    add_locks(tables, snapshot, include_idle)


def _locks_csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.record.dump import locks_cells  # noqa: PLC0415

    return locks_cells(snapshot, show_idle)


# ---- waits (off-CPU) ----------------------------------------------------------------------


def _waits_widget() -> type[Pane]:
    from ktop.ui.widgets.waits import WaitsPane  # noqa: PLC0415

    return WaitsPane


def _build_waits(source: PaneServices) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.waits import build  # noqa: PLC0415

    return build(source)


def _merge_waits(profiles: Sequence[WaitProfile]) -> WaitProfile:
    from ktop.aggregate.waits import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _runq_ms(snapshot: Snapshot) -> float:
    """Every thread's time waiting for a CPU (drawn per second: ms a second)."""
    waits = snapshot.waits
    return sum(p.runq_ns for p in waits.processes) / 1e6 if waits else math.nan


def _waits_scale(snapshot: Snapshot) -> float:
    """Wait ns -> % of one thread's time over the window (threads add up past 100)."""
    window = snapshot.waits.window_s if snapshot.waits else 0.0
    window = window or snapshot.duration_s
    return 100.0 / (window * 1e9) if window > 0 else 0.0


def _compared_waits(snapshot: Snapshot, shows: Shows | None) -> Sequence[Any]:
    from ktop.waitviews import by_process  # noqa: PLC0415

    return by_process(snapshot.waits, shows) if snapshot.waits else ()


def _wait_stacks(snapshot: Snapshot, group: Any) -> Iterable[WeightedStack]:
    from ktop.exports.folded import wait_stack_frames  # noqa: PLC0415

    for stack in snapshot.waits.stacks if snapshot.waits else ():
        if stack.pid == group.pid:
            yield wait_stack_frames(stack), stack.total_ns


def _offcpu_folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.exports.folded import offcpu_stacks  # noqa: PLC0415

    return offcpu_stacks(snapshot, include_idle)


def _waits_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    from ktop.exports.pprof import add_waits  # noqa: PLC0415

    add_waits(tables, snapshot, include_idle)


def _waits_csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.record.dump import waits_cells  # noqa: PLC0415

    return waits_cells(snapshot, show_idle)


# ---- endings (signals and exits) ------------------------------------------------------------


def _endings_widget() -> type[Pane]:
    from ktop.panes.endings.widget import EndingsPane  # noqa: PLC0415

    return EndingsPane


def _build_endings(source: PaneServices) -> tuple[Collector, Aggregator]:
    from ktop.panes.endings.aggregate import build  # noqa: PLC0415

    return build(source)


def _merge_endings(profiles: Sequence[Any]) -> Any:
    from ktop.panes.endings.aggregate import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _endings_csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.panes.endings.exports import csv_cells  # noqa: PLC0415

    return csv_cells(snapshot, show_idle)


def _endings_folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.panes.endings.exports import folded_stacks  # noqa: PLC0415

    return folded_stacks(snapshot, include_idle)


def _endings_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    from ktop.panes.endings.exports import add_pprof  # noqa: PLC0415

    add_pprof(tables, snapshot, include_idle)


def _compared_signals(snapshot: Snapshot, shows: Shows | None) -> Sequence[Any]:
    endings = snapshot.endings
    if endings is None:
        return ()
    return [c for c in endings.counts
            if shows is None or shows(c.sender_pid, c.cgroup) or shows(c.target_pid, "")]


def _signals_scale(snapshot: Snapshot) -> float:
    """Signals -> signals a second of the window."""
    window = snapshot.endings.window_s if snapshot.endings else 0.0
    window = window or snapshot.duration_s
    return 1.0 / window if window > 0 else 0.0


def _signal_stacks(snapshot: Snapshot, row: Any) -> Iterable[WeightedStack]:
    from ktop.panes.endings.exports import sender_stack  # noqa: PLC0415

    for s in snapshot.endings.signals if snapshot.endings else ():
        if (s.sig, s.sender_comm, s.target_comm) == (row.sig, row.sender_comm, row.target_comm):
            yield sender_stack(s), 1


def _endings_metrics(metrics: Any, snapshot: Snapshot) -> list[Any]:
    from ktop.panes.endings.exports import metric_families  # noqa: PLC0415

    return metric_families(metrics, snapshot)


# In screen order; the BPF panes load in this order too (the first is what a user looks at
# first).
PANES[:] = [
    PaneDef(
        name="functions", field="cpu", title="Hot kernel functions", key_label="Hot functions",
        short_label="Functions", drill_by="symbol", widget=_functions_widget,
        build=_build_functions, merge=_merge_functions,
        figure=Figure("kernel CPU", "kern", _kernel_percent, "%"), loss_prefix="cpu",
        bpf_programs=("on_cpu_sample",),
        # (spans and CPU shares are written whole: the exports of a replayed file use them)
        rounding={HotFunction: {"percent": 3, "children_percent": 3}},
        compare=Comparison(
            "CPU%", "%", _compared_functions, key=lambda f: (f.symbol, f.module),
            name=_function_name, amount=lambda f: f.samples, scale=_cpu_scale,
            stacks=_function_stacks, stack_scale=_cpu_scale, folded_of="cpu"),
        folded=(FoldedExport("cpu", "CPU samples", _cpu_folded),),
        pprof=PprofExport("cpu", "CPU samples, as CPU time",
                          (("samples", "count"), ("cpu", "nanoseconds")), "cpu", _cpu_pprof),
        csv=CsvColumns(("cpu_kernel_pct", "cpu_user_pct", "cpu_idle_pct", "cpu_iowait_pct",
                        "cpu_steal_pct", "samples", "top_function", "top_function_pct"),
                       _functions_csv),
        metrics=lambda metrics, snapshot: metrics.functions_families(snapshot),
    ),
    PaneDef(
        name="locks", field="locks", title="Lock contention", key_label="Lock contention",
        short_label="Locks", drill_by="caller", widget=_locks_widget, build=_build_locks,
        merge=_merge_locks, figure=Figure("lock wait", "lock", _lock_wait_ms, "ms/s", True),
        loss_prefix="lock", bpf_programs=("on_contention_", "on_lock_"),
        compare=Comparison(
            "wait ms/s", "ms/s", _compared_callers, key=lambda c: (c.caller, c.type),
            name=lambda c: f"{c.caller} {c.type}", amount=lambda c: c.total_wait_ns,
            scale=_lock_scale, stacks=_lock_stacks, stack_scale=_lock_scale, folded_of="locks"),
        folded=(FoldedExport("locks", "lock wait in us", _locks_folded),),
        pprof=PprofExport("locks", "lock waits",
                          (("contentions", "count"), ("lock_wait", "nanoseconds")), "lock_wait",
                          _locks_pprof),
        csv=CsvColumns(("lock_contended", "lock_wait_ms", "top_lock_caller", "top_lock_wait_ms"),
                       _locks_csv),
        metrics=lambda metrics, snapshot: metrics.locks_families(snapshot),
    ),
    BLOCKIO,
    PROCESSES,
    PaneDef(
        name="waits", field="waits", title="Waits (off-CPU)", key_label="Waits",
        short_label="Waits", drill_by="key", widget=_waits_widget, build=_build_waits,
        merge=_merge_waits, figure=Figure("run queue", "runq", _runq_ms, "ms/s", True),
        loss_prefix="wait", bpf_programs=("on_sched_", "waits_"),
        # Every wait a process's threads made (run queue and blocked), as the pane orders them.
        compare=Comparison(
            "wait%", "%", _compared_waits, key=lambda g: (g.pid, g.comm),
            name=lambda g: f"{g.pid} {g.comm}", amount=lambda g: g.waiting_ns,
            scale=_waits_scale, stacks=_wait_stacks, stack_scale=_waits_scale,
            folded_of="offcpu", command_key=lambda g: (g.comm,), command_name=lambda g: g.comm),
        folded=(FoldedExport("offcpu", "blocked time in us", _offcpu_folded),),
        pprof=PprofExport("offcpu", "time off the CPU (blocked, and in the run queue)",
                          (("runqueue", "nanoseconds"), ("off_cpu", "nanoseconds")), "off_cpu",
                          _waits_pprof),
        csv=CsvColumns(("wait_runq_ms", "wait_blocked_s_ms", "wait_blocked_d_ms",
                        "wait_blocked_other_ms", "top_wait_pid", "top_wait_comm", "top_wait_ms",
                        "top_wait_reason"), _waits_csv),
        metrics=lambda metrics, snapshot: metrics.waits_families(snapshot),
    ),
    PaneDef(
        name="endings", field="endings", title="Endings (signals, exits)", key_label="Endings",
        short_label="Ends", drill_by="pid", widget=_endings_widget, build=_build_endings,
        merge=_merge_endings, loss_prefix="end",
        bpf_programs=("signal_generate", "sched_process_e", "mark_victim"),
        # Signals by (signal, sender, target): commands, not pids, as processes come and go.
        compare=Comparison(
            "signals/s", "/s", _compared_signals,
            key=lambda c: (c.signal, c.sender_comm, c.target_comm, c.result),
            name=lambda c: f"{c.signal} {c.sender_comm} -> {c.target_comm} {c.result}",
            amount=lambda c: c.count, scale=_signals_scale, stacks=_signal_stacks,
            stack_scale=_signals_scale, folded_of="signals"),
        folded=(FoldedExport("signals", "signals sent, by the sender's stacks",
                             _endings_folded),),
        pprof=PprofExport("signals", "signals sent, by the sender's stacks",
                          (("signals", "count"),), "signals", _endings_pprof),
        csv=CsvColumns(("ended", "ended_by_signal", "signals", "oom_kills", "last_killed_pid",
                        "last_killed_comm", "last_killed_how", "last_killed_by"), _endings_csv),
        metrics=_endings_metrics,
    ),
    SYSCALLS,
]


def pane(name: str) -> PaneDef:
    """The pane of that name (KeyError for none)."""
    for spec in PANES:
        if spec.name == name:
            return spec
    raise KeyError(name)


def bpf_panes() -> list[PaneDef]:
    """The panes whose data a BPF program collects, in load order."""
    return [spec for spec in PANES if spec.build is not None]


def process_reader() -> Any:
    """A new reader of the pane whose rows /proc gives (the processes pane's)."""
    return next(spec.reader for spec in PANES if spec.reader is not None)()


def figured_panes() -> list[PaneDef]:
    """The panes with a timeline figure, in the order a record's frame keeps them."""
    return [spec for spec in PANES if spec.figure is not None]


def folded_exports() -> dict[str, tuple[PaneDef, FoldedExport]]:
    """Every pane's folded stacks by their --folded-of name, in screen order."""
    return {export.name: (spec, export) for spec in PANES for export in spec.folded}


def pprof_exports() -> dict[str, tuple[PaneDef, PprofExport]]:
    """Every pane's pprof profile by its --pprof-of name, in screen order."""
    return {spec.pprof.name: (spec, spec.pprof) for spec in PANES if spec.pprof is not None}
