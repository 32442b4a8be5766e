"""The JSON behind `--snapshot X.json`: the contract tools rely on, and replay from it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import replace

import pytest
from conftest import check_contract
from cpu_drains import StackCount, cpu_drain
from endings_data import every_field_profile

from ktop.aggregate.cpu import CpuAggregator
from ktop.collectors.procstat import CpuTicks
from ktop.exports.jsonfile import FORMAT, ROUNDING, from_json, to_json
from ktop.model import (
    BlockProfile,
    Bucket,
    CpuProfile,
    CpuTimes,
    DiskIo,
    DiskStats,
    HotFunction,
    IoProcess,
    IoRequest,
    IostatProfile,
    IoSubmitStack,
    LockAddress,
    LockCaller,
    LockOwnerWait,
    LockProfile,
    LockStack,
    LockTask,
    LockTaskStack,
    LockUserStack,
    Pressure,
    ProcessRow,
    SelfCostRow,
    Snapshot,
    StackSample,
    TaskCounts,
    UserFrame,
    WaitProcess,
    WaitProfile,
    WaitStack,
    WaitWaker,
)
from ktop.panes.syscalls.model import SlowSyscalls, SyscallProfile, SyscallStat


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
    agg.add(cpu_drain(0.0, 1.0137, (StackCount(77, "dd", 61, stack, (), False),), {}, CpuTicks(1, 2, 3)))
    snapshot = replace(recorded_snapshot, cpu=agg.profile(), duration_s=1.0137)
    back = from_json(json.loads(json.dumps(to_json(snapshot))))
    assert len(back.cpu.functions) == len(snapshot.cpu.functions) == 2  # the leaf, its caller
    for before, after in zip(snapshot.cpu.functions, back.cpu.functions):
        assert (after.symbol, after.samples, after.children) == (before.symbol, before.samples,
                                                                 before.children)
        assert after.percent == pytest.approx(before.percent, abs=1e-3)
        assert after.children_percent == pytest.approx(before.children_percent, abs=1e-3)
    assert back.cpu.stacks[0].frames == ("chacha_permute+0xda", "get_random_bytes_user+0x74")
    assert back.cpu.times.kernel == pytest.approx(snapshot.cpu.times.kernel, abs=0.01)


# ---- every field, both ways --------------------------------------------------------------

THIRD = 1 / 3  # many digits: what the rounding rules keep of it shows


def full_snapshot() -> Snapshot:
    """A snapshot with every field of every record set, none left at a default."""
    frame = UserFrame("worker_loop+0x1c", "/usr/bin/app")
    cpu = CpuProfile(
        sample_hz=99, cpus=2, window_s=5 + THIRD, cumulative=True, total_samples=990,
        idle_samples=10, kernel_samples=900, user_samples=80, lost={"kstack_collision": 1},
        functions=(HotFunction("vfs_read", "[kernel.kallsyms]", 7, 12 + THIRD, idle=True,
                               children=9, children_percent=14 + THIRD, idle_children=2),),
        stacks=(StackSample(
            pid=42, comm="app", samples=7, frames=("vfs_read+0x10", "ksys_read+0x5"),
            modules=("[kernel.kallsyms]", "[ext4]"), user_frames=(frame,), truncated=True,
            callers_dropped=True,
            idle=True, sources=("fs/read_write.c:482", "fs/read_write.c:600"),
            cgroup="/system.slice/app.service",
        ),),
        times=CpuTimes(user=20 + THIRD, kernel=70 + THIRD, idle=8 + THIRD, steal=1 + THIRD,
                       ticks=600, iowait=1 - THIRD, irq=1 + THIRD, softirq=2 + THIRD),
        line_info="file:line from /usr/lib/debug/boot/vmlinux",
    )
    locks = LockProfile(
        events=3, lost={"unpaired": 2}, window_s=5 + THIRD,
        callers=(LockCaller(
            caller="do_unlinkat+0x134", type="rwsem:W", contended=3, total_wait_ns=3000,
            max_wait_ns=2000, min_wait_ns=500,
            stacks=(LockStack(("rwsem_down_write_slowpath+0x2e0", "do_unlinkat+0x134"), 3, 3000, 2000),),
            hist_ns=(Bucket(256, 511, 1), Bucket(512, 1023, 4), Bucket(1024, 2047, 2)),
            tasks=(LockTask(101, "rm", 3, 3000, 2000, "/user.slice"),),
            user_stacks=(LockUserStack((frame,), 3, 3000),),
            task_stacks=(LockTaskStack(101, "rm", ("do_unlinkat+0x134",), (frame,), 3, 3000),),
        ),),
        locks=(LockAddress("0xffff888003a1c0e8", "rename_lock", "rwsem:W", 3, 3000, 2000,
                           name="&inode->i_rwsem", instance="/tmp/d"),),
        tasks=(LockTask(101, "rm", 3, 3000, 2000, "/user.slice"),),
        owners=(LockOwnerWait("task", 102, 100, "rm", ("up_write+0x49", "do_unlinkat+0x265"),
                              "not seen", "do_unlinkat+0x134", "rwsem:W", "0xffff888003a1c0e8",
                              3, 3000, 2000),),
        notes=("lock names left out: a test",),
    )
    blockio = BlockProfile(
        lost={"unpaired": 1}, window_s=5 + THIRD,
        disks=(DiskStats("vda", 253, 1, 4, 6, 16384, 24576, 1 + THIRD, (Bucket(128, 255, 10),),
                         flushes=2),),
        processes=(IoProcess(
            pid=7, comm="dd", disk="vda", major=253, minor=1, rw="W", requests=6, bytes=24576,
            avg_lat_ms=1 + THIRD, avg_queue_ms=THIRD,
            stacks=(IoSubmitStack(("blk_account_io_start+0x149", "ext4_file_write_iter+0x35a"), 6),),
            hist_us=(Bucket(128, 255, 6),), cgroup="/ktop-test",
        ),),
        requests=(IoRequest(2 + THIRD, "dd", 7, "vda", "W", 2048, 4096, THIRD, 1 + THIRD,
                            "/ktop-test"),),
    )
    waits = WaitProfile(
        processes=(WaitProcess(
            pid=7, comm="dd", cgroup="/ktop-test", on_cpu_ns=10, runq_ns=20, runq_count=2,
            blocked_s_ns=30, blocked_d_ns=40, blocked_other_ns=50, blocked_count=3,
            runq_hist=(0, 2), reason="io_schedule ← __iomap_dio_rw",
        ),),
        stacks=(WaitStack(
            pid=7, comm="dd", cgroup="/ktop-test", state="D", reason="io_schedule ← __iomap_dio_rw",
            frames=("io_schedule+0x42", "__iomap_dio_rw+0x5ea"), user=(frame,), count=3,
            total_ns=40, max_ns=20, hist=(0, 3),
            wakers=(WaitWaker(9, "kworker/0:1", ("blk_mq_end_request+0x1d",), 3, 40),),
            sampled_every=64,
        ),),
        lost={"wait_stacks_full": 1}, notes={"unseen_start": 4}, min_walk_us=1000, min_walk_d_us=10,
        window_s=5 + THIRD, short_walk_every=64, long_walk_every=8,
    )
    syscalls = SyscallProfile(
        calls=(SyscallStat(pid=7, tid=8, comm="dd", cgroup="/ktop-test", syscall="openat",
                           errno="ENOENT", count=3, total_ns=3000, max_ns=1500,
                           hist=(0,) * 10 + (3,)),),
        slow=(SlowSyscalls(pid=7, tid=8, comm="dd", cgroup="/ktop-test", syscall="fsync",
                           errno="EIO", frames=("io_schedule+0x42",), user=(frame,), count=1,
                           total_ns=2_000_000, max_ns=2_000_000, hist=(0,) * 20 + (1,)),),
        lost={"counts_map_full": 2}, notes={"unpaired_exit": 5}, slow_ns=1_000_000,
        window_s=5 + THIRD,
    )
    return Snapshot(
        ktop_version="0.1", kernel="6.18.44", hostname="testhost", taken_at=1767268245 + THIRD,
        duration_s=5 + THIRD, headers="linux-headers-6.1.0-56-amd64", cpu=cpu,
        processes=(ProcessRow(7, "dd", "root", "D", 50 + THIRD, 40 + THIRD, 1, 4096, "dd if=x",
                              "/ktop-test", 4096.0, 67108864.0, user_percent=10 + THIRD,
                              parent=1, runq_percent=3 + THIRD),),  # parent: as on exited rows
        locks=locks, blockio=blockio, waits=waits, endings=every_field_profile(),
        syscalls=syscalls,
        pressure=Pressure(cpu_some=1 + THIRD, cpu_full=THIRD, io_some=2 + THIRD, io_full=THIRD,
                          memory_some=THIRD, memory_full=THIRD / 2),
        cgroup_pressure=Pressure(cpu_some=THIRD, cpu_full=THIRD, io_some=THIRD, io_full=THIRD,
                                 memory_some=THIRD, memory_full=THIRD),
        cgroup_pressure_of="/system.slice/web.service", unavailable={"processes": "just to say why"},
        loading={"locks": "compiling its BPF program... 2s"},
        cost=SelfCostRow(cpu_percent=1 + THIRD, bpf_percent=THIRD,
                         bpf_panes={"waits": THIRD}, max_cost=10.0,
                         budget_steps=("wait stacks: short waits 1 in 512",)), paused=True, cumulative=True,
        tasks=TaskCounts(running=3, blocked=1, forks_per_s=2950 + THIRD, read_late_s=19.6),
        cpu_times=CpuTimes(user=10 + THIRD, kernel=20 + THIRD, idle=60 + THIRD, steal=THIRD,
                           ticks=300, iowait=10 - THIRD, irq=THIRD, softirq=3 + THIRD),
        iostat=IostatProfile(1 + THIRD, (DiskIo("vda", 253, 1, *range(1, 18)),)),
    )


def unset_fields(value: object, path: str) -> list[str]:
    """Where in `value` a field is empty, zero, False or None: a default the JSON could lose."""
    if dataclasses.is_dataclass(value):
        unset = []
        for f in dataclasses.fields(value):
            field = getattr(value, f.name)
            unset += [] if field else [f"{path}.{f.name}"]
            unset += unset_fields(field, f"{path}.{f.name}")
        return unset
    if isinstance(value, tuple):
        return [where for i, item in enumerate(value) for where in unset_fields(item, f"{path}[{i}]")]
    if isinstance(value, Mapping):
        return [where for k, item in value.items() for where in unset_fields(item, f"{path}[{k!r}]")]
    return []


def as_rounded(value):
    """`value` with its floats rounded as the JSON writes them (export.ROUNDING)."""
    if dataclasses.is_dataclass(value):
        digits = ROUNDING.get(type(value), {})
        return dataclasses.replace(value, **{
            f.name: round(field, digits[f.name]) if f.name in digits else as_rounded(field)
            for f in dataclasses.fields(value)
            for field in [getattr(value, f.name)]
        })
    if isinstance(value, tuple):
        return tuple(as_rounded(item) for item in value)
    return value


def test_every_field_of_the_model_round_trips():
    """A field added to the model without a thought for the JSON fails here: left at its
    default below, or lost (or not read back) on the way."""
    snapshot = full_snapshot()
    assert unset_fields(snapshot, "snapshot") == []
    back = from_json(json.loads(json.dumps(to_json(snapshot, include_idle=True))))
    assert back == as_rounded(snapshot)
    assert back.cpu.functions[0].percent == 12.333  # the rules did apply
    assert back.taken_at == snapshot.taken_at  # and only they
    assert back.cpu.window_s == snapshot.cpu.window_s  # spans feed the exports: whole


def test_a_file_from_before_the_format_field_still_reads(recorded_json):
    assert "format" not in recorded_json
    caller = recorded_json["locks"]["callers"][0]
    caller["hist_ns"] = [[0, 2, 1], [2, 4, 0], [4, 8, 3]]  # as ktop wrote them: exclusive highs
    snapshot = from_json(recorded_json)
    assert snapshot.locks.callers[0].hist_ns == (Bucket(0, 1, 1), Bucket(2, 3, 0), Bucket(4, 7, 3))
    assert (snapshot.cpu.sample_hz, snapshot.cpu.cpus) == (99, 2)  # once only at the top
    data = to_json(snapshot)
    assert data["format"] == FORMAT and data["locks"]["callers"][0]["hist_ns"][0] == [0, 1, 1]
