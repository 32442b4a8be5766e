"""Naming i_rwsem locks on a device mounted nowhere ktop sees, beside 5,000 mounts (issue
44, item 13): what one lock name costs, the mount table read each time (before) against
once until it changes (now). Runs in a mount namespace of its own (unshare -m), whose
5,000 tmpfs mounts vanish with it.

    flock /tmp/ktop-machine.lock .venv/bin/python bench/lock_names_mounts.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ktop.collectors.locks import NAME_INODE_RWSEM, LockName  # noqa: E402
from ktop.symbolize.locknames import LockNamer, mount_points  # noqa: E402

MOUNTS = 5000
CALLS = 200


def measure(top: str) -> None:
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    for i in range(MOUNTS):
        os.mkdir(f"{top}/{i}")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "t", f"{top}/{i}"], check=True)
    with open("/proc/self/mountinfo") as f:
        print(f"{len(f.read().splitlines())} mounts in this namespace")
    lock = LockName(NAME_INODE_RWSEM, ino=5, dev=0 << 20 | 0xFFFF0, path=("f", "/"))
    namer = LockNamer()
    namer.name(1, lock, {}, "")
    began = time.perf_counter()
    for _ in range(CALLS):
        namer.name(1, lock, {}, "")
    now = (time.perf_counter() - began) / CALLS
    began = time.perf_counter()
    for _ in range(CALLS):  # what each name on an unknown device did before
        with open("/proc/self/mountinfo") as f:
            mount_points(f.read())
    before = (time.perf_counter() - began) / CALLS
    print(f"a lock name on an unknown device: before {before * 1e3:.2f} ms, "
          f"now {now * 1e6:.1f} us ({namer.reads} reads of the mounts in {CALLS + 1} names)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        measure(sys.argv[2])
    else:
        directory = tempfile.mkdtemp(prefix="ktop-mounts-")
        try:
            code = subprocess.run(["unshare", "-m", sys.executable, __file__, "--inside",
                                   directory]).returncode
        finally:
            shutil.rmtree(directory)
        sys.exit(code)
