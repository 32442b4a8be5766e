"""Device names and kinds from a fake /sys tree, as lsblk would show them."""

from __future__ import annotations

import os

import pytest

from ktop.collectors.disks import (
    DiskNames,
    bio_based_devices,
    idle_disks,
    in_flight_counts,
    kernel_dev,
    split_dev,
)
from ktop.panes.blockio.collector import BUSY_SETTLED_S, STALE_AFTER_S, SWEEP_EVERY_S, proven_stale


def write(path, text: str = "") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def add_disk(sys_root, devices_path: str, name: str, number: str, *, blk_mq: bool,
             partitions: dict[str, str] | None = None, dm_name: str = "") -> None:
    """A disk as the kernel lays it out: the device under /sys/devices, links in
    /sys/block and /sys/dev/block, partitions as subdirectories."""
    disk = sys_root / "devices" / devices_path / "block" / name
    write(disk / "dev", number + "\n")
    if blk_mq:
        os.makedirs(disk / "mq" / "0")
        write(disk / "queue" / "scheduler", "none [mq-deadline]\n")
    else:
        os.makedirs(disk / "queue")
    if dm_name:
        write(disk / "dm" / "name", dm_name + "\n")
    os.makedirs(sys_root / "block", exist_ok=True)
    os.makedirs(sys_root / "dev" / "block", exist_ok=True)
    os.symlink(disk, sys_root / "block" / name)
    os.symlink(disk, sys_root / "dev" / "block" / number)
    for part_name, part_number in (partitions or {}).items():
        write(disk / part_name / "dev", part_number + "\n")
        write(disk / part_name / "partition", "1\n")
        os.symlink(disk / part_name, sys_root / "dev" / "block" / part_number)


@pytest.fixture
def fake_sys(tmp_path):
    root = tmp_path / "sys"
    add_disk(root, "pci0000:00/0000:00:02.0/virtio1", "vda", "254:0", blk_mq=True,
             partitions={"vda1": "254:1", "vda15": "254:15"})
    add_disk(root, "pci0000:00/0000:00:04.0/nvme/nvme0", "nvme0n1", "259:0", blk_mq=True,
             partitions={"nvme0n1p2": "259:2"})
    add_disk(root, "virtual", "zram0", "253:0", blk_mq=False, partitions={"zram0p1": "253:1"})
    add_disk(root, "virtual", "dm-0", "252:0", blk_mq=False, dm_name="vg-root")
    add_disk(root, "pci0000:00/cciss", "cciss!c0d0", "104:0", blk_mq=True)
    return str(root)


def test_dev_t_round_trip():
    assert kernel_dev(254, 0) == 254 << 20
    assert split_dev(kernel_dev(259, 65537)) == (259, 65537)


def test_disks_and_partitions_are_named_as_lsblk_names_them(fake_sys):
    names = DiskNames(fake_sys)
    assert names(kernel_dev(254, 0)) == "vda"
    assert names(kernel_dev(254, 1)) == "vda1"
    assert names(kernel_dev(254, 15)) == "vda15"
    assert names(kernel_dev(259, 0)) == "nvme0n1"
    assert names(kernel_dev(259, 2)) == "nvme0n1p2"
    assert names(kernel_dev(253, 0)) == "zram0"
    assert names(kernel_dev(252, 0)) == "vg-root"  # device-mapper by its mapped name
    assert names(kernel_dev(104, 0)) == "cciss/c0d0"


def test_unknown_device_is_named_by_number(fake_sys):
    assert DiskNames(fake_sys).name(kernel_dev(8, 16)) == "8:16"


def test_missing_sysfs_names_every_device_by_number(tmp_path):
    names = DiskNames(str(tmp_path / "nothing-here"))
    assert names(kernel_dev(254, 0)) == "254:0"
    assert bio_based_devices(str(tmp_path / "nothing-here")) == set()


def test_a_device_that_appears_later_is_named_once_it_is_there(tmp_path):
    root = tmp_path / "sys"
    names = DiskNames(str(root))
    assert names(kernel_dev(253, 1)) == "253:1"
    add_disk(root, "virtual", "zram1", "253:1", blk_mq=False)
    assert names(kernel_dev(253, 1)) == "zram1"


