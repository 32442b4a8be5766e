"""The memory collector on the real kernel: a reader of a 128 MiB file inside a v1 memory
cgroup limited to 32 MiB stalls in memcg reclaim; its stalls counted and timed by ktop within
10% of what `perf record` gives on the same vmscan tracepoints over the same seconds (root;
machine lock; the cgroup and the file removed after)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ktop.panes.memory.collector import MemoryCollector, MemoryDrain

V1_MEMORY = Path("/sys/fs/cgroup/memory")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
    pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf to compare with"),
    pytest.mark.skipif(not (V1_MEMORY / "memory.limit_in_bytes").exists(),
                       reason="needs a v1 memory cgroup hierarchy"),
]

LIMIT = 32 << 20
FILE_SIZE = 128 << 20
PERF_OWN_NS = 15_000  # at most perf's own cost inside a stall it times (see below)
TRACEPOINTS = ("vmscan:mm_vmscan_memcg_reclaim_begin", "vmscan:mm_vmscan_memcg_reclaim_end")


@pytest.fixture
def small_cgroup() -> Iterator[Path]:
    path = V1_MEMORY / f"ktop-test-{os.getpid()}"
    path.mkdir()
    try:
        (path / "memory.limit_in_bytes").write_text(str(LIMIT))
        yield path
    finally:
        for _ in range(50):  # its last task may take a moment to leave it
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.fixture
def big_file() -> Iterator[Path]:
    path = Path(f"/var/tmp/ktop-test-memory-{os.getpid()}")
    try:
        with path.open("wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(FILE_SIZE >> 20):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # not cached: read
        yield path
    finally:
        path.unlink(missing_ok=True)


def perf_stalls(script: str, pid: int) -> tuple[int, int]:
    """(count, total ns) of the pid's memcg reclaims in `perf script`'s output: each begin
    paired with the next end of the same thread."""
    begun: float | None = None
    count = total = 0
    for line in script.splitlines():
        fields = line.split()
        event = next((f for f in fields if f.startswith("vmscan:")), "")
        if not event or f" {pid} " not in f" {line} ":
            continue
        stamp = float(next(f for f in fields if f.endswith(":") and f[:-1].replace(".", "")
                                                   .isdigit())[:-1])
        if event.startswith("vmscan:mm_vmscan_memcg_reclaim_begin"):
            begun = stamp
        elif begun is not None:
            count += 1
            total += round((stamp - begun) * 1e9)
            begun = None
    return count, total


def test_reclaim_stalls_of_a_reader_in_a_small_v1_cgroup_match_perf(
        small_cgroup: Path, big_file: Path, tmp_path: Path) -> None:
    collector = MemoryCollector()
    collector.start()
    perf_data = tmp_path / "perf.data"
    try:
        assert "vmscan:mm_vmscan_memcg_reclaim_end" in collector.attached
        collector.drain()  # (nothing before the reader)
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-a", "-o", str(perf_data),
             *(arg for tp in TRACEPOINTS for arg in ("-e", tp))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)  # perf attached
        reader = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {small_cgroup}/cgroup.procs && '
                         f'exec cat {big_file} {big_file} > /dev/null'])
        assert reader.wait(timeout=60) == 0
        time.sleep(0.3)
        perf.send_signal(2)
        perf.wait(timeout=30)
        drains: list[MemoryDrain] = [collector.drain()]
    finally:
        collector.close()
    mine = [s for d in drains for s in d.stalls
            if s.pid == reader.pid and s.kind == "memcg_reclaim"]
    count = sum(s.stalls for s in mine)
    total = sum(s.total_ns for s in mine)
    script = subprocess.run(["perf", "script", "-i", str(perf_data), "-F",
                             "comm,tid,time,event", "--ns"],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    perf_count, perf_total = perf_stalls(script, reader.pid)
    print(f"ktop {count} stalls {total / 1e6:.1f} ms; perf {perf_count} {perf_total / 1e6:.1f} ms")
    assert perf_count > 50, script[:2000]  # the reader did stall
    assert abs(count - perf_count) <= 0.1 * perf_count
    # perf's stall is measured by its own handlers' clock, each writing a record to its ring
    # buffer inside the stall it times: 7-11 us a stall more than ktop's here (measured with
    # ns stamps, 190-640 stalls of 35-190 us). Within 10% once that is allowed for.
    assert abs(total - perf_total) <= 0.1 * perf_total + PERF_OWN_NS * perf_count
    assert total <= perf_total * 1.02  # perf's window holds ktop's
    assert max(s.max_ns for s in mine) > 0
    assert sum(s.reclaimed for s in mine) > (FILE_SIZE - LIMIT) // 4096 // 2  # pages freed
    # The stalled reader's stacks: the kernel's through the charge, the user's in cat.
    assert all(s.kernel for s in mine)
    assert any(s.user for s in mine)
    assert all(s.comm == "cat" and s.cgroup for s in mine)
