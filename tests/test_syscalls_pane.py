"""The syscalls pane without root: its fold of drains, its views, replay's merge, its
exports and its widget, on constructed drains and snapshots."""

from __future__ import annotations

import dataclasses

from conftest import drill_into, run_app, wait_for_data

from ktop.engine import RecordedSource
from ktop.exports.filtered import filtered_snapshot
from ktop.model import UserFrame
from ktop.panes.syscalls.aggregate import SyscallAggregator, merge_profiles
from ktop.panes.syscalls.collector import CallCounts, SlowCalls, SyscallDrain
from ktop.panes.syscalls.exports import csv_cells, metric_families, slow_stacks
from ktop.panes.syscalls.model import HIST_SLOTS
from ktop.panes.syscalls.screens import SyscallDetailScreen
from ktop.panes.syscalls.table import syscall_name, syscall_number
from ktop.panes.syscalls.views import by_errno, by_process, by_syscall
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text

OPENAT, GETPPID, NANOSLEEP = (syscall_number(n) for n in ("openat", "getppid", "nanosleep"))


def hist(slot: int, count: int) -> tuple[int, ...]:
    return tuple(count if k == slot else 0 for k in range(HIST_SLOTS))


def call(pid: int, nr: int | None, count: int, ns: int, err: int = 0, tid: int = 0,
         comm: str = "app", abi: str = "x64") -> CallCounts:
    assert nr is not None
    return CallCounts(pid, tid or pid, comm, "/test", nr, abi, err, count, count * ns, ns,
                      hist(ns.bit_length() - 1, count))


def drain(start: float, *calls: CallCounts, slow: tuple[SlowCalls, ...] = (),
          lost: dict[str, int] | None = None) -> SyscallDrain:
    return SyscallDrain(start, start + 1.0, calls, slow, lost or {}, {"unpaired_exit": 0})


STORM = (
    call(100, OPENAT, 600_000, 800, err=2),  # an ENOENT storm
    call(100, OPENAT, 10, 2_000),
    call(100, GETPPID, 50_000, 100, tid=101),
    call(200, NANOSLEEP, 900, 1_050_000, comm="sleeper"),
    call(300, 5, 4, 500, abi="ia32"),  # a 32-bit process's open
)
SLOW = (SlowCalls(200, 200, "sleeper", "/test", NANOSLEEP or 0, "x64", 0,
                  (0xffffffff81000000,), 0, (0x401000,), 0, 900, 900 * 1_050_000, 1_200_000,
                  hist(20, 900)),)


def aggregated(*drains: SyscallDrain) -> SyscallAggregator:
    aggregator = SyscallAggregator(None, window_s=5.0,
                                   resolve_user=lambda pid, addresses: [UserFrame("main+0x1a", "/bin/app")
                                                                         for _ in addresses],
                                   slow_ns=1_000_000)
    for d in drains:
        aggregator.add(d)
    return aggregator


def test_calls_are_counted_by_syscall_process_and_errno():
    profile = aggregated(drain(0.0, *STORM, slow=SLOW)).profile()
    syscalls = {g.syscall: g for g in by_syscall(profile)}
    assert syscalls["openat"].count == 600_010 and syscalls["openat"].errors == 600_000
    assert syscalls["openat"].top == "ENOENT"
    assert syscalls["nanosleep"].avg_ns == 1_050_000 and syscalls["getppid"].count == 50_000
    assert "ia32:open" in syscalls  # the compat table's number 5, not x86-64's fstat
    assert syscall_name(5) == "fstat"
    processes = {g.pid: g for g in by_process(profile)}
    assert processes[100].count == 650_010 and processes[100].top == "openat"
    assert processes[100].errors == 600_000
    (failing,) = by_errno(profile)
    assert (failing.errno, failing.syscall, failing.count) == ("ENOENT", "openat", 600_000)
    (slow,) = profile.slow
    assert slow.syscall == "nanosleep" and slow.user == (UserFrame("main+0x1a", "/bin/app"),)
    assert slow.frames == ("0xffffffff81000000",)  # named by kallsyms when it has them


