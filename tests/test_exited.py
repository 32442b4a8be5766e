"""Totals since start stay bounded under process churn: exited processes fold by command.

Measured before the fold: with two shell loops running `ls -R` and `cat`, the cumulative
totals grew by 28 MiB a minute, one entry per pid that ever ran. These tests pin what the
fold keeps (every count, every stack) and what it lets go (the pid, unnamed addresses).
"""

from __future__ import annotations

import os

import pytest
from cpu_drains import StackCount
from test_functions_aggregate import count, drain
from test_locks_aggregate import RWSEM_STACK, stack_row, task_row
from test_locks_aggregate import drain as lock_drain

from ktop.aggregate import exited
from ktop.aggregate.cpu import CpuAggregator
from ktop.aggregate.exited import forget_addresses
from ktop.aggregate.locks import LockAggregator
from ktop.model import EXITED_PID, UserFrame
from ktop.panes.blockio.aggregate import BlockAggregator
from ktop.panes.blockio.collector import BlockDrain, IoStack, IoTotal, LatencyBucket
from ktop.symbolize.kernel import Kallsyms

ALIVE = {100}


@pytest.fixture(autouse=True)
def fold_at_once(monkeypatch):
    monkeypatch.setattr(exited, "FOLD_AFTER", 1)  # tiny tables here: fold them all the same


def is_alive(pid: int) -> bool:
    return pid in ALIVE


def hex_frames(pid: int, addresses) -> list[UserFrame]:
    """What the symbolizer gives for a process that exited before its maps were read."""
    return [UserFrame(f"0x{a:x}", "[unknown]") for a in addresses]


def test_unnamed_addresses_fold_into_one_unknown_frame_per_run():
    frames = (UserFrame("0x7f01", "[unknown]"), UserFrame("0x7f02", "[unknown]"),
              UserFrame("main+0x1", "/bin/x"), UserFrame("0x55aa", "[unknown]"),
              UserFrame("[unknown]", "/lib/stripped.so"))
    assert forget_addresses(frames) == (
        UserFrame("[unknown]", "[unknown]"), UserFrame("main+0x1", "/bin/x"),
        UserFrame("[unknown]", "[unknown]"), UserFrame("[unknown]", "/lib/stripped.so"),
    )


def test_cpu_totals_fold_exited_pids_and_keep_every_sample(kallsyms, addr):
    stack = (addr("chacha_permute") + 0x10, addr("do_syscall_64") + 0x71)
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=5, resolve_user=hex_frames)
    aggregator.add(drain(0.0, 1.0,
                         count(100, "dd", 7, stack),  # alive
                         StackCount(200, "ls", 3, stack, (0x7F0001,), False),  # exited
                         StackCount(201, "ls", 4, stack, (0x7F0999,), False)))
    aggregator.fold_exited(is_alive)
    totals = aggregator.profile(cumulative=True)
    by_pid = {(s.pid, s.comm): s for s in totals.stacks}
    assert set(by_pid) == {(100, "dd"), (EXITED_PID, "ls")}  # two ls processes, one entry
    assert by_pid[EXITED_PID, "ls"].samples == 7
    assert by_pid[EXITED_PID, "ls"].user_frames == (UserFrame("[unknown]", "[unknown]"),)
    assert totals.total_samples == 14
    assert totals.functions[0].samples == 14
    window = aggregator.profile()  # the live window keeps what it saw, pids and all
    assert {s.pid for s in window.stacks} == {100, 200, 201}


