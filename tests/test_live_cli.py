"""`ktop --snapshot FILE` end to end on the real kernel, and SIGTERM in the middle (root)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from conftest import (
    PANE_TITLES,
    HeldPrograms,
    as_nobody,
    bpf_programs_of,
    check_contract,
    first_in_line,
    loaded_bpf_programs,
    root_only,
)

pytestmark = [pytest.mark.live, root_only]

PROGRAM = "on_cpu_sample"  # the CPU sampler's BPF program, as bpftool names it


def ktop_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ktop", *args]


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """All three formats at once (each run compiles its own programs: run them side by side),
    over a kernel-bound workload of our own, so the machine is never idle for them."""
    directory = tmp_path_factory.mktemp("snapshots")
    runs = {}
    workload = subprocess.Popen(["dd", "if=/dev/urandom", "of=/dev/null", "bs=64k"],
                                stderr=subprocess.DEVNULL)
    with first_in_line():
        for ext in ("json", "txt", "svg"):
            path = directory / f"ktop.{ext}"
            runs[ext] = (path, subprocess.Popen(
                ktop_command("--snapshot", str(path), "--duration", "2"),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))
        results = {}
        try:
            for ext, (path, process) in runs.items():
                out, err = process.communicate(timeout=120)
                results[ext] = (path, process.returncode, out, err)
        finally:
            workload.kill()
            workload.wait()
    return directory, results


def finished(snapshots, ext: str):
    directory, results = snapshots
    path, code, out, err = results[ext]
    assert code == 0, err
    assert err.strip() == f"ktop: wrote {path}"  # one line; nothing from bcc or clang
    assert out == ""
    assert sorted(os.listdir(directory)) == ["ktop.json", "ktop.svg", "ktop.txt"]  # no temporaries
    return path


def test_json_snapshot_meets_the_contract(snapshots):
    data = json.loads(finished(snapshots, "json").read_text())
    check_contract(data)
    assert data["unavailable"].get("functions") is None
    assert data["sample_hz"] == 99 and data["cpus"] == os.cpu_count()
    assert data["kernel"] == os.uname().release and data["hostname"] == socket.gethostname()
    assert 1.9 <= data["duration_s"] <= 6.0
    cpu = data["cpu"]
    assert cpu["total_samples"] > 0 and cpu["functions"] and cpu["stacks"]
    machine = data["sample_hz"] * data["duration_s"] * data["cpus"]
    for f in cpu["functions"]:
        assert f["percent"] == pytest.approx(100 * f["samples"] / machine, rel=2e-3, abs=2e-3)
    assert not any(f.get("idle") for f in cpu["functions"])  # no --idle given
    # every stack has frames: kernel ones, or user ones alone (a process in user space)
    assert all(s["frames"] or s["user_frames"] for s in cpu["stacks"])
    assert any(f["symbol"].startswith("chacha") for f in cpu["functions"][:5])  # our workload
    assert any(p["comm"] == "python" or "ktop" in p.get("cmdline", "") for p in data["processes"])


def test_text_snapshot_is_the_screen_without_escapes(snapshots):
    text = finished(snapshots, "txt").read_bytes().decode("utf-8")
    controls = {c for c in text if ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) <= 0x9F}
    assert not controls  # no ESC, no C1 CSI, nothing a terminal would act on
    for title in PANE_TITLES:
        assert title in text
    lines = text.splitlines()
    assert len(lines) == 50 and max(len(line) for line in lines) <= 160
    assert socket.gethostname() in lines[0]
    assert "Children" in text and "Self" in text and "COMMAND" in text


def test_svg_snapshot_parses_and_shows_the_panes(snapshots):
    root = ET.parse(finished(snapshots, "svg")).getroot()
    assert root.tag.endswith("svg")
    words = " ".join("".join(root.itertext()).replace("\xa0", " ").split())
    for title in PANE_TITLES:
        assert title in words
    assert "Children" in words and "Self" in words


def held_by_other_process_groups() -> set[int]:
    """Ids of the BPF programs that processes outside this test's process group hold open
    (ktop and its compiler children are in the test's)."""
    ours, held = os.getpgid(0), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != ours:
                held |= bpf_programs_of(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return held


def test_sigterm_detaches_the_programs_and_says_so_in_one_line(tmp_path):
    target = tmp_path / "x.json"
    with first_in_line():
        process = subprocess.Popen(
            ktop_command("--snapshot", str(target), "--duration", "30"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        held = HeldPrograms(process.pid)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                if PROGRAM in held.names():
                    break
                time.sleep(0.2)
            else:
                pytest.fail("the sampler never appeared among ktop's programs")
            time.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            # The waits pane loads last: it was compiling, or just handed over, when the
            # signal came; its compiler's programs are ktop's too.
            held.watch_until_exit(process)
            out, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 130, err  # as for Ctrl-C; not a crash (139) while clang ran
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ktop: "), err
    assert "Traceback" not in err
    # Nothing of it may stay loaded (the waits' sched_switch program would run on every
    # switch): none of the programs ktop and its compiler children held, nor a child left.
    assert held.left_behind() == ([], set())
    # Nor one loaded and attached between two polls and held by no process now (other
    # sessions' ktops on this machine hold theirs).
    deadline = time.monotonic() + 5
    while left := {i for i, name in loaded_bpf_programs().items()
                   if name.startswith("on_sched_")} - held_by_other_process_groups():
        assert time.monotonic() < deadline, f"a waits program outlived ktop: {left}"
        time.sleep(0.2)
    assert os.listdir(tmp_path) == []  # nothing written, no temporary left


def test_without_privileges_every_bpf_pane_says_why_and_processes_still_work(shared_dir):
    """As a user without root or capabilities: `setpriv` drops to nobody, no capabilities."""
    drop = as_nobody(shared_dir)
    runs = {
        ext: subprocess.Popen(
            drop + ktop_command("--snapshot", os.path.join(shared_dir, f"x.{ext}"), "--duration", "1"),
            cwd=shared_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for ext in ("json", "txt")
    }
    for process in runs.values():
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    with open(os.path.join(shared_dir, "x.json")) as f:
        data = json.load(f)
    check_contract(data)
    assert data["cpu"] is None
    for pane in ("functions", "locks", "blockio", "waits"):
        reason = data["unavailable"][pane]
        assert "root" in reason and "sudo ktop" in reason  # why, and how to fix it
    assert len(data["processes"]) > 10
    with open(os.path.join(shared_dir, "x.txt")) as f:
        text = " ".join(f.read().split())
    # Every BPF pane of the default layout says so (the endings pane is among them now).
    from ktop.config import default_panes
    from ktop.registry import PANES

    bpf_shown = [p.name for p in PANES if p.build is not None and p.name in default_panes()]
    assert len(bpf_shown) >= 4
    assert text.count("unavailable: needs root") == len(bpf_shown)
    # Neither needs root: the kernel's own run-queue time and pressure.
    assert "RUNQ%" in text and re.search(r"PSI cpu \d+\.\d io \d+\.\d/\d+\.\d", text), text[:400]
    assert "CPU sampling unavailable" in text
    # The /proc/stat split needs no root: the header keeps it.
    assert re.search(r"CPU kernel +\d+\.\d% +user +\d+\.\d% +idle +\d+\.\d%", text), text[:400]
    # The processes pane still works (five panes leave it fewer rows: kthreadd is in the data).
    assert "COMMAND" in text and any(p["comm"] == "kthreadd" for p in data["processes"])
