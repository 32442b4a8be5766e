"""Naming i_rwsem locks on a device mounted nowhere ktop sees, beside 5,000 mounts (issue
44, item 13): what one lock name costs, the mount table read each time (before) against
once until it changes (now). Runs in a mount namespace of its own (unshare -m), whose
5,000 tmpfs mounts vanish with it.

    flock /tmp/ktop-machine.lock .venv/bin/python bench/lock_names_mounts.py [--record OLD_TREE]

--record OLD_TREE (a checkout of older code): `ktop --record`'s CPU share, this tree's and
OLD_TREE's one after the other, in that namespace, while 4 processes create and unlink
files in one directory of a tmpfs mounted in a user namespace of their own (i_rwsem
contention on a device ktop sees no mount of).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ktop.collectors.locks import NAME_INODE_RWSEM, LockName  # noqa: E402
from ktop.symbolize.locknames import LockNamer, mount_points  # noqa: E402

MOUNTS = 5000
CALLS = 200


def mount_many(top: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    for i in range(MOUNTS):
        os.mkdir(f"{top}/{i}")
        if libc.mount(b"t", f"{top}/{i}".encode(), b"tmpfs", 0, b"size=64k") != 0:
            raise OSError(ctypes.get_errno(), "mount")


def measure(top: str) -> None:
    mount_many(top)
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


CONTEND = """
import os, sys, time
os.system("mount -t tmpfs none " + sys.argv[1])
def work(n):
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        for i in range(100):
            path = f"{sys.argv[1]}/f{n}-{i}"
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY))
            os.unlink(path)
children = []
for n in range(4):
    pid = os.fork()
    if pid == 0:
        work(n)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


def record_cpu(tree: str, seconds: float) -> float:
    out = tempfile.mkdtemp(prefix="ktop-bench-")
    try:
        ktop = subprocess.Popen([sys.executable, "-m", "ktop", "--record", f"{out}/r.krec",
                                 "--duration", str(seconds + 30)], env={**os.environ,
                                "PYTHONPATH": tree}, cwd=tree, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(30)  # loaded

        def cpu() -> float:
            with open(f"/proc/{ktop.pid}/stat") as f:
                fields = f.read().rpartition(") ")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        before, began = cpu(), time.monotonic()
        time.sleep(seconds)
        share = 100 * (cpu() - before) / (time.monotonic() - began)
        ktop.terminate()
        ktop.wait()
        return share
    finally:
        shutil.rmtree(out)


def records(top: str, old: str, seconds: float = 20) -> None:
    mount_many(top)
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    scratch = tempfile.mkdtemp(prefix="ktop-userns-")
    contention = subprocess.Popen(["unshare", "-Urm", sys.executable, "-c", CONTEND, scratch,
                                   str(2 * (seconds + 35))], start_new_session=True)
    try:
        for name, tree in (("this tree", here), ("old tree", old)):
            print(f"  ktop --record beside {MOUNTS} mounts and a user namespace's tmpfs "
                  f"contended, {name}: {record_cpu(tree, seconds):.1f}% of a CPU")
    finally:
        os.killpg(contention.pid, signal.SIGKILL)  # its workers too
        contention.wait()
        os.rmdir(scratch)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        if len(sys.argv) > 3:
            records(sys.argv[2], sys.argv[3])
        else:
            measure(sys.argv[2])
    else:
        old = sys.argv[2:3] if sys.argv[1:2] == ["--record"] else []
        directory = tempfile.mkdtemp(prefix="ktop-mounts-")
        try:
            code = subprocess.run(["unshare", "-m", sys.executable, __file__, "--inside",
                                   directory, *old]).returncode
        finally:
            shutil.rmtree(directory)
        sys.exit(code)
