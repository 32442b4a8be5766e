"""The JSON behind `--snapshot X.json`: the contract tools rely on, and replay from it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import check_contract

from ktop.aggregate.cpu import CpuAggregator
from ktop.collectors.cpu import CpuDrain, StackCount
from ktop.collectors.procstat import CpuTicks
from ktop.export import from_json, to_json


def test_recorded_snapshot_round_trips_exactly(recorded_snapshot):
    text = json.dumps(to_json(recorded_snapshot, include_idle=True))
    assert from_json(json.loads(text)) == recorded_snapshot


def test_export_meets_the_contract(recorded_snapshot):
    data = json.loads(json.dumps(to_json(recorded_snapshot)))
    check_contract(data)


def test_idle_functions_and_stacks_are_left_out_unless_asked(recorded_snapshot):
    idle_symbols = {f.symbol for f in recorded_snapshot.cpu.functions if f.idle}
    assert idle_symbols, "the fixture has idle rows"
    default = to_json(recorded_snapshot)["cpu"]
    assert not idle_symbols & {f["symbol"] for f in default["functions"]}
    assert not any(s["idle"] for s in default["stacks"])
    with_idle = to_json(recorded_snapshot, include_idle=True)["cpu"]
    assert idle_symbols <= {f["symbol"] for f in with_idle["functions"]}
    # The totals do not change with what is listed.
    assert default["idle_samples"] == with_idle["idle_samples"] == recorded_snapshot.cpu.idle_samples


def test_percent_is_samples_over_hz_duration_cpus(recorded_json):
    """As the issue defines it, from the top-level fields alone."""
    data = to_json(from_json(recorded_json), include_idle=True)
    machine = data["sample_hz"] * data["duration_s"] * data["cpus"]
    for f in data["cpu"]["functions"]:
        assert f["percent"] == pytest.approx(100 * f["samples"] / machine, rel=2e-3, abs=2e-3)


def test_sample_totals_add_up(recorded_snapshot):
    cpu = to_json(recorded_snapshot)["cpu"]
    assert cpu["total_samples"] == cpu["kernel_samples"] + cpu["user_samples"] + cpu["idle_samples"]
    listed = sum(f["samples"] for f in cpu["functions"])
    assert listed <= cpu["kernel_samples"]


def test_frames_are_kernel_symbols_innermost_first(recorded_snapshot):
    dd = next(s for s in to_json(recorded_snapshot)["cpu"]["stacks"] if s["comm"] == "dd")
    frames = [f.split("+")[0] for f in dd["frames"]]
    # The syscall entry is the outermost frame, the function that was running the innermost.
    assert frames[-1].startswith("entry_SYSCALL_64")
    assert frames.index("do_syscall_64") > frames.index("vfs_read")


def test_hostile_names_are_kept_raw_in_the_data(recorded_snapshot):
    """Escaping is for screens; tools reading the JSON get the real bytes back."""
    comms = {p["comm"] for p in to_json(recorded_snapshot)["processes"]}
    assert {"\x1b[2J evil", "[bold]red[/]", "[/]"} <= comms
    text = json.dumps(to_json(recorded_snapshot))
    assert "\x1b" not in text  # JSON escapes it as \u001b: the file itself is safe to cat
    assert json.loads(text)["processes"] == to_json(recorded_snapshot)["processes"]


def test_unavailable_panes_are_exported_with_their_reason(recorded_snapshot):
    snapshot = replace(
        recorded_snapshot, cpu=None,
        unavailable={"functions": "needs root (or CAP_BPF and CAP_PERFMON): run `sudo ktop`"},
    )
    data = json.loads(json.dumps(to_json(snapshot)))
    check_contract(data)
    assert data["cpu"] is None
    assert data["unavailable"]["functions"].startswith("needs root")
    assert from_json(data).unavailable == snapshot.unavailable


def test_a_live_profile_round_trips_within_rounding(recorded_snapshot, kallsyms, addr):
    agg = CpuAggregator(kallsyms, 99, 2)
    stack = (addr("chacha_permute") + 0xDA, addr("get_random_bytes_user") + 0x74)
    agg.add(CpuDrain(0.0, 1.0137, (StackCount(77, "dd", 61, stack, (), False),), {}, CpuTicks(1, 2, 3)))
    snapshot = replace(recorded_snapshot, cpu=agg.profile(), duration_s=1.0137)
    back = from_json(json.loads(json.dumps(to_json(snapshot))))
    (before,), (after,) = snapshot.cpu.functions, back.cpu.functions
    assert (after.symbol, after.samples) == (before.symbol, before.samples)
    assert after.percent == pytest.approx(before.percent, abs=1e-3)
    assert back.cpu.stacks[0].frames == ("chacha_permute+0xda", "get_random_bytes_user+0x74")
    assert back.cpu.times.kernel == pytest.approx(snapshot.cpu.times.kernel, abs=0.01)