def test_names_are_remembered_for_a_while(fake_sys):
    names = DiskNames(fake_sys)
    assert names(kernel_dev(254, 0)) == "vda"
    os.remove(os.path.join(fake_sys, "dev", "block", "254:0"))
    assert names(kernel_dev(254, 0)) == "vda"
    names.clear()
    assert names(kernel_dev(254, 0)) == "254:0"
    expiring = DiskNames(fake_sys, ttl_s=0.0)  # a dev_t given to another device later
    assert expiring(kernel_dev(259, 0)) == "nvme0n1"
    os.remove(os.path.join(fake_sys, "dev", "block", "259:0"))
    os.symlink(os.path.join(fake_sys, "block", "zram0"),
               os.path.join(fake_sys, "dev", "block", "259:0"))
    assert expiring(kernel_dev(259, 0)) == "zram0"


def test_bio_based_devices_are_those_without_a_request_queue(fake_sys):
    assert bio_based_devices(fake_sys) == {
        kernel_dev(253, 0),
        kernel_dev(253, 1),  # a bio to a partition is traced with the partition's dev_t
        kernel_dev(252, 0),
    }


def test_a_disk_with_an_unreadable_dev_file_is_skipped(fake_sys):
    os.remove(os.path.join(fake_sys, "block", "zram0", "dev"))
    assert kernel_dev(253, 0) not in bio_based_devices(fake_sys)


def test_real_sysfs_names_its_disks():
    """On any Linux: every disk in /sys/block is named by its own directory name."""
    names = DiskNames()
    for disk in os.listdir("/sys/block"):
        with open(f"/sys/block/{disk}/dev") as f:
            major, minor = map(int, f.read().split(":"))
        expected = disk.replace("!", "/")
        if os.path.exists(f"/sys/block/{disk}/dm/name"):
            continue
        assert names(kernel_dev(major, minor)) == expected


def test_idle_disks_are_those_the_kernel_says_have_nothing_in_flight(tmp_path):
    for name, counts in (("254:0", "       0        0\n"), ("254:16", "       0        3\n"),
                         ("8:0", "       1        0\n")):
        (tmp_path / "dev" / "block" / name).mkdir(parents=True)
        (tmp_path / "dev" / "block" / name / "inflight").write_text(counts)
    vda, vdb, sda, gone = kernel_dev(254, 0), kernel_dev(254, 16), kernel_dev(8, 0), kernel_dev(9, 9)
    # a disk with no inflight file (gone, or never a disk) is not called idle
    assert idle_disks({vda, vdb, sda, gone}, str(tmp_path)) == {vda}


def test_in_flight_counts_are_reads_and_writes_the_kernel_holds(tmp_path):
    (tmp_path / "dev" / "block" / "254:0").mkdir(parents=True)
    (tmp_path / "dev" / "block" / "254:0" / "inflight").write_text("       2        3\n")
    (tmp_path / "dev" / "block" / "8:0").mkdir(parents=True)
    (tmp_path / "dev" / "block" / "8:0" / "inflight").write_text("garbage\n")
    vda, sda = kernel_dev(254, 0), kernel_dev(8, 0)
    assert in_flight_counts({vda, sda, kernel_dev(9, 9)}, str(tmp_path)) == {vda: 5}


def test_unseen_completions_on_a_busy_disk_are_found_by_the_kernels_in_flight_count():
    """Another process keeps the disk busy: its in-flight count never reaches 0, and a dd's
    requests whose completion went unseen sat a minute "in flight", its bytes read short.
    Those beyond the kernel's count, oldest first, are stale once past BUSY_SETTLED_S."""
    now = 1000.0
    vda, vdb, unknown = kernel_dev(254, 0), kernel_dev(254, 16), kernel_dev(9, 9)

    def ago(s):
        return int((now - s) * 1e9)

    entries = [
        ("lost-1", ago(BUSY_SETTLED_S + 9), vda), ("lost-2", ago(BUSY_SETTLED_S + 5), vda),
        ("slow", ago(BUSY_SETTLED_S + 1), vda),  # the kernel holds one old request: this one
        ("young", ago(SWEEP_EVERY_S + 1), vda),  # in the scheduler, perhaps: not judged yet
        ("idle-old", ago(SWEEP_EVERY_S + 1), vdb), ("idle-new", ago(1), vdb),
        ("ancient", ago(STALE_AFTER_S + 1), unknown), ("unknown", ago(BUSY_SETTLED_S + 1), unknown),
    ]
    stale = proven_stale(entries, {vda: 1, vdb: 0}, now)
    assert sorted(key for key, _ in stale) == ["ancient", "idle-old", "lost-1", "lost-2"]
    assert dict(stale)["lost-1"] == ago(BUSY_SETTLED_S + 9)  # the start, to check before deleting
    # as many in flight as held: none is proven lost
    assert proven_stale(entries[:3], {vda: 3}, now) == []
