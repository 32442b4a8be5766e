"""The block I/O pane's profile: the JSON contract (decoded by ktop.codec from these hints).

ktop.model's Snapshot holds it (its `blockio`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ktop.frozen import quick_init
from ktop.histogram import Bucket


@quick_init
@dataclass(frozen=True, slots=True)
class DiskStats:
    disk: str
    major: int
    minor: int
    reads: int
    writes: int
    read_bytes: int
    write_bytes: int
    avg_lat_ms: float  # of reads and writes
    hist_us: tuple[Bucket, ...] = ()  # completion latencies, flushes included
    flushes: int = 0  # cache flushes (fsync's), neither reads nor writes


@quick_init
@dataclass(frozen=True, slots=True)
class IoSubmitStack:
    """A kernel stack that submitted block I/O."""

    frames: tuple[str, ...]  # innermost first
    requests: int


@quick_init
@dataclass(frozen=True, slots=True)
class IoProcess:
    pid: int
    comm: str
    disk: str
    major: int
    minor: int
    rw: str  # "R", "W" or "F" (a flush: an empty write that flushes the disk's cache)
    requests: int
    bytes: int
    avg_lat_ms: float
    avg_queue_ms: float
    stacks: tuple[IoSubmitStack, ...] = ()
    hist_us: tuple[Bucket, ...] = ()  # completion latencies
    cgroup: str = ""  # the submitter's


@quick_init
@dataclass(frozen=True, slots=True)
class IoRequest:
    time_s: float  # seconds since ktop started
    comm: str
    pid: int
    disk: str
    rw: str
    sector: int
    bytes: int
    queue_ms: float
    lat_ms: float
    cgroup: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class BlockProfile:
    lost: Mapping[str, int]
    disks: tuple[DiskStats, ...]
    processes: tuple[IoProcess, ...]
    requests: tuple[IoRequest, ...]  # newest first
    window_s: float = 0.0
