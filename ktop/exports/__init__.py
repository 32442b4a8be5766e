"""Data exports of a Snapshot, for the engines fleets already run: JSON (ktop's own), folded
stacks (flame graphs, Pyroscope), pprof (go tool pprof, Pyroscope, Parca) and Prometheus text
(node_exporter's textfile collector; `ktop --serve` serves the same metrics live).

Each takes a Snapshot, so a live run, a replayed file or a recording feed them alike. The
modules are imported when asked for: the TUI never loads protobuf or prometheus_client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ktop.model import Snapshot

DATA_FORMATS = ("json", "folded", "pprof", "prom")


@dataclass(frozen=True)
class ExportOptions:
    include_idle: bool = False
    folded_of: str = "cpu"  # a pane's folded stacks (ktop.registry.folded_exports)
    pprof_of: str = "cpu"  # a pane's pprof profile (ktop.registry.pprof_exports)
    top: int = 20  # series per metric before the rest is summed into `other`


def export(fmt: str, snapshot: Snapshot, options: ExportOptions = ExportOptions()) -> str | bytes:
    """The snapshot in one of DATA_FORMATS: text, or bytes for pprof."""
    if fmt == "json":
        from ktop.exports.jsonfile import to_json

        return json.dumps(to_json(snapshot, include_idle=options.include_idle), indent=1) + "\n"
    if fmt == "folded":
        from ktop.exports.folded import to_folded

        return to_folded(snapshot, options.folded_of, options.include_idle)
    if fmt == "pprof":
        from ktop.exports.pprof import to_pprof

        return to_pprof(snapshot, options.include_idle, options.pprof_of)
    if fmt == "prom":
        from ktop.exports.openmetrics import to_prom

        return to_prom(snapshot, options.top, options.include_idle)
    raise ValueError(f"no data format {fmt!r}")
