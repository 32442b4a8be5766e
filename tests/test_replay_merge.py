"""A replay's window over records shows what live ktop showed with a window of the same
intervals: each aggregator is fed the same drains, its newest interval alone is kept after
each (as `--record` keeps it), and ktop.aggregate.merge of the last records must equal the
aggregator's own window, field by field (floats to 1e-9)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

import pytest
from cpu_drains import StackCount, cpu_drain

from ktop.aggregate.cpu import CpuAggregator
from ktop.aggregate.cpu import merge_profiles as merge_cpu
from ktop.aggregate.locks import LockAggregator
from ktop.aggregate.locks import merge_profiles as merge_locks
from ktop.aggregate.merge import merge_snapshots as merge
from ktop.collectors.cpu import MAX_STACK_DEPTH, CpuDrain
from ktop.collectors.disks import kernel_dev
from ktop.collectors.locks import (
    NAME_INODE_RWSEM,
    NAME_MMAP_LOCK,
    OWNER_READERS,
    OWNER_TASK,
    LockDrain,
    LockName,
    LockWaits,
    OwnerWaits,
    StackWaits,
    TaskWaits,
)
from ktop.collectors.procstat import CpuTicks
from ktop.collectors.waits import WalkMinimums
from ktop.model import IoRequest, Snapshot, UserFrame
from ktop.panes.blockio.aggregate import BlockAggregator
from ktop.panes.blockio.aggregate import merge_profiles as merge_blockio
from ktop.panes.blockio.collector import (
    BlockDrain,
    CompletedRequest,
    IoStack,
    IoTotal,
    LatencyBucket,
)
from ktop.record.fileformat import REQUEST_DIGITS, decode_snapshot, encode_snapshot

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def comparable(value):
    """A model value as nested tuples, floats rounded: what "equal" means for a profile (a
    request's times to what a record keeps of them: what the screen shows)."""
    if isinstance(value, IoRequest):
        value = dataclasses.replace(value, **{name: round(getattr(value, name), digits)
                                              for name, digits in REQUEST_DIGITS.items()})
    if dataclasses.is_dataclass(value):
        return (type(value).__name__,) + tuple(
            (f.name, comparable(getattr(value, f.name))) for f in dataclasses.fields(value))
    if isinstance(value, tuple | list):
        return tuple(comparable(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, comparable(v)) for k, v in value.items()))
    if isinstance(value, float):
        return round(value, 9)
    return value


def fields_never_set(value) -> set[str]:
    """'Class.field' of each model field that holds its default (a false value, for a field
    without one) in every row of `value`: a field one side dropped would go unseen there, so
    the fixtures must set every field the comparison is trusted with."""
    seen: dict[str, bool] = {}

    def walk(v) -> None:
        if dataclasses.is_dataclass(v):
            for f in dataclasses.fields(v):
                item = getattr(v, f.name)
                default = (f.default if f.default is not dataclasses.MISSING
                           else f.default_factory() if f.default_factory is not dataclasses.MISSING
                           else None)
                name = f"{type(v).__name__}.{f.name}"
                set_here = bool(item) if default is None else item != default
                seen[name] = seen.get(name, False) or set_here
                walk(item)
        elif isinstance(v, tuple | list) or (not isinstance(v, str | Mapping)
                                              and hasattr(v, "__len__") and hasattr(v, "__iter__")):
            for item in v:
                walk(item)

    walk(value)
    return {name for name, was_set in seen.items() if not was_set}


def through_a_file(profile, field: str):
    """The profile as a record keeps it: encoded and decoded again."""
    snapshot = Snapshot(ktop_version="0.1", kernel="6.18", hostname="h", taken_at=1.0,
                        duration_s=1.0, headers="", processes=(), **{"cpu": None, field: profile})
    return getattr(decode_snapshot(encode_snapshot(snapshot)), field)


def recorded_and_window(aggregator, drains, field, **profile_args):
    records = []
    for drain in drains:
        aggregator.add(drain)
        records.append(through_a_file(aggregator.profile(latest=True, **profile_args), field))
    return records, aggregator.profile(**profile_args)


# ---- hot functions -----------------------------------------------------------------------


