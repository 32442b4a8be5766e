"""Every pane, once: what each is, in screen order (a pane's number key is its place here).

The engine builds the BPF panes' collectors and aggregators from this list, the app lays out
their widgets, the header names their losses, a replay merges their profiles, a recording
draws their timeline figures, the JSON export rounds their floats, `--drill` and the help
name them. A new pane is its own files (collector, aggregator, widget), its profile's field
in model.Snapshot, and one entry here (plus its stylesheet, if it needs one).

Nothing here imports Textual or a collector: each part that does is imported when used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, Protocol

from ktop.model import (
    BlockProfile,
    CpuProfile,
    DiskStats,
    HotFunction,
    IoProcess,
    IoRequest,
    LockProfile,
    ProcessRow,
    Snapshot,
    WaitProfile,
)

if TYPE_CHECKING:
    from ktop.engine import LiveSource
    from ktop.ui.widgets.pane import Pane


class Collector(Protocol):
    """Loads and attaches its BPF program in start(); drain() empties what it counted."""

    def start(self) -> None: ...
    def drain(self) -> Any: ...
    def close(self) -> None: ...


class Aggregator(Protocol):
    """Folds drains into a window and builds the pane's profile from it: the window's, the
    totals since start (cumulative), or the newest interval's alone (latest, for a record)."""

    def add(self, drain: Any) -> None: ...
    def profile(self, cumulative: bool = False, latest: bool = False) -> Any: ...
    def fold_exited(self, is_alive: Callable[[int], bool]) -> None: ...


@dataclass(frozen=True)
class Figure:
    """One figure of each recorded interval, drawn as a sparkline on the replay's timeline."""

    label: str
    short: str  # the label on a narrow screen
    value: Callable[[Snapshot], float]  # NaN when the interval has no data for it
    unit: str  # after the scale's top value: "%", "ms"
    per_second: bool = False  # drawn divided by the interval's length


@dataclass(frozen=True)
class PaneDef:
    """One pane. Building may raise collectors.bpfload.Unavailable: the pane then says why."""

    name: str  # --drill NAME:..., keys of Snapshot.unavailable and .loading, widget ids
    field: str  # the Snapshot field holding its profile
    title: str  # its border title, after its number
    key_label: str  # beside its number key in the help and on the tabs
    short_label: str  # on the tabs, when the full labels do not fit
    drill_by: str  # the field of its rows `--drill NAME:WHAT` names one by
    widget: Callable[[], type[Pane]]  # imports the widget class
    build: Callable[[LiveSource], tuple[Collector, Aggregator]] | None = None  # None: no BPF
    merge: Callable[[Sequence[Any]], Any] | None = None  # records -> one window's profile
    figure: Figure | None = None
    loss_prefix: str = ""  # the header's and L's name for its losses ("cpu.kstack_collision")
    # Its BPF programs, by the start of their names as the kernel keeps them (15 characters):
    # their run time is shown per pane in the header and on L.
    bpf_programs: tuple[str, ...] = ()
    rounding: Mapping[type, Mapping[str, int]] = dataclass_field(default_factory=dict)  # JSON digits

    @property
    def number(self) -> int:
        return PANES.index(self) + 1

    @property
    def numbered_title(self) -> str:
        return f"{self.number} {self.title}"


# ---- hot kernel functions -----------------------------------------------------------------


def _functions_widget() -> type[Pane]:
    from ktop.ui.widgets.functions import FunctionsPane  # noqa: PLC0415

    return FunctionsPane


def _build_functions(source: LiveSource) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.cpu import build  # noqa: PLC0415

    return build(source)


def _merge_functions(profiles: Sequence[CpuProfile]) -> CpuProfile:
    from ktop.aggregate.cpu import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _kernel_percent(snapshot: Snapshot) -> float:
    return snapshot.cpu.times.kernel if snapshot.cpu else math.nan


# ---- lock contention ----------------------------------------------------------------------


def _locks_widget() -> type[Pane]:
    from ktop.ui.widgets.locks import LocksPane  # noqa: PLC0415

    return LocksPane


def _build_locks(source: LiveSource) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.locks import build  # noqa: PLC0415

    return build(source)


def _merge_locks(profiles: Sequence[LockProfile]) -> LockProfile:
    from ktop.aggregate.locks import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _lock_wait_ms(snapshot: Snapshot) -> float:
    locks = snapshot.locks
    return sum(c.total_wait_ns for c in locks.callers) / 1e6 if locks else math.nan


