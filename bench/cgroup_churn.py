"""Naming cgroup ids under cgroup churn: 10,000 cgroups, and a new one with a short task in
it five times a second (issue 44, item 12).

    flock /tmp/ktop-machine.lock .venv/bin/python bench/cgroup_churn.py [--seconds 20]
        [--record OLD_TREE]

Without --record: the CPU time CgroupNames spends naming each new id, by handle (now) and
by walking the hierarchy (before, and still without root), interleaved in one run.
With --record OLD_TREE (a checkout of older code, e.g. `git archive main~1 | tar -x -C DIR`):
the CPU share of `ktop --record` under the churn, this tree's and OLD_TREE's, one after the
other. Every cgroup made is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ktop.cgroups import CgroupNames, cgroup2_mount  # noqa: E402

RATE = 5.0  # new cgroups a second


@contextlib.contextmanager
def hierarchy(count: int) -> Iterator[str]:
    mount = cgroup2_mount()
    if mount is None:
        sys.exit("no cgroup v2 hierarchy")
    top = f"{mount}/ktop-bench-{uuid.uuid4().hex[:8]}"
    made = [top]
    os.mkdir(top)
    try:
        for i in range(count // 100):
            os.mkdir(f"{top}/{i}")
            made.append(f"{top}/{i}")
            for j in range(100):
                os.mkdir(f"{top}/{i}/{j}")
                made.append(f"{top}/{i}/{j}")
        os.mkdir(f"{top}/churn")
        made.append(f"{top}/churn")
        yield top
    finally:
        for path in reversed(made):
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def churn(top: str, stop: threading.Event, seen: list[int]) -> None:
    """A new cgroup with a short task in it, RATE times a second; each removed after."""
    n = 0
    while not stop.wait(1 / RATE):
        path = f"{top}/churn/{n}"
        n += 1
        os.mkdir(path)
        seen.append(os.stat(path).st_ino)
        task = subprocess.Popen(["sh", "-c", f"echo $$ > {path}/cgroup.procs; "
                                 "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done"])
        task.wait()
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.02)


def lookups(seconds: float) -> None:
    with hierarchy(10_000) as top:
        by_handle = CgroupNames()
        walking = CgroupNames()
        walking._by_handle = None  # as before, and as without root
        stop, seen = threading.Event(), []
        worker = threading.Thread(target=churn, args=(top, stop, seen))
        worker.start()
        spent = {"handle": 0.0, "walk": 0.0}
        named = {"handle": 0, "walk": 0}
        done = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)
            new, done = seen[done:], len(seen)
            for cgroup_id in new:
                for kind, names in (("handle", by_handle), ("walk", walking)):
                    began = time.thread_time()
                    if not names.name(cgroup_id).startswith("[cgroup"):
                        named[kind] += 1
                    spent[kind] += time.thread_time() - began
        stop.set()
        worker.join()
        print(f"{len(seen)} new cgroups in {seconds:.0f} s beside 10,000")
        counts = {"handle": f"{by_handle.lookups} lookups", "walk": f"{walking.scans} walks"}
        for kind in spent:
            print(f"  by {kind:6}: {100 * spent[kind] / seconds:5.2f}% of a CPU, "
                  f"{named[kind]} named ({counts[kind]})")


def record_cpu(tree: str, seconds: float) -> float:
    out = tempfile.mkdtemp(prefix="ktop-bench-")
    try:
        env = {**os.environ, "PYTHONPATH": tree}
        ktop = subprocess.Popen([sys.executable, "-m", "ktop", "--record", f"{out}/r.krec",
                                 "--duration", str(seconds + 30)], env=env, cwd=tree,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(30)  # loaded, compiled
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            with open(f"/proc/{ktop.pid}/stat") as f:
                fields = f.read().rpartition(") ")[2].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before, began = cpu(), time.monotonic()
        time.sleep(seconds)
        share = 100 * (cpu() - before) / (time.monotonic() - began)
        ktop.terminate()
        ktop.wait()
        return share
    finally:
        shutil.rmtree(out)


def records(old: str, seconds: float) -> None:
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    with hierarchy(10_000) as top:
        stop, seen = threading.Event(), []
        worker = threading.Thread(target=churn, args=(top, stop, seen))
        worker.start()
        try:
            for name, tree in (("this tree", here), ("old tree", old)):
                print(f"  ktop --record, {name}: {record_cpu(tree, seconds):.1f}% of a CPU")
        finally:
            stop.set()
            worker.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--record", metavar="OLD_TREE")
    args = parser.parse_args()
    if args.record:
        records(args.record, args.seconds)
    else:
        lookups(args.seconds)


if __name__ == "__main__":
    main()