def cpu_drains(addr) -> list[CpuDrain]:
    urandom = (addr("chacha_permute") + 0xDA, addr("chacha_block_generic") + 0x73,
               addr("get_random_bytes_user") + 0x74, addr("do_syscall_64") + 0x71)
    copy = (addr("_copy_to_iter") + 0x1B0, addr("get_random_bytes_user") + 0x9C)
    halt = (addr("pv_native_safe_halt") + 0xB, addr("default_idle") + 0x9)
    deep = copy + (addr("do_syscall_64") + 0x71,) * (MAX_STACK_DEPTH - len(copy))  # truncated
    drains = []
    for i in range(6):
        counts = [
            StackCount(4242, "dd", 90 + 7 * i, urandom, (0x401000 + i % 2,), False,
                       cgroup="/ktop.slice/dd.scope"),
            StackCount(4242, "dd", 30, deep, (0x401000,), False, cgroup="/ktop.slice/dd.scope"),
            StackCount(31337, "ktop", 1 + i % 2, copy, (), False, cgroup="/user.slice", own=True),
            StackCount(4242, "dd", 20 + i, copy, (), False),
            StackCount(0, "swapper/1", 60 - 5 * i, halt, (), False),
            StackCount(777, "python3", 3 + i, (), (0x402000,), True),
        ]
        if i % 3 == 0:
            counts.append(StackCount(999, "\x1b[2J sh", 4, copy, (), False))
        ticks = CpuTicks(user=10 + i, kernel=150 + 3 * i, idle=40 - i, steal=i % 2, iowait=1 + i,
                         irq=1 + i % 3, softirq=20 + 2 * i)
        drains.append(cpu_drain(100.0 + i, 101.0 + i + 0.01 * i, tuple(counts),
                               {"kstack_collision": i}, ticks))
    return drains


def name_user(pid, addresses):
    return tuple(UserFrame(f"fn_{a:x}+0x4", "/usr/bin/dd") for a in addresses)


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_window_of_cpu_records_equals_the_live_window(kallsyms, addr, window):
    drains = cpu_drains(addr)
    span = sum(d.end - d.start for d in drains[-window:])
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=span, resolve_user=name_user,
                               source_line=lambda address: f"mm/x.c:{address % 97}",
                               line_info="file:line from the test")
    records, live = recorded_and_window(aggregator, drains, "cpu")
    # What a window never holds: the totals' flag, and cut stacks (see the test below).
    assert fields_never_set(live) == {"CpuProfile.cumulative", "StackSample.callers_dropped"}
    merged = merge_cpu(records[-window:])
    assert comparable(merged.functions) == comparable(live.functions)
    key = repr  # equal counts tie in any order
    assert comparable(sorted(merged.stacks, key=key)) == comparable(sorted(live.stacks, key=key))
    assert comparable(dataclasses.replace(merged, stacks=(), functions=())) == comparable(
        dataclasses.replace(live, stacks=(), functions=()))
    assert merged.times.ticks == live.times.ticks  # the split weighed by exact ticks


def test_cut_and_truncated_stacks_stay_what_they_are_through_a_merge(monkeypatch, kallsyms, addr):
    """A file of the totals since start holds stacks cut to the function they landed in:
    summed with another, every stack keeps all it is (cut, truncated, its cgroup, its user
    frames and file:line), its samples added."""
    from ktop.aggregate import cpu

    monkeypatch.setattr(cpu, "STACKS_KEPT", 6)
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=1.0, resolve_user=name_user,
                               source_line=lambda address: f"mm/x.c:{address % 97}",
                               line_info="file:line from the test")
    for drain in cpu_drains(addr):
        aggregator.add(drain)
    aggregator.fold_exited(lambda pid: True)
    totals = through_a_file(aggregator.profile(cumulative=True), "cpu")
    assert fields_never_set(totals.stacks) == set()
    merged = merge_cpu([totals, totals])
    doubled = [dataclasses.replace(s, samples=2 * s.samples) for s in totals.stacks]
    assert comparable(sorted(merged.stacks, key=repr)) == comparable(sorted(doubled, key=repr))
    assert (merged.total_samples, merged.user_samples, merged.idle_samples) == (
        2 * totals.total_samples, 2 * totals.user_samples, 2 * totals.idle_samples)


# ---- lock contention ---------------------------------------------------------------------


def lock_drains() -> tuple[list[LockDrain], str]:
    """The two drains recorded on the VM (tests/fixtures/locks_record.py), twice over: the
    same callers come back in later intervals, as they do live."""
    with open(os.path.join(FIXTURES, "locks_drains.json")) as f:
        recorded = json.load(f)
    drains = []
    for shift in (0.0, 2.1):
        for d in recorded["drains"]:
            drains.append(LockDrain(
                d["start"] + shift, d["end"] + shift,
                tuple(StackWaits(**{**r, "kernel": tuple(r["kernel"]), "hist": tuple(r["hist"])})
                      for r in d["stacks"]),
                tuple(LockWaits(**r) for r in d["locks"]),
                tuple(TaskWaits(**{**r, "kernel": tuple(r["kernel"]), "user": tuple(r["user"]),
                                   "cgroup": f"/slice-{r['tid'] % 3}"})
                      for r in d["tasks"]),
                dict(d["lost"]),
            ))
            drains[-1] = with_owners_and_names(drains[-1])
    return drains, "\n".join(recorded["kallsyms"])


