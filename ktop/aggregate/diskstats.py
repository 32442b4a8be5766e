"""/proc/diskstats intervals as a window, and iostat -x's columns from them.

The live window and a replay's window are the same sum (merge_profiles) of per-interval
counters; the columns are computed from the sum as sysstat's iostat computes them, over
the window's seconds."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields

from ktop.aggregate.window import trim_to_window
from ktop.model import DiskIo, IostatProfile

_GROWN = tuple(f.name for f in fields(DiskIo) if f.name not in ("disk", "major", "minor",
                                                                  "in_flight"))
SECTOR = 512


def merge_profiles(profiles: Sequence[IostatProfile]) -> IostatProfile:
    """Consecutive intervals, oldest first, as one: counters summed per disk, the newest
    in-flight count and name kept."""
    summed: dict[tuple[int, int], dict[str, int]] = {}
    names: dict[tuple[int, int], tuple[str, int]] = {}
    for profile in profiles:
        for disk in profile.disks:
            key = disk.major, disk.minor
            into = summed.setdefault(key, dict.fromkeys(_GROWN, 0))
            for name in _GROWN:
                into[name] += getattr(disk, name)
            names[key] = disk.disk, disk.in_flight
    disks = tuple(sorted(
        (DiskIo(names[key][0], key[0], key[1], in_flight=names[key][1], **counts)
         for key, counts in summed.items()),
        key=lambda d: (d.disk, d.major, d.minor)))
    return IostatProfile(span_s=sum(p.span_s for p in profiles), disks=disks)


class IostatWindow:
    """The newest intervals that span the window, and their sum since the first."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._recent: deque[IostatProfile] = deque()
        self._total: IostatProfile | None = None

    def add(self, interval: IostatProfile) -> None:
        self._recent.append(interval)
        trim_to_window(self._recent, self.window_s)
        self._total = interval if self._total is None else merge_profiles((self._total, interval))

    def clear(self) -> None:
        self._recent.clear()
        self._total = None

    def profile(self, cumulative: bool = False, latest: bool = False) -> IostatProfile | None:
        if not self._recent:
            return None
        if latest:
            return self._recent[-1]
        return self._total if cumulative else merge_profiles(self._recent)


@dataclass(frozen=True, slots=True)
class Iostat:
    """One disk's iostat -x line (sysstat's formulas), per second of the span."""

    disk: str
    r_s: float
    w_s: float
    rmb_s: float
    wmb_s: float
    rrqm_s: float
    wrqm_s: float
    rrqm_pct: float
    wrqm_pct: float
    r_await: float  # ms, queue included
    w_await: float
    aqu_sz: float
    rareq_sz: float  # kB
    wareq_sz: float
    d_s: float
    dmb_s: float
    d_await: float
    f_s: float
    f_await: float
    util: float  # %, at most 100


def _per(count: float, of: float) -> float:
    return count / of if of else 0.0


def iostat(disk: DiskIo, span_s: float) -> Iostat:
    mb = 1024 * 1024 / SECTOR  # sectors in a MB, as iostat -m counts them
    return Iostat(
        disk=disk.disk,
        r_s=_per(disk.reads, span_s),
        w_s=_per(disk.writes, span_s),
        rmb_s=_per(disk.read_sectors / mb, span_s),
        wmb_s=_per(disk.write_sectors / mb, span_s),
        rrqm_s=_per(disk.read_merges, span_s),
        wrqm_s=_per(disk.write_merges, span_s),
        rrqm_pct=100 * _per(disk.read_merges, disk.read_merges + disk.reads),
        wrqm_pct=100 * _per(disk.write_merges, disk.write_merges + disk.writes),
        r_await=_per(disk.read_ms, disk.reads),
        w_await=_per(disk.write_ms, disk.writes),
        aqu_sz=_per(disk.queue_ms / 1000, span_s),
        rareq_sz=_per(disk.read_sectors * SECTOR / 1024, disk.reads),
        wareq_sz=_per(disk.write_sectors * SECTOR / 1024, disk.writes),
        d_s=_per(disk.discards, span_s),
        dmb_s=_per(disk.discard_sectors / mb, span_s),
        d_await=_per(disk.discard_ms, disk.discards),
        f_s=_per(disk.flushes, span_s),
        f_await=_per(disk.flush_ms, disk.flushes),
        util=min(100.0, 100 * _per(disk.busy_ms / 1000, span_s)),
    )