def test_crowded_cpu_totals_are_walked_only_when_a_process_has_exited(kallsyms, addr):
    """Totals stay crowded while the processes filling them live (at 4000 Hz their stacks
    grow by ~25 a second): each fold asks after each process once instead of walking every
    stack, and folds the stacks of one that has exited, every sample kept."""
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=5, resolve_user=hex_frames)
    base = addr("chacha_permute")
    aggregator.add(drain(0.0, 1.0, *(count(100 + n % 3, "dd", 1, (base + n, base + 0x200))
                                     for n in range(60))))
    asked: list[int] = []

    def all_alive(pid: int) -> bool:
        asked.append(pid)
        return True

    aggregator.fold_exited(all_alive)
    assert sorted(asked) == [100, 101, 102]  # not once per stack (60)
    assert {s.pid for s in aggregator.profile(cumulative=True).stacks} == {100, 101, 102}
    aggregator.fold_exited(lambda pid: pid != 101)
    totals = aggregator.profile(cumulative=True)
    assert {s.pid for s in totals.stacks} == {100, 102, EXITED_PID}
    assert sum(s.samples for s in totals.stacks if s.pid == EXITED_PID) == 20
    assert totals.total_samples == 60
    for t in range(1, 7):  # the exited one's stacks leave the live window too
        aggregator.add(drain(float(t), 1.0, count(100, "dd", 1, (base, base + 0x200))))
    aggregator.fold_exited(lambda pid: pid != 101)
    asked.clear()
    aggregator.fold_exited(all_alive)
    assert sorted(asked) == [100, 102]  # its numbers are gone with it


def test_lock_totals_fold_exited_tasks_everywhere(kallsyms_locks):
    aggregator = LockAggregator(kallsyms_locks, resolve_user=hex_frames)
    aggregator.add(lock_drain(0.0, 1.0, [stack_row(RWSEM_STACK, contended=3, total=3000)], tasks=[
        task_row(100, "writer", RWSEM_STACK, contended=1, total=1000),
        task_row(300, "rm", RWSEM_STACK, contended=1, total=1000),
        task_row(301, "rm", RWSEM_STACK, contended=1, total=1000),
    ]))
    aggregator.fold_exited(is_alive)
    totals = aggregator.profile(cumulative=True)
    assert [(t.pid, t.comm, t.contended) for t in totals.tasks] == [
        (EXITED_PID, "rm", 2), (100, "writer", 1)]
    caller = totals.callers[0]
    assert sorted((t.pid, t.comm, t.contended, t.total_wait_ns) for t in caller.tasks) == [
        (EXITED_PID, "rm", 2, 2000), (100, "writer", 1, 1000)]
    assert [(s.frames, s.contended) for s in caller.user_stacks] == [
        ((UserFrame("[unknown]", "[unknown]"),), 3)]  # nothing lost in the folding
    assert aggregator.profile().tasks[0].pid in (100, 300, 301)  # the window keeps pids


def test_block_totals_fold_exited_processes():
    aggregator = BlockAggregator(disk_names={1: "vda"})
    totals = [IoTotal(pid, "dd", 1, "W", 2, 8192, 2_000_000, 0) for pid in (100, 400, 401)]
    aggregator.add(BlockDrain(0.0, 0.0, 1.0, tuple(totals),
                              tuple(LatencyBucket(pid, "dd", 1, "W", 10, 2) for pid in (100, 400, 401)),
                              tuple(IoStack(pid, "dd", 1, "W", 2, (0xFFFF1,), ()) for pid in (100, 400, 401)),
                              (), {}))
    aggregator.fold_exited(is_alive)
    profile = aggregator.profile(cumulative=True)
    assert [(p.pid, p.requests, p.bytes) for p in profile.processes] == [
        (EXITED_PID, 4, 16384), (100, 2, 8192)]
    assert profile.disks[0].writes == 6


def test_the_tables_of_one_view_fold_together(monkeypatch):
    """Histogram buckets outnumber the totals: when they crowd, the totals fold too, so a
    process never reads `exited` in one view and by its pid in the other."""
    monkeypatch.setattr(exited, "FOLD_AFTER", 4)
    aggregator = BlockAggregator(disk_names={1: "vda"})
    pids = (100, 400, 401)
    aggregator.add(BlockDrain(
        0.0, 0.0, 1.0,
        tuple(IoTotal(pid, "dd", 1, "W", 1, 4096, 1_000_000, 0) for pid in pids),
        tuple(LatencyBucket(pid, "dd", 1, "W", slot, 1) for pid in pids for slot in (9, 10)),
        (), (), {}))
    aggregator.fold_exited(is_alive)
    profile = aggregator.profile(cumulative=True)
    assert sorted(p.pid for p in profile.processes) == [EXITED_PID, 100]