def with_owners_and_names(drain: LockDrain) -> LockDrain:
    """The recorded drains predate owners and names: each sleeping wait charged to the task
    before it (its stack as the owner's), every third to readers; the first locks named."""
    sleeping = [t for t in drain.tasks if not t.flags & 1]
    owners = tuple(
        OwnerWaits(
            address=drain.locks[i % len(drain.locks)].address, flags=t.flags,
            owner_kind=OWNER_READERS if i % 3 == 2 else OWNER_TASK,
            owner_tid=0 if i % 3 == 2 else sleeping[i - 1].tid,
            owner_tgid=0 if i % 3 == 2 else sleeping[i - 1].tgid,
            owner_comm="" if i % 3 == 2 else sleeping[i - 1].comm,
            owner_kernel=() if i % 3 else sleeping[i - 1].kernel,
            owner_kernel_error=0 if i % 3 != 1 else -61,
            kernel=t.kernel, kernel_error=t.kernel_error, contended=t.contended,
            total_ns=t.total_ns, max_ns=t.max_ns, min_ns=t.min_ns)
        for i, t in enumerate(sleeping))
    addresses = [lock.address for lock in drain.locks]
    names = {addresses[0]: LockName(NAME_MMAP_LOCK, pid=42, comm="python3"),
             addresses[1]: LockName(NAME_INODE_RWSEM, ino=7, dev=8 << 20 | 1,
                                    path=("dir", "tmp", "/"))}
    return dataclasses.replace(drain, owners=owners, names=names,
                               run_queues={addresses[2]: 1}, notes=("a note",))


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_window_of_lock_records_equals_the_live_window(window):
    from ktop.symbolize.kernel import Kallsyms

    drains, kallsyms_text = lock_drains()
    span = sum(d.end - d.start for d in drains[-window:])
    aggregator = LockAggregator(Kallsyms.from_text(kallsyms_text), window_s=span,
                                resolve_user=name_user)
    records, live = recorded_and_window(aggregator, drains, "locks")
    assert len(live.callers) > 20 and any(c.user_stacks for c in live.callers)
    # Fields the recorded drains leave at their default (no lock found a name in kallsyms).
    assert fields_never_set(live) <= {"LockAddress.symbol"}
    merged = merge_locks(records[-window:])

    def user_stacks_apart(profile):  # equal waits tie in any order
        return dataclasses.replace(profile, callers=tuple(
            dataclasses.replace(c, user_stacks=tuple(sorted(c.user_stacks, key=repr)))
            for c in profile.callers))

    assert comparable(user_stacks_apart(merged)) == comparable(user_stacks_apart(live))


# ---- block I/O ---------------------------------------------------------------------------


def in_cgroup(row: dict) -> dict:
    """A recorded row with its process in a cgroup (the drains were recorded without)."""
    return {**row, "cgroup": f"/slice-{row['pid'] % 3}"}


def block_drains() -> tuple[list[BlockDrain], str]:
    with open(os.path.join(FIXTURES, "blockio_drains.json")) as f:
        recorded = json.load(f)
    drains = []
    for shift in (0.0, 0.5):
        for d in recorded["drains"]:
            drains.append(BlockDrain(
                origin=d["origin"], start=d["start"] + shift, end=d["end"] + shift,
                totals=tuple(IoTotal(**in_cgroup(row)) for row in d["totals"]),
                histogram=tuple(LatencyBucket(**in_cgroup(row)) for row in d["histogram"]),
                stacks=tuple(IoStack(**{**in_cgroup(row), "kernel": tuple(row["kernel"]),
                                        "user": tuple(row["user"])}) for row in d["stacks"]),
                requests=tuple(dataclasses.replace(CompletedRequest(**in_cgroup(row)),
                                                   time=row["time"] + shift)
                               for row in d["requests"]),
                lost=d["lost"],
            ))
    return drains, "\n".join(recorded["kallsyms"])


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_window_of_block_io_records_equals_the_live_window(window):
    from ktop.symbolize.kernel import Kallsyms

    drains, kallsyms_text = block_drains()
    span = sum(d.end - d.start for d in drains[-window:])
    aggregator = BlockAggregator(window_s=span, disk_names={kernel_dev(254, 0): "vda"},
                                 symbols=Kallsyms.from_text(kallsyms_text))
    records, live = recorded_and_window(aggregator, drains, "blockio", max_requests=50)
    merged = merge_blockio(records[-window:], max_requests=50)
    assert live.processes and live.disks[0].hist_us and live.processes[0].stacks
    # vda is 254:0, the last recorded drain only wrote, and the drains were recorded before
    # flushes were told apart from writes
    assert fields_never_set(live) <= {"DiskStats.minor", "IoProcess.minor", "DiskStats.reads",
                                      "DiskStats.read_bytes", "DiskStats.flushes"}
    assert comparable(merged) == comparable(live)


