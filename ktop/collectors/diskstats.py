"""Each disk's I/O counters from /proc/diskstats, as iostat reads them: exact kernel
accounting, no BPF, no root. Read to its end with pread through a descriptor kept open; each read gives
the counters' growth since the one before (ktop.aggregate.diskstats folds them into a window).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ktop.collectors.disks import DiskNames, kernel_dev
from ktop.collectors.procfiles import pread_to_eof
from ktop.model import DiskIo, IostatProfile

PROC_DISKSTATS = "/proc/diskstats"
# The counters after "major minor name", in the kernel's order (Documentation/admin-guide/
# iostats.rst); kernels before 4.18 stop after queue_ms, before 5.5 after discard_ms.
COUNTERS = ("reads", "read_merges", "read_sectors", "read_ms", "writes", "write_merges",
            "write_sectors", "write_ms", "in_flight", "busy_ms", "queue_ms", "discards",
            "discard_merges", "discard_sectors", "discard_ms", "flushes", "flush_ms")
_READ_SIZE = 1 << 16


def parse_diskstats(text: bytes) -> dict[tuple[int, int], tuple[str, tuple[int, ...]]]:
    """(major, minor) -> (kernel name, its counters, 0 for those the kernel lacks); a line
    that does not parse is skipped."""
    disks = {}
    for line in text.split(b"\n"):
        fields = line.split()
        if len(fields) < 14:
            continue
        try:
            major, minor = int(fields[0]), int(fields[1])
            values = [int(v) for v in fields[3:3 + len(COUNTERS)]]
        except ValueError:
            continue
        values += [0] * (len(COUNTERS) - len(values))
        disks[major, minor] = (fields[2].decode(errors="replace"), tuple(values))
    return disks


def whole_disks(sys_root: str = "/sys") -> set[str] | None:
    """The kernel names of whole disks (/sys/block), as iostat lists them without -p; None
    when sysfs cannot say (then every device is listed)."""
    try:
        return {name.replace("!", "/") for name in os.listdir(os.path.join(sys_root, "block"))}
    except OSError:
        return None


class DiskStatsReader:
    """The growth of every whole disk's counters between reads. in_flight is a gauge: the
    read's own value."""

    def __init__(self, path: str = PROC_DISKSTATS, sys_root: str = "/sys",
                 names: Callable[[int], str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._sys_root = sys_root
        self._names = names or DiskNames(sys_root)
        self._clock = clock
        self._fd: int | None = None
        self._last: dict[tuple[int, int], tuple[str, tuple[int, ...]]] | None = None
        self._last_at = 0.0
        self.error = ""  # why there are no disk figures ("" when there are)

    def _read(self) -> bytes:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        # A page of disks a read (seq_file): a short read is not the end (69 of 203 disks).
        return pread_to_eof(self._fd, _READ_SIZE)

    def restart(self) -> None:
        """The next read counts from now (what came before is dropped)."""
        self.read()

    def read(self) -> IostatProfile | None:
        """The counters' growth since the last read (None at the first, or when unreadable)."""
        try:
            text = self._read()
        except OSError as e:
            self.error = f"cannot read {self._path}: {e.strerror}"
            return None
        now = self._clock()
        self.error = ""
        current = parse_diskstats(text)
        before, since = self._last, self._last_at
        self._last, self._last_at = current, now
        if before is None:
            return None
        disks = whole_disks(self._sys_root)
        rows = []
        for (major, minor), (name, values) in current.items():
            if disks is not None and name not in disks:
                continue  # a partition: its disk counts it
            old = before.get((major, minor))
            if old is None or old[0] != name:
                continue  # new since the last read: no growth to tell yet
            grown = [new - prior for new, prior in zip(values, old[1])]
            if any(g < 0 for i, g in enumerate(grown) if COUNTERS[i] != "in_flight"):
                continue  # the device was replaced (its counters restarted)
            if not any(values[:4]) and not any(values[4:8]):
                continue  # never used since boot (iostat leaves those out too)
            grown[COUNTERS.index("in_flight")] = values[COUNTERS.index("in_flight")]
            rows.append(DiskIo(self._names(kernel_dev(major, minor)), major, minor,
                               *grown))
        rows.sort(key=lambda d: (d.disk, d.major, d.minor))
        return IostatProfile(span_s=max(0.0, now - since), disks=tuple(rows))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
