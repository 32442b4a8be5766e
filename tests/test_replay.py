"""`ktop --replay FILE.json`: a snapshot saved on one machine, looked at later, without root
(perf report to --snapshot's perf record)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES, PANE_TITLES, as_nobody, check_contract

RECORDED = str(FIXTURES / "recorded.json")


def ktop(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "ktop", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, cwd="/")


def test_replay_pictures_the_saved_screen_without_privileges(shared_dir):
    recording = shutil.copy(RECORDED, shared_dir)
    os.chmod(recording, 0o644)
    out = os.path.join(shared_dir, "replay.txt")
    # As nobody without capabilities when we are root: replaying needs no privilege.
    prefix = tuple(as_nobody(shared_dir)) if os.geteuid() == 0 else ()
    result = ktop("--replay", recording, "--snapshot", out, prefix=prefix)
    assert result.returncode == 0, result.stderr
    assert os.stat(out).st_uid == (65534 if prefix else os.geteuid())
    with open(out) as f:
        screen = f.read()
    assert "replay of " in screen and "recorded.json" in screen  # never mistaken for live data
    assert "testhost" in screen  # the recorded machine, not this one
    for title in PANE_TITLES[:5]:  # (recorded before the endings pane: not in the file)
        assert title in screen
    assert "chacha_permute" in screen  # the recorded hottest function
    assert "needs root" not in screen


def test_replay_to_json_gives_back_the_same_data(tmp_path):
    out = tmp_path / "again.json"
    result = ktop("--replay", RECORDED, "--snapshot", str(out), "--idle")  # saved with idle rows
    assert result.returncode == 0, result.stderr
    again = json.loads(out.read_text())
    check_contract(again)
    with open(RECORDED) as f:
        original = json.load(f)
    def functions(d):
        return [(f["symbol"], f["samples"], f["percent"]) for f in d["cpu"]["functions"]]

    assert functions(again) == functions(original)
    def callers(d):
        return [(c["caller"], c["type"], c["contended"], c["total_wait_ns"], c["max_wait_ns"])
                for c in d["locks"]["callers"]]

    assert callers(again) == callers(original)
    # (a file written before flushes were counted apart reads back with none)
    assert [{k: d[k] for k in o} for d, o in zip(again["blockio"]["disks"],
                                                 original["blockio"]["disks"])] == \
        original["blockio"]["disks"]
    assert all(d["flushes"] == 0 for d in again["blockio"]["disks"])
    # A file written before the cgroup and disk columns reads back with them unknown.
    assert [{k: p[k] for k in o} for p, o in zip(again["processes"], original["processes"])] == \
        original["processes"]
    assert {(p["cgroup"], p["disk_read_bps"], p["disk_write_bps"]) for p in again["processes"]} \
        == {("", None, None)}


def test_replay_drills_into_a_recorded_function(tmp_path):
    out = tmp_path / "drill.txt"
    result = ktop("--replay", RECORDED, "--snapshot", str(out), "--drill", "functions:chacha_permute")
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "chacha_permute" in text and "chacha_block_generic" in text  # its caller


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (None, "cannot read"),
        (b"\x00\xff not json", "is not JSON"),
        (b'{"ktop": 1}', "is not a ktop snapshot (no 'ktop_version' field)"),
        (b"[1, 2]", "is not a ktop snapshot"),
        (b'{"ktop_version": "0.1", "kernel": "k", "hostname": "h", "duration_s": 1,'
         b' "cpu": null, "processes": [{"pid": "x"}]}', "is not a ktop snapshot"),
    ],
)
def test_a_file_that_is_not_a_snapshot_gets_one_line_and_exit_1(tmp_path, content, complaint):
    path = tmp_path / "bad \x1b[2J.json"
    if content is not None:
        path.write_bytes(content)
    for mode in ([], ["--snapshot", str(tmp_path / "out.svg")]):
        result = ktop("--replay", str(path), *mode)
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ktop: ") and complaint in lines[0], lines
        assert "\x1b" not in result.stderr and "\\x1b[2J" in lines[0]  # the name, escaped
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.svg").exists()


@pytest.mark.parametrize("option", [["-F", "999"], ["-w", "10"], ["--cumulative"], ["-d", "2"]])
def test_live_only_options_with_replay_are_a_usage_error(option):
    result = ktop("--replay", RECORDED, *option)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: ktop") and "--replay" in result.stderr
