"""`ktop --serve` on the real kernel: scraped during start-up, then under a dd of its own (root)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import root_only
from test_serve import LOCALHOST, families, free_port, scrape, value

from ktop.collectors.disks import DiskNames, kernel_dev

pytestmark = [pytest.mark.live, root_only]

SCRATCH_PARENT = "/var/tmp"  # on a real disk here (ext4 on vda), unlike /tmp or /dev/shm
SERVE_S = 5.0


def wait_for_metric(port: int, check, seconds: float = 90.0) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        try:
            status, text = scrape(port)
        except ConnectionRefusedError:  # not listening yet
            status, text = 0, ""
        parsed = families(text) if status == 200 else {}
        if parsed and check(parsed):
            return parsed
        assert time.monotonic() < deadline, f"never seen; last scrape:\n{text[:2000]}"
        time.sleep(0.2)


def written_bytes(parsed: dict, disk: str) -> float:
    family = parsed.get("ktop_disk_io_bytes")
    return 0.0 if family is None else sum(
        s.value for s in family.samples
        if s.name.endswith("_total") and s.labels.get("disk") == disk
        and s.labels.get("op") == "write")


def completions_lost(parsed: dict) -> dict[str, float]:
    """Requests whose completion ktop never saw, as the page counts them."""
    family = parsed.get("ktop_blockio_lost_events")
    return {} if family is None else {
        s.labels["reason"]: s.value for s in family.samples
        if s.labels.get("reason") in ("complete_missed", "stale_inflight") and s.value}


def test_served_metrics_show_start_up_then_dd_bytes_on_its_disk():
    scratch = tempfile.mkdtemp(dir=SCRATCH_PARENT, prefix="ktop-serve-")
    st_dev = os.stat(scratch).st_dev
    disk = DiskNames()(kernel_dev(os.major(st_dev), os.minor(st_dev)))
    if not os.path.isdir(f"/sys/block/{disk}/mq"):
        os.rmdir(scratch)
        pytest.skip(f"{SCRATCH_PARENT} is on {disk}, not a whole request-based disk")
    port = free_port()
    ktop = subprocess.Popen(
        [sys.executable, "-m", "ktop", "--serve", f"{LOCALHOST}:{port}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    dd = None
    try:
        # Listening comes before loading: the first answer says start-up is not over.
        first = wait_for_metric(port, lambda parsed: True, seconds=30)
        assert value(first, "ktop_up") == 0.0
        # Before the first collect the page holds ktop_up alone.
        wait_for_metric(port, lambda p: "ktop_pane_up" in p
                        and value(p, "ktop_pane_up", pane="blockio") == 1.0)
        dd = subprocess.Popen(
            ["dd", "if=/dev/zero", f"of={scratch}/direct", "bs=1M", "count=128", "oflag=direct"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            dd.wait(timeout=SERVE_S)
        except subprocess.TimeoutExpired:
            dd.send_signal(signal.SIGINT)  # dd says what it copied, then exits
        report = dd.communicate(timeout=30)[1]
        written = int(re.search(r"^(\d+) bytes", report, re.M).group(1))
        assert written >= 1 << 20, report
        # O_DIRECT writes are on the disk when dd exits: all of them show within a few
        # refreshes, or, where the kernel handed a completion to no program (in bursts,
        # under load: see bpf/blockio.bpf.c), a loss says so once the disk is idle.
        def settled(parsed) -> bool:
            return written_bytes(parsed, disk) >= written or bool(completions_lost(parsed))

        try:
            parsed = wait_for_metric(port, settled, seconds=20)
        except AssertionError:
            parsed = families(scrape(port)[1])
        # Start-up ends once every BPF pane has attached or said why not: the other panes
        # compile while dd runs, and at load a compile outlasts it (ktop_up 0 once, 20 s on).
        wait_for_metric(port, lambda p: value(p, "ktop_up") == 1.0, seconds=120)
        on_disk, lost = written_bytes(parsed, disk), completions_lost(parsed)
        print(f"dd wrote {written} bytes; ktop_disk_io_bytes_total{{disk={disk},op=write}} "
              f"{on_disk:.0f}; completions lost {lost}; "
              f"{sum(len(f.samples) for f in parsed.values())} series")
        assert on_disk >= written or lost, f"{written - on_disk:.0f} bytes short, no loss said"
        assert on_disk >= written * 0.9  # a burst of unseen completions, not a broken probe
        assert value(parsed, "ktop_function_samples", function="other") >= 0
    finally:
        if dd is not None and dd.poll() is None:
            dd.kill()
            dd.wait()
        ktop.send_signal(signal.SIGTERM)
        out, err = ktop.communicate(timeout=30)
        for name in os.listdir(scratch):
            os.unlink(os.path.join(scratch, name))
        os.rmdir(scratch)
    assert ktop.returncode == 0, err
    assert err.strip() == f"ktop: serving http://{LOCALHOST}:{port}/metrics (Ctrl-C stops)"