def test_small_totals_keep_every_pid(monkeypatch, kallsyms, addr):
    monkeypatch.setattr(exited, "FOLD_AFTER", 3)
    stack = (addr("chacha_permute") + 0x10,)
    aggregator = CpuAggregator(kallsyms, 99, 2)
    aggregator.add(drain(0.0, 1.0, count(200, "ls", 1, stack), count(201, "ls", 1, stack)))
    aggregator.fold_exited(is_alive)
    assert {s.pid for s in aggregator.profile(cumulative=True).stacks} == {200, 201}
    aggregator.add(drain(1.0, 2.0, count(202, "ls", 1, stack)))
    aggregator.fold_exited(is_alive)  # a third entry: crowded, so the exited fold
    assert [(s.pid, s.samples) for s in aggregator.profile(cumulative=True).stacks] == [
        (EXITED_PID, 3)]


def test_a_thread_that_still_runs_is_alive():
    from ktop.collectors.procfiles import task_exists

    assert task_exists(os.getpid())
    assert not task_exists(2**22 + 1)  # above pid_max: never a task


@pytest.fixture
def kallsyms_locks():
    from conftest import FIXTURES

    with open(FIXTURES / "locks_kallsyms.txt") as f:
        return Kallsyms.from_text(f.read())


def test_past_the_stacks_kept_the_rarest_keep_their_innermost_frame(monkeypatch, kallsyms, addr):
    """Distinct stacks never stop coming (a new instruction, a new path through fork): past
    STACKS_KEPT the totals cut the rarest to the function they landed in, one entry however
    many instructions, which says so. Every sample is kept, Self and Children stay exact,
    and the window is not touched."""
    from ktop.aggregate import cpu  # noqa: PLC0415
    from ktop.exports.folded import CALLERS_DROPPED_FRAME, cpu_stack_frames  # noqa: PLC0415
    from ktop.stacktree import CALLERS_DROPPED, callers_tree  # noqa: PLC0415

    monkeypatch.setattr(cpu, "STACKS_KEPT", 4)
    leaf = addr("chacha_permute") + 0x10
    callers = (addr("chacha_block_generic") + 0x73, addr("do_syscall_64") + 0x71)
    hot = count(100, "dd", 50, (leaf, *callers))
    rare = [count(100, "dd", 1, (leaf + 2 * (i % 2), addr("get_random_bytes_user") + i, *callers))
            for i in range(1, 7)]
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=1)
    aggregator.add(drain(0.0, 1.0, hot, *rare))
    aggregator.add(drain(1.0, 2.0, hot))
    aggregator.fold_exited(is_alive)

    totals = aggregator.profile(cumulative=True)
    assert sum(s.samples for s in totals.stacks) == 106
    cut = [s for s in totals.stacks if s.callers_dropped]
    assert [(s.frames, s.samples, s.user_frames) for s in cut] == [(("chacha_permute",), 4, ())]
    assert len([s for s in totals.stacks if not s.callers_dropped]) == 3  # 3/4 of the kept
    assert [s.samples for s in totals.stacks if not s.callers_dropped][0] == 100  # hot: whole
    functions = {f.symbol: f for f in totals.functions}
    assert functions["chacha_permute"].samples == 106
    assert functions["get_random_bytes_user"].children == 6
    tree = callers_tree("chacha_permute", totals.stacks)
    assert tree.children[f"k:{CALLERS_DROPPED}"].samples == 4
    assert CALLERS_DROPPED_FRAME in cpu_stack_frames(cut[0])
    window = aggregator.profile()
    assert [(s.samples, s.callers_dropped) for s in window.stacks] == [(50, False)]

    # Cut again later: the same cut entry grows, nothing is counted twice.
    aggregator.add(drain(2.0, 3.0, *rare))
    aggregator.add(drain(3.0, 4.0, hot))
    aggregator.fold_exited(is_alive)
    totals = aggregator.profile(cumulative=True)
    assert sum(s.samples for s in totals.stacks) == 162
    assert len([s for s in totals.stacks if s.callers_dropped]) == 1
    assert len(totals.stacks) <= 4


