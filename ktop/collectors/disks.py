"""Block device names and kinds from sysfs: dev_t -> "vda", "nvme0n1", "vda1", "vg-root".

The block tracepoints give the kernel's dev_t (major << 20 | minor); lsblk names the same
devices from /sys/dev/block/MAJ:MIN. Everything here tolerates a missing or partial /sys:
an unknown device is named "MAJ:MIN".
"""

from __future__ import annotations

import os
import time

MINOR_BITS = 20  # the kernel's internal dev_t, as block tracepoints report it
MINOR_MASK = (1 << MINOR_BITS) - 1


def kernel_dev(major: int, minor: int) -> int:
    return major << MINOR_BITS | minor


def split_dev(dev: int) -> tuple[int, int]:
    return dev >> MINOR_BITS, dev & MINOR_MASK


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _parse_dev(text: str | None) -> int | None:
    """ "254:0" -> kernel dev_t."""
    if not text or ":" not in text:
        return None
    major, _, minor = text.partition(":")
    try:
        return kernel_dev(int(major), int(minor))
    except ValueError:
        return None


class DiskNames:
    """dev_t -> device name as lsblk shows it, cached a while: a dev_t can be given to
    another device (dm and zram devices come and go), and an unknown one may appear."""

    def __init__(self, sys_root: str = "/sys", ttl_s: float = 30.0) -> None:
        self._sys = sys_root
        self._ttl_s = ttl_s
        self._names: dict[int, tuple[str, float]] = {}

    def __call__(self, dev: int) -> str:
        return self.name(dev)

    def name(self, dev: int) -> str:
        now = time.monotonic()
        cached = self._names.get(dev)
        if cached is not None and now - cached[1] < self._ttl_s:
            return cached[0]
        found = self._lookup(dev)
        if found is None:  # not cached: the device may appear in sysfs later
            major, minor = split_dev(dev)
            return f"{major}:{minor}"
        self._names[dev] = (found, now)
        return found

    def _lookup(self, dev: int) -> str | None:
        major, minor = split_dev(dev)
        link = os.path.join(self._sys, "dev", "block", f"{major}:{minor}")
        try:
            target = os.path.realpath(link, strict=True)
        except OSError:
            return None
        # Device-mapper devices: lsblk shows the mapped name ("vg-root"), not "dm-0".
        mapped = _read(os.path.join(target, "dm", "name"))
        if mapped:
            return mapped
        name = os.path.basename(target)
        # sysfs spells "/" in a kernel name as "!" (cciss!c0d0).
        return name.replace("!", "/") or None

    def clear(self) -> None:
        self._names.clear()


def bio_based_devices(sys_root: str = "/sys") -> set[int]:
    """dev_t of every disk (and partition) without a request queue: zram, brd, dm, md.

    Since Linux 5.0 every request-based disk is blk-mq, and blk-mq disks have an `mq`
    directory (and an I/O scheduler); a disk with neither submits bios straight to its
    driver and fires no block_rq_* events.
    """
    block = os.path.join(sys_root, "block")
    try:
        disks = os.listdir(block)
    except OSError:
        return set()
    found: set[int] = set()
    for disk in disks:
        path = os.path.join(block, disk)
        if os.path.isdir(os.path.join(path, "mq")) or os.path.exists(
            os.path.join(path, "queue", "scheduler")
        ):
            continue
        dev = _parse_dev(_read(os.path.join(path, "dev")))
        if dev is None:
            continue
        found.add(dev)
        # A bio to a partition is traced with the partition's dev_t.
        try:
            entries = os.listdir(path)
        except OSError:
            entries = []
        for entry in entries:
            if entry.startswith(disk) and os.path.isfile(os.path.join(path, entry, "partition")):
                part = _parse_dev(_read(os.path.join(path, entry, "dev")))
                if part is not None:
                    found.add(part)
    return found


def in_flight_counts(devs: set[int], sys_root: str = "/sys") -> dict[int, int]:
    """Requests in flight now on each device (kernel dev_t), as the kernel counts them
    (/sys/dev/block/MAJ:MIN/inflight, reads and writes); one it cannot tell of is left out."""
    counts = {}
    for dev in devs:
        try:
            with open(f"{sys_root}/dev/block/{dev >> 20}:{dev & 0xFFFFF}/inflight", "rb") as f:
                reads, writes = map(int, f.read().split())
        except (OSError, ValueError):
            continue
        counts[dev] = reads + writes
    return counts


def idle_disks(devs: set[int], sys_root: str = "/sys") -> set[int]:
    """The devices with no request in flight now; one the kernel cannot tell of is not idle."""
    return {dev for dev, count in in_flight_counts(devs, sys_root).items() if count == 0}