def test_the_window_keeps_the_newest_intervals_and_totals_since_start():
    aggregator = aggregated(*(drain(float(i), call(100, GETPPID, 10, 100)) for i in range(8)))
    assert sum(c.count for c in aggregator.profile().calls) == 50  # the last 5 s
    assert sum(c.count for c in aggregator.profile(cumulative=True).calls) == 80
    assert sum(c.count for c in aggregator.profile(latest=True).calls) == 10


def test_a_replayed_window_is_the_live_window_of_the_same_intervals():
    drains = [drain(0.0, *STORM, slow=SLOW), drain(1.0, *STORM[:2], lost={"counts_map_full": 3}),
              drain(2.0, call(100, OPENAT, 5, 900, err=13))]
    live = aggregated(*drains)
    records = []
    replayed_source = aggregated()
    for d in drains:
        replayed_source.add(d)
        records.append(replayed_source.profile(latest=True))
    merged = merge_profiles(records)
    window = live.profile()
    assert merged.calls == window.calls and merged.slow == window.slow
    assert merged.lost == window.lost == {"counts_map_full": 3}
    assert merged.window_s == window.window_s == 3.0


def test_exited_processes_fold_into_one_row_per_command_in_the_totals():
    aggregator = aggregated(drain(0.0, *(call(pid, GETPPID, 1, 100, comm="short") for pid in
                                         range(1000, 1700))))
    aggregator.fold_exited(lambda pid: False)
    totals = aggregator.profile(cumulative=True)
    assert [(c.pid, c.comm, c.count) for c in totals.calls] == [(-1, "short", 700)]


def snapshot_with(profile, recorded_snapshot):
    return dataclasses.replace(recorded_snapshot, syscalls=profile)


def test_exports_bound_their_labels_and_cut_by_pid(recorded_snapshot):
    from ktop.exports.openmetrics import SnapshotMetrics

    profile = aggregated(drain(0.0, *STORM, slow=SLOW)).profile()
    snapshot = snapshot_with(profile, recorded_snapshot)
    families = {f.name: f for f in metric_families(SnapshotMetrics(top=2), snapshot)}
    calls = {s.labels["syscall"]: s.value for s in families["ktop_syscalls"].samples}
    assert calls == {"openat": 600_010, "getppid": 50_000, "other": 904}  # top 2 + other
    errors = {(s.labels["syscall"], s.labels["errno"]): s.value
              for s in families["ktop_syscall_errors"].samples}
    assert errors[("openat", "ENOENT")] == 600_000
    (stack,) = slow_stacks(snapshot, False)
    assert stack[0][:3] == ["sleeper", "main", "[nanosleep]"] and stack[1] == 945_000
    cells = csv_cells(snapshot, False)
    assert cells[:2] == [650_914, 600_000] and cells[3] == "openat"
    only = filtered_snapshot(snapshot, pid=200).syscalls
    assert only is not None and {c.pid for c in only.calls} == {200} and len(only.slow) == 1


def test_the_pane_reads_at_80x24_and_drills_into_a_syscall(recorded_snapshot):
    profile = aggregated(drain(0.0, *STORM, slow=SLOW)).profile()
    snapshot = snapshot_with(profile, recorded_snapshot)
    seen = {}

    async def scenario(pilot):
        await wait_for_data(pilot)
        await pilot.press("7")
        await pilot.pause(0.2)
        seen["pane"] = screen_text(pilot.app)
        await pilot.press("v", "v")
        await pilot.pause(0.2)
        seen["errors"] = screen_text(pilot.app)
        await pilot.press("v")
        await pilot.pause(0.1)
        # the first row of the syscalls view is openat's; down to nanosleep (most time? calls)
        screen = await drill_into(pilot, SyscallDetailScreen)
        seen["drill"] = screen_text(pilot.app) if isinstance(screen, SyscallDetailScreen) else ""

    run_app(build_app(RecordedSource([snapshot])), scenario, size=(80, 24))
    assert "Syscalls" in seen["pane"] and "openat" in seen["pane"]
    assert "600010" in seen["pane"] or "600,010" in seen["pane"], seen["pane"]
    assert "ENOENT" in seen["errors"] and "openat" in seen["errors"], seen["errors"]
    assert "calls of openat" in seen["drill"], seen["drill"]