# ---- block I/O ----------------------------------------------------------------------------


def _blockio_widget() -> type[Pane]:
    from ktop.ui.widgets.blockio import BlockIoPane  # noqa: PLC0415

    return BlockIoPane


def _build_blockio(source: LiveSource) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.blockio import build  # noqa: PLC0415

    return build(source)


def _merge_blockio(profiles: Sequence[BlockProfile]) -> BlockProfile:
    from ktop.aggregate.blockio import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _io_latency_ms(snapshot: Snapshot) -> float:
    io = snapshot.blockio
    if io is None:
        return math.nan
    requests = sum(d.reads + d.writes for d in io.disks)
    weighted = sum(d.avg_lat_ms * (d.reads + d.writes) for d in io.disks)
    return weighted / requests if requests else 0.0


# ---- processes ----------------------------------------------------------------------------


def _processes_widget() -> type[Pane]:
    from ktop.ui.widgets.processes import ProcessesPane  # noqa: PLC0415

    return ProcessesPane


# ---- waits (off-CPU) ----------------------------------------------------------------------


def _waits_widget() -> type[Pane]:
    from ktop.ui.widgets.waits import WaitsPane  # noqa: PLC0415

    return WaitsPane


def _build_waits(source: LiveSource) -> tuple[Collector, Aggregator]:
    from ktop.aggregate.waits import build  # noqa: PLC0415

    return build(source)


def _merge_waits(profiles: Sequence[WaitProfile]) -> WaitProfile:
    from ktop.aggregate.waits import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _runq_ms(snapshot: Snapshot) -> float:
    """Every thread's time waiting for a CPU (drawn per second: ms a second)."""
    waits = snapshot.waits
    return sum(p.runq_ns for p in waits.processes) / 1e6 if waits else math.nan


# In screen order; the BPF panes load in this order too (the first is what a user looks at
# first).
PANES: list[PaneDef] = [
    PaneDef(
        name="functions", field="cpu", title="Hot kernel functions", key_label="Hot functions",
        short_label="Functions", drill_by="symbol", widget=_functions_widget,
        build=_build_functions, merge=_merge_functions,
        figure=Figure("kernel CPU", "kern", _kernel_percent, "%"), loss_prefix="cpu",
        bpf_programs=("on_cpu_sample",),
        # (spans and CPU shares are written whole: the exports of a replayed file use them)
        rounding={HotFunction: {"percent": 3, "children_percent": 3}},
    ),
    PaneDef(
        name="locks", field="locks", title="Lock contention", key_label="Lock contention",
        short_label="Locks", drill_by="caller", widget=_locks_widget, build=_build_locks,
        merge=_merge_locks, figure=Figure("lock wait", "lock", _lock_wait_ms, "ms/s", True),
        loss_prefix="lock", bpf_programs=("on_contention_",),
    ),
    PaneDef(
        name="blockio", field="blockio", title="Block I/O", key_label="Block I/O",
        short_label="I/O", drill_by="pid", widget=_blockio_widget, build=_build_blockio,
        merge=_merge_blockio, figure=Figure("I/O latency", "I/O", _io_latency_ms, "ms"),
        loss_prefix="io", bpf_programs=("block_",),
        rounding={DiskStats: {"avg_lat_ms": 4}, IoProcess: {"avg_queue_ms": 4},
                  IoRequest: {"time_s": 6, "queue_ms": 4, "lat_ms": 4}},
    ),
    PaneDef(
        name="processes", field="processes", title="Processes", key_label="Processes",
        short_label="Procs", drill_by="pid", widget=_processes_widget,
        rounding={ProcessRow: {"disk_read_bps": 0, "disk_write_bps": 0}},
    ),
    PaneDef(
        name="waits", field="waits", title="Waits (off-CPU)", key_label="Waits",
        short_label="Waits", drill_by="key", widget=_waits_widget, build=_build_waits,
        merge=_merge_waits, figure=Figure("run queue", "runq", _runq_ms, "ms/s", True),
        loss_prefix="wait", bpf_programs=("on_sched_", "waits_"),
    ),
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


def figured_panes() -> list[PaneDef]:
    """The panes with a timeline figure, in the order a record's frame keeps them."""
    return [spec for spec in PANES if spec.figure is not None]
