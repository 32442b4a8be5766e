"""`--pid` and `--cgroup` cut every output, not just the screen (issue 44, item 17): .json,
.folded (each kind), .pb.gz and .prom held every process's rows. Replayed data (no root),
each process with its own command and cgroup, so any row of another one shows in the text."""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from collections.abc import Sequence

import pytest
from test_compare import window

from ktop.exports.jsonfile import to_json
from ktop.model import LockCaller, LockTaskStack
from ktop.registry import folded_exports, pprof_exports

SHOWN, OTHERS = 200, (100, 300)


def _with_own_names(value):
    """Every row of a process: command comm-PID, cgroup /app-PID.slice (its pid kept)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(_with_own_names(v) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes = {f.name: _with_own_names(getattr(value, f.name))
               for f in dataclasses.fields(value) if f.name not in ("pid", "comm", "cgroup")}
    # A signal's sender and target (its cgroup the sender's), an ending's killer: each named
    # by its own pid as well.
    for prefix in ("killer_", "target_", "sender_", ""):
        pid = getattr(value, f"{prefix}pid", None)
        if isinstance(pid, int) and pid > 0 and hasattr(value, f"{prefix}comm"):
            changes[f"{prefix}comm"] = f"comm-{pid}"
            if hasattr(value, "cgroup") and prefix in ("sender_", ""):
                changes["cgroup"] = f"/app-{pid}.slice"
    return dataclasses.replace(value, **changes)


def _by_task(caller: LockCaller) -> LockCaller:
    """Each task's own stack at the caller, as a live ktop keeps them (pprof names its pid)."""
    return dataclasses.replace(caller, task_stacks=tuple(
        LockTaskStack(t.pid, t.comm, caller.stacks[0].frames, (), t.contended, t.total_wait_ns)
        for t in caller.tasks))


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory):
    """Busy records (dd 100, tar 200) and calm ones (calmd 300) in one window: every pane."""
    snapshot = _with_own_names(window(119, 70))
    snapshot = dataclasses.replace(snapshot, locks=dataclasses.replace(
        snapshot.locks, callers=tuple(_by_task(c) for c in snapshot.locks.callers)))
    path = tmp_path_factory.mktemp("filters") / "three.json"
    path.write_text(json.dumps(to_json(snapshot, include_idle=True)))
    return str(path)


def ktop_snapshot(snapshot_file: str, out, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ktop", "--replay", snapshot_file,
                             "--snapshot", str(out), *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    return (gzip.decompress(data) if out.suffix == ".gz" else data).decode("latin-1")


OUTPUTS = ([("json", ())] + [("folded", ("--folded-of", kind)) for kind in folded_exports()]
           + [("pb.gz", ("--pprof-of", kind)) for kind in pprof_exports()] + [("prom", ())])


@pytest.mark.parametrize("by", ["--pid", "--cgroup"])
@pytest.mark.parametrize(("suffix", "args"), OUTPUTS)
def test_pid_and_cgroup_cut_every_output(snapshot_file, tmp_path, by, suffix, args):
    unfiltered = ktop_snapshot(snapshot_file, tmp_path / f"all.{suffix}", *args)
    what = str(SHOWN) if by == "--pid" else f"/app-{SHOWN}.slice"
    text = ktop_snapshot(snapshot_file, tmp_path / f"one.{suffix}", *args, by, what)
    shown = f"comm-{SHOWN}"
    others = [f"comm-{pid}" for pid in OTHERS if f"comm-{pid}" in unfiltered]
    assert others, "the unfiltered output names other processes"
    assert shown in text and not [other for other in others if other in text], (others, text)


def test_the_json_keeps_the_machine_and_leaves_out_what_no_process_owns(snapshot_file,
                                                                         tmp_path):
    data = json.loads(ktop_snapshot(snapshot_file, tmp_path / "one.json", "--pid", str(SHOWN)))
    everything = json.loads(ktop_snapshot(snapshot_file, tmp_path / "all.json"))
    pids = {row["pid"] for rows in (data["processes"], data["cpu"]["stacks"],
                                    data["blockio"]["processes"], data["blockio"]["requests"],
                                    data["waits"]["processes"], data["waits"]["stacks"],
                                    data["locks"]["tasks"]) for row in rows}
    assert pids == {SHOWN}
    assert data["locks"]["locks"] == [] and data["locks"].get("owners", []) == []
    # The machine's CPU and disks stay: percentages are of the machine, as on the screen.
    assert data["cpu"]["total_samples"] == everything["cpu"]["total_samples"]
    assert data["blockio"]["disks"] == everything["blockio"]["disks"]
    [function] = [f for f in data["cpu"]["functions"] if f["symbol"] == "spike_func"]
    assert function["samples"] == sum(s["samples"] for s in data["cpu"]["stacks"]
                                      if s["frames"][0].startswith("spike_func"))


def test_pid_cuts_every_line_of_a_dump(tmp_path):
    from compare_data import make_compare_recording  # noqa: PLC0415

    recording = make_compare_recording(tmp_path / "r.krec")
    result = subprocess.run([sys.executable, "-m", "ktop", "--replay", recording, "--dump",
                             "jsonl", "--pid", str(SHOWN)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    pids = {row["pid"] for data in lines for rows in (
        data["processes"], data["cpu"]["stacks"], data["blockio"]["processes"],
        data["waits"]["stacks"], data["locks"]["tasks"]) for row in rows}
    assert len(lines) == 120 and pids == {SHOWN}
