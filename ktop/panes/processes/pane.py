"""The processes pane's entry in ktop.registry: what it is, how it compares, its CSV."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ktop.model import EXITED_PID, ProcessRow, Snapshot
from ktop.panedef import Comparison, CsvColumns, PaneDef, Shows, WeightedStack

if TYPE_CHECKING:
    from ktop.ui.widgets.pane import Pane


def _processes_widget() -> type[Pane]:
    from ktop.panes.processes.widget import ProcessesPane  # noqa: PLC0415

    return ProcessesPane


def _reader() -> Any:
    from ktop.panes.processes.collector import ProcessCollector  # noqa: PLC0415

    return ProcessCollector()


def _compared_processes(snapshot: Snapshot, shows: Shows | None) -> Sequence[ProcessRow]:
    return [p for p in snapshot.processes if shows is None or shows(p.parent or p.pid, p.cgroup)]


def _process_name(p: ProcessRow) -> str:
    if p.pid == EXITED_PID:
        return f"<children of {p.parent}> {p.comm}"
    return f"{p.pid} {p.comm}"


def _cpu_scale(snapshot: Snapshot) -> float:
    """Samples -> % of the machine's CPU time over the window (as the functions pane's)."""
    cpu = snapshot.cpu
    expected = cpu.sample_hz * cpu.window_s * cpu.cpus if cpu else 0.0
    return 100.0 / expected if expected else 0.0


def _process_stacks(snapshot: Snapshot, p: ProcessRow) -> Iterable[WeightedStack]:
    """What the process did on a CPU: its sampled stacks (none for exited children)."""
    from ktop.exports.folded import cpu_stack_frames  # noqa: PLC0415

    for stack in snapshot.cpu.stacks if snapshot.cpu and p.pid != EXITED_PID else ():
        if stack.pid == p.pid and not stack.idle and (stack.frames or stack.user_frames):
            yield cpu_stack_frames(stack), stack.samples


def _processes_csv(snapshot: Snapshot, show_idle: bool) -> list[object]:
    from ktop.panes.processes.exports import csv_cells  # noqa: PLC0415

    return csv_cells(snapshot, show_idle)


def _metrics(metrics: Any, snapshot: Snapshot) -> list[Any]:
    from ktop.panes.processes.metrics import metric_families  # noqa: PLC0415

    return metric_families(metrics, snapshot)


PROCESSES = PaneDef(
    name="processes", field="processes", title="Processes", key_label="Processes",
    short_label="Procs", drill_by="pid", widget=_processes_widget, reader=_reader,
    rounding={ProcessRow: {"disk_read_bps": 0, "disk_write_bps": 0}},
    # CPU% is a rate already; its stacks are its CPU samples, as a share of the machine.
    compare=Comparison(
        "CPU%", "%", _compared_processes, key=lambda p: (p.pid, p.parent, p.comm),
        name=_process_name, amount=lambda p: p.cpu_percent, scale=lambda _: 1.0,
        stacks=_process_stacks, stack_scale=_cpu_scale, folded_of="cpu",
        command_key=lambda p: (p.pid == EXITED_PID, p.comm),
        command_name=lambda p: f"<children of {p.comm}>" if p.pid == EXITED_PID else p.comm),
    csv=CsvColumns(("processes",), _processes_csv),
    metrics=_metrics,
)
