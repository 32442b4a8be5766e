"""The processes pane's Prometheus / OpenMetrics families (apart from its other exports:
prometheus_client, and ssl with it, is imported by --serve and .prom files alone)."""

from __future__ import annotations

from typing import cast

from prometheus_client.core import GaugeMetricFamily, Metric

from ktop.cgroups import short_name
from ktop.exports.openmetrics import (
    OTHER,
    SnapshotMetrics,
    _add_rows,
    _ratio,
    label_value,
    top_keys,
)
from ktop.model import ProcessRow, Snapshot


def metric_families(metrics: SnapshotMetrics, snapshot: Snapshot) -> list[Metric]:
    """Its Prometheus / OpenMetrics families (PaneDef.metrics)."""
    cpu = GaugeMetricFamily(
        "ktop_process_cpu_ratio", "CPU of the processes of each command and cgroup over "
        "the last refresh (1 = one CPU), by mode (top N by CPU; the rest as "
        "comm=\"other\")", labels=["comm", "cgroup", "mode"])
    # (cpu, system) by (comm, cgroup as ktop names it), never by pid: every pid would be
    # a series Prometheus keeps, and pids churn (498 series in 8 minutes of short dd).
    # Exited children's rows count under their parent's command, as on the screen.
    values: dict[tuple[str, str], tuple[float, float]] = {}
    for p in snapshot.processes:
        key = (label_value(command_label(p)), label_value(short_name(p.cgroup)))
        busy, system = values.get(key, (0.0, 0.0))
        values[key] = (busy + p.cpu_percent, system + p.sys_percent)
    top = cast(list[tuple[str, str]],
               top_keys({key: busy for key, (busy, _) in values.items()}, metrics.top))
    picked = set(top)
    rest = [v for key, v in values.items() if key not in picked]
    rows = []
    for comm, cgroup in top:
        busy, system = values[(comm, cgroup)]
        rows.append(((comm, cgroup, "system"), _ratio(system)))
        rows.append(((comm, cgroup, "user"), _ratio(busy - system)))
    system = sum(s for _, s in rest)
    rows.append(((OTHER, OTHER, "system"), _ratio(system)))
    rows.append(((OTHER, OTHER, "user"), _ratio(sum(c for c, _ in rest) - system)))
    _add_rows(cpu, rows)
    return [cpu]


def command_label(process: ProcessRow) -> str:
    """A process's command as a label value. A kernel thread (no command line) is named by
    what comes before its instance: the kernel renames its workers as they take work
    ("kworker/1:2-events", "kworker/u8:0-writeback") and numbers them per CPU
    ("ksoftirqd/0"), a series each that comes and goes."""
    if not process.cmdline and process.pid > 0:
        return process.comm.split("/", 1)[0]
    return process.comm
