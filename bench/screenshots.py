#!/usr/bin/env python3
"""The README's pictures, made by ktop itself under the workload their captions name:
a urandom reader (hot functions), direct-I/O writes (block I/O) and file churn in one
directory (lock contention).

Usage (root): python bench/screenshots.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

CHURN = "while :; do for i in $(seq 50); do touch f$i; rm -f f$i; done; done"


def main() -> int:
    if os.geteuid() != 0:
        print("screenshots: run as root (ktop's collectors need it)", file=sys.stderr)
        return 2
    out = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "screenshots")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        workloads = [
            subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=64k"]),
            subprocess.Popen(["sh", "-c", f"while :; do dd if=/dev/zero of={scratch}/io bs=64k "
                              "count=64 oflag=direct 2>/dev/null; done"]),
            *(subprocess.Popen(["sh", "-c", CHURN], cwd=scratch, stderr=subprocess.DEVNULL)
              for _ in range(2)),
        ]
        try:
            for name, extra in (("ktop.svg", []),
                                ("drill-chacha.svg", ["--drill", "functions:chacha_permute"])):
                subprocess.run([sys.executable, "-m", "ktop", "--snapshot",
                                os.path.join(out, name), "--duration", "5", *extra], check=True)
        finally:
            for process in workloads:
                process.kill()
                process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