def test_a_window_of_snapshots_takes_processes_from_the_newest_and_sums_losses(recorded_snapshot):
    older = dataclasses.replace(
        recorded_snapshot, taken_at=recorded_snapshot.taken_at - 1,
        processes=recorded_snapshot.processes[:1],
        cpu=dataclasses.replace(recorded_snapshot.cpu, lost={"kstack_collision": 1}))
    merged = merge([older, recorded_snapshot])
    assert merged.processes == recorded_snapshot.processes
    assert merged.taken_at == recorded_snapshot.taken_at
    assert merged.cpu.total_samples == 2 * recorded_snapshot.cpu.total_samples
    assert merged.duration_s == pytest.approx(2 * recorded_snapshot.cpu.window_s)
    # Each record's losses are its interval's own: the window's are their sum.
    newest = recorded_snapshot.cpu.lost
    assert merged.cpu.lost == {**newest, "kstack_collision": 1 + newest["kstack_collision"]}
    # Twice the samples over twice the time: the same share (the fixture's is rounded).
    assert merged.cpu.functions[0].percent == pytest.approx(
        recorded_snapshot.cpu.functions[0].percent, abs=0.01)


def test_a_replayed_window_lists_requests_of_every_process_as_live_does():
    """Issue 12: the newest requests alone left a drill-down into any process but the
    busiest empty; live and replayed windows keep each process's newest besides."""
    from ktop.symbolize.kernel import Kallsyms

    drains, kallsyms_text = block_drains()
    aggregator = BlockAggregator(window_s=60.0, disk_names={kernel_dev(254, 0): "vda"},
                                 symbols=Kallsyms.from_text(kallsyms_text))
    records, live = recorded_and_window(aggregator, drains, "blockio", max_requests=10)
    merged = merge_blockio(records, max_requests=10)
    for profile in (live, merged):
        listed = {(r.pid, r.rw) for r in profile.requests}
        assert listed == {(p.pid, p.rw) for p in profile.processes}, listed
    assert comparable(merged) == comparable(live)


# ---- waits -------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_window_of_wait_records_equals_the_live_window(window):
    from test_waits import KALLSYMS, NANOSLEEP, TIMER_WAKE, blocked, drain, stack, times

    from ktop.aggregate.waits import WaitAggregator
    from ktop.collectors.waits import NOT_WALKED
    from ktop.registry import pane
    from ktop.symbolize.kernel import Kallsyms

    futex = stack("__schedule", "schedule", "futex_do_wait")
    wake = stack("try_to_wake_up", "futex_wake", "do_futex")
    drains = []
    for i in range(4):
        rows = [blocked(kernel=NANOSLEEP, waker_kernel=TIMER_WAKE, total=900 + i, count=9),
                blocked(pid=20 + i % 2, comm="ponger", kernel=futex, waker_kernel=wake,
                        waker_pid=21 - i % 2, waker_comm="pinger", total=50 * (i + 1), count=i + 1),
                # short waits: one walked of 1 in 4, scaled; the other three not walked
                blocked(pid=30, comm="shorts", kernel=futex, total=10, count=1)._replace(scale=4),
                blocked(pid=30, comm="shorts", kernel_error=NOT_WALKED, total=40, count=3)]
        drains.append(dataclasses.replace(
            drain(float(i), rows, [times(), times(pid=20 + i % 2, comm="ponger", d=i + 1,
                                                 other=i)]), walk_every=(4, 2)))
    frames = (UserFrame("main+0x1", "/bin/app"),)
    drains = [dataclasses.replace(d, stacks=tuple(
        s._replace(user=(0x401000,)) for s in d.stacks)) for d in drains]
    aggregator = WaitAggregator(Kallsyms.from_text(KALLSYMS), window_s=float(window),
                                resolve_user=lambda pid, addresses: frames,
                                min_walk=WalkMinimums(s_us=1000, d_us=10))
    records, live = recorded_and_window(aggregator, drains, "waits")
    assert fields_never_set(live) == set()
    merged = pane("waits").merge(records[-window:])
    assert comparable(merged) == comparable(live)