def test_cut_entries_stay_bounded_over_many_exited_commands(monkeypatch, kallsyms, addr):
    """Each exited command keeps a cut entry per function it landed in (a shell loop's jobs
    are a new command each; a long-lived process lands in new functions without end): past
    CUT_KEPT the rarest merge across processes into one per function. The table stays under
    its bound over many commands; every sample and each function's Self stay."""
    from ktop.aggregate import cpu  # noqa: PLC0415

    monkeypatch.setattr(cpu, "STACKS_KEPT", 4)
    monkeypatch.setattr(cpu, "CUT_KEPT", 8)
    names = ("chacha_permute", "chacha_block_generic", "get_random_bytes_user",
             "_copy_to_iter", "blake2s_compress_avx512", "write_ibpb")
    caller = addr("do_syscall_64") + 0x71
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=1)
    jobs = 60
    for i in range(jobs):
        aggregator.add(drain(float(i), 1.0, count(100, "dd", 50, (addr(names[0]) + 0x10, caller)),
                             *[count(1000 + i, f"job{i}", 1, (addr(name) + 1, caller + i))
                               for name in names]))
        if i % 10 == 9:
            aggregator.fold_exited(is_alive)

    totals = aggregator.profile(cumulative=True)
    assert len(totals.stacks) <= 8 + len(names) + 4  # cut entries kept, one per function, whole
    assert totals.total_samples == sum(s.samples for s in totals.stacks) == jobs * (50 + 6)
    functions = {f.symbol: f.samples for f in totals.functions if f.samples}
    assert functions == {names[0]: jobs * 51, **{name: jobs for name in names[1:]}}
    merged = [s for s in totals.stacks if s.comm == cpu.OTHER_PROCESSES]
    assert merged and all(s.callers_dropped and s.pid == EXITED_PID for s in merged)


def test_functions_named_for_forgotten_stacks_are_not_kept_beyond_a_spare(monkeypatch, kallsyms,
                                                                         addr):
    """Each kernel stack's functions are named once, as a set shared by the stacks that hold
    them (0.7-2.3 KB each): once the totals cut or fold a stack away, its set goes too,
    beyond NAMED_SPARE kept for a new process on the same path. Under churn the soak held
    ~1,650 sets no kept stack held (1.4 MiB) at 2 minutes."""
    from ktop.aggregate import cpu  # noqa: PLC0415

    monkeypatch.setattr(cpu, "STACKS_KEPT", 4)
    monkeypatch.setattr(cpu, "NAMED_SPARE", 8)
    leaf = addr("chacha_permute") + 0x10
    callers = [addr(name) + 1 for name in ("chacha_block_generic", "get_random_bytes_user",
                                           "_copy_to_iter", "blake2s_compress_avx512")]
    aggregator = CpuAggregator(kallsyms, 99, 2, window_s=1)
    for i in range(60):  # a job a second, each on a kernel path of its own
        aggregator.add(drain(float(i), 1.0, *[
            count(1000 + i, "job", 1, (leaf, caller, addr("do_syscall_64") + 0x71 + i))
            for caller in callers]))
        if i % 10 == 9:
            aggregator.fold_exited(is_alive)
    ids = aggregator._ids
    assert len(ids._by_kernel) <= len(ids.functions) + 8
    totals = aggregator.profile(cumulative=True)
    assert totals.total_samples == sum(s.samples for s in totals.stacks) == 60 * 4
    assert {f.symbol: f.samples for f in totals.functions if f.samples} == {"chacha_permute": 240}
