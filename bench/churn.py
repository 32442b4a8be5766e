"""A churning workload: what made ktop lose samples (issue 26), for the bench and live tests.

A urandom reader (kernel-bound), four loops creating and unlinking files in one directory,
and ~50 short processes a second: new pids, new user stacks (each process maps its libraries
at new addresses), and new kernel paths through fork, exec and exit, without end.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator

URANDOM = ["dd", "if=/dev/urandom", "of=/dev/null", "bs=1M", "status=none"]
FILE_LOOPS = 4
SPAWNS_PER_S = 50

# One loop creating and unlinking its own file in the shared directory, forever.
_FILES = """import os, sys
path = os.path.join(sys.argv[1], "f" + sys.argv[2])
while True:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.unlink(path)
"""
# Short processes at a steady rate, each a fresh exec of /bin/true.
_SPAWNS = """import subprocess, sys, time
period = 1.0 / float(sys.argv[1])
following = time.monotonic()
while True:
    subprocess.run(["/bin/true"])
    following += period
    time.sleep(max(0.0, following - time.monotonic()))
"""


@contextlib.contextmanager
def churning(spawns_per_s: int = SPAWNS_PER_S) -> Iterator[None]:
    """The workload runs for the block; every process it started is killed after."""
    started: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="ktop-churn-") as directory:
        try:
            started.append(subprocess.Popen(URANDOM, stdin=subprocess.DEVNULL))
            for i in range(FILE_LOOPS):
                started.append(subprocess.Popen([sys.executable, "-c", _FILES, directory,
                                                 str(i)], stdin=subprocess.DEVNULL))
            started.append(subprocess.Popen([sys.executable, "-c", _SPAWNS,
                                             str(spawns_per_s)], stdin=subprocess.DEVNULL))
            yield
        finally:
            for process in started:
                process.kill()
            for process in started:
                process.wait()


if __name__ == "__main__":  # run it by hand: until interrupted
    import time

    with churning(), contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(60)
