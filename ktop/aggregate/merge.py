"""Recorded intervals as one window: a replay's Snapshot.

Each record holds one interval alone (what each aggregator's profile(latest=True) built).
Each pane's profiles are summed by its merge (ktop.registry: its aggregator's merge_profiles),
which counts them back into the counts the live window keeps and builds the profile as
live does: one fold for live and replay. The processes pane, the losses (counted since start) and the rest come
from the newest record, as live.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ktop.aggregate.diskstats import merge_profiles as merge_iostat
from ktop.collectors.procstat import merge_times
from ktop.model import Snapshot
from ktop.registry import PANES


def merge_snapshots(snapshots: Sequence[Snapshot]) -> Snapshot:
    """Records of consecutive intervals, oldest first, as one window (see the module)."""
    if len(snapshots) == 1:
        return snapshots[0]
    newest = snapshots[-1]

    def merged(name: str, fold: Callable[[list[Any]], Any]) -> Any:
        profiles = [getattr(s, name) for s in snapshots if getattr(s, name) is not None]
        return fold(profiles) if profiles else None

    profiles = {spec.field: merged(spec.field, spec.merge) for spec in PANES if spec.merge}
    cpu_profile = profiles.get("cpu")
    # Without CPU samples (recorded without root) the /proc/stat split is the window's too.
    split = [(s.cpu_times, s.duration_s) for s in snapshots if s.cpu_times is not None]
    return dataclasses.replace(
        newest,
        **profiles,
        cpu_times=merge_times(*zip(*split)) if split else None,
        iostat=merged("iostat", merge_iostat),
        duration_s=cpu_profile.window_s if cpu_profile else sum(s.duration_s for s in snapshots),
    )
