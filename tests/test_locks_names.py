"""An inode's lock named by its path: the mount table is read again only when it may have
changed, however many locks sit on a device mounted nowhere ktop can see."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

from conftest import root_only

from ktop.collectors.locks import NAME_INODE_RWSEM, LockName
from ktop.symbolize import locknames
from ktop.symbolize.locknames import I_RWSEM, LockNamer


def rwsem_on(major: int, minor: int, *path: str) -> LockName:
    return LockName(NAME_INODE_RWSEM, ino=12, dev=major << 20 | minor, path=(*path, "/"))


def reads_of_mounts(monkeypatch) -> list[str]:
    """Each read of the mount table, counted (LockNamer reads it with open())."""
    reads: list[str] = []

    def counting_open(path, *args, **kwargs):
        reads.append(str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(locknames, "open", counting_open, raising=False)
    return reads


def named(namer: LockNamer, lock: LockName) -> str:
    name, instance = namer.name(0xFFFF888000001000, lock, {}, "")
    assert name == I_RWSEM
    return instance


def test_a_device_mounted_nowhere_costs_one_read_of_the_mounts_not_one_a_lock(
        tmp_path, monkeypatch):
    """5,000 mounts and a tmpfs in a user namespace: each lock on it read mountinfo again
    (18 ms), and ktop took 26% of a CPU. A miss is looked for again once the table may
    have changed (here, a file with no poll(): after MISS_REREAD_S)."""
    now = [100.0]
    monkeypatch.setattr(locknames, "time", SimpleNamespace(monotonic=lambda: now[0]),
                        raising=False)
    reads = reads_of_mounts(monkeypatch)
    info = tmp_path / "mountinfo"
    info.write_text("22 1 254:1 / / rw - ext4 /dev/vda1 rw\n")
    namer = LockNamer(str(info))
    assert named(namer, rwsem_on(254, 1, "passwd", "etc")) == "/etc/passwd"
    for _ in range(1000):  # contention on a tmpfs mounted in another namespace
        assert named(namer, rwsem_on(0, 77, "f")) == "/f on 0:77"
    assert len(reads) == 1
    info.write_text("22 1 254:1 / / rw - ext4 /dev/vda1 rw\n"
                    "90 22 0:77 / /mnt/scratch rw - tmpfs tmpfs rw\n")
    now[0] += 10.0
    assert named(namer, rwsem_on(0, 77, "f")) == "/mnt/scratch/f"
    assert len(reads) == 2


@root_only
def test_a_mount_made_after_a_miss_is_named_at_once(tmp_path, monkeypatch):
    """On /proc's mountinfo, poll() says when the mount table changed: a miss costs no read
    until then, and a new mount is named at its first lock."""
    reads = reads_of_mounts(monkeypatch)
    namer = LockNamer()
    for _ in range(100):
        named(namer, rwsem_on(0, 0xFFFFE, "f"))  # no such device
    assert len(reads) == 1
    where = tmp_path / "m"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "ktop-test", str(where)], check=True)
    try:
        dev = os.stat(where).st_dev
        lock = rwsem_on(os.major(dev), os.minor(dev), "f")
        assert named(namer, lock) == f"{where}/f"
        assert len(reads) == 2
        for _ in range(100):
            named(namer, rwsem_on(0, 0xFFFFE, "f"))
        assert len(reads) == 2
    finally:
        subprocess.run(["umount", str(where)], check=True)

