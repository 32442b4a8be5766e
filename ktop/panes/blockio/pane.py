"""The block I/O pane's entry in ktop.registry: what it is, its figure, exports, compare."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ktop.model import BlockProfile, DiskStats, IoProcess, IoRequest, Snapshot
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
    from ktop.ui.widgets.pane import Pane


def _blockio_widget() -> type[Pane]:
    from ktop.panes.blockio.widget import BlockIoPane  # noqa: PLC0415

    return BlockIoPane


def _build_blockio(source: PaneServices) -> tuple[Collector, Aggregator]:
    from ktop.panes.blockio.aggregate import build  # noqa: PLC0415

    return build(source)


def _merge_blockio(profiles: Sequence[BlockProfile]) -> BlockProfile:
    from ktop.panes.blockio.aggregate import merge_profiles  # noqa: PLC0415

    return merge_profiles(profiles)


def _io_latency_ms(snapshot: Snapshot) -> float:
    io = snapshot.blockio
    if io is None:
        return math.nan
    requests = sum(d.reads + d.writes for d in io.disks)
    weighted = sum(d.avg_lat_ms * (d.reads + d.writes) for d in io.disks)
    return weighted / requests if requests else 0.0


def _io_scale(snapshot: Snapshot) -> float:
    """Bytes -> bytes a second of the window."""
    window = snapshot.blockio.window_s if snapshot.blockio else 0.0
    window = window or snapshot.duration_s
    return 1.0 / window if window > 0 else 0.0


def _compared_io(snapshot: Snapshot, shows: Shows | None) -> Sequence[IoProcess]:
    block = snapshot.blockio
    if block is None:
        return ()
    return [p for p in block.processes if shows is None or shows(p.pid, p.cgroup)]


def _io_stacks(snapshot: Snapshot, process: IoProcess) -> Iterable[WeightedStack]:
    from ktop.panes.blockio.exports import io_process_stacks  # noqa: PLC0415

    return io_process_stacks(process, process.bytes)


def _io_bytes_folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.panes.blockio.exports import io_byte_stacks  # noqa: PLC0415

    return io_byte_stacks(snapshot, include_idle)


def _io_latency_folded(snapshot: Snapshot, include_idle: bool) -> Iterable[WeightedStack]:
    from ktop.panes.blockio.exports import io_latency_stacks  # noqa: PLC0415

    return io_latency_stacks(snapshot, include_idle)


def _io_pprof(tables: Any, snapshot: Snapshot, include_idle: bool) -> None:
    from ktop.panes.blockio.exports import add_pprof  # noqa: PLC0415

    add_pprof(tables, snapshot, include_idle)


def _blockio_csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.panes.blockio.exports import csv_cells  # noqa: PLC0415

    return csv_cells(snapshot, show_idle)


BLOCKIO = PaneDef(
    name="blockio", field="blockio", title="Block I/O", key_label="Block I/O",
    short_label="I/O", drill_by="pid", widget=_blockio_widget, build=_build_blockio,
    merge=_merge_blockio, figure=Figure("I/O latency", "I/O", _io_latency_ms, "ms"),
    loss_prefix="io", bpf_programs=("block_",),
    rounding={DiskStats: {"avg_lat_ms": 4}, IoProcess: {"avg_queue_ms": 4},
              IoRequest: {"time_s": 6, "queue_ms": 4, "lat_ms": 4}},
    compare=Comparison(
        "bytes/s", "B/s", _compared_io, key=lambda p: (p.pid, p.comm, p.disk, p.rw),
        name=lambda p: f"{p.pid} {p.comm} {p.disk} {p.rw}", amount=lambda p: p.bytes,
        scale=_io_scale, stacks=_io_stacks, stack_scale=_io_scale, folded_of="io",
        command_key=lambda p: (p.comm, p.disk, p.rw),
        command_name=lambda p: f"{p.comm} {p.disk} {p.rw}"),
    folded=(FoldedExport("io", "I/O bytes submitted", _io_bytes_folded),
            FoldedExport("io-latency", "I/O latency in us", _io_latency_folded)),
    pprof=PprofExport("io", "I/O requests, bytes and latency",
                      (("io_requests", "count"), ("io", "bytes"),
                       ("io_latency", "nanoseconds")), "io", _io_pprof),
    csv=CsvColumns(("io_requests", "io_bytes", "io_avg_latency_ms", "top_io_pid",
                    "top_io_comm", "top_io_bytes"), _blockio_csv),
    metrics=lambda metrics, snapshot: metrics.blockio_families(snapshot),
)
