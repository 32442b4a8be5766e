"""ktop's process loads no OpenSSL: it serves plain HTTP and hashes with Python's own SHA-256."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"

# ktop's main() (a replayed picture: Textual and asyncio imported and run), then what the
# process maps, and that ssl can be imported again once main() returned.
_PROBE = """
import sys
from ktop import cli
code = cli.main(["--replay", sys.argv[1], "--snapshot", sys.argv[2]])
with open("/proc/self/maps") as maps:
    mapped = sorted({line.split()[-1].rsplit("/", 1)[-1] for line in maps
                     if "libcrypto" in line or "libssl" in line})
print(code, mapped, sys.modules.get("ssl", "none"))
"""


def test_ktop_runs_without_loading_openssl(tmp_path):
    """asyncio imports ssl and hashlib imports _hashlib when they can: OpenSSL's libraries
    were 5.5 MiB of ktop's resident memory (1.9 of it anonymous), used for nothing."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(FIXTURES / "recorded.json"), str(tmp_path / "x.txt")],
        capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["0", "[]", "none"]
    assert (tmp_path / "x.txt").read_text().strip()
