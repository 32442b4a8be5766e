"""The lock contention profile from drained rows, without root: callers, types, windows."""

from __future__ import annotations

import errno
import json
import os
import threading
import time

import pytest

from ktop.aggregate.locks import (
    LCB_F_MUTEX,
    LCB_F_PERCPU,
    LCB_F_READ,
    LCB_F_RT,
    LCB_F_SPIN,
    LCB_F_WRITE,
    LockAggregator,
    StackSymbolizer,
    hist_buckets,
    lock_type_name,
)
from ktop.collectors.bpfload import Unavailable
from ktop.collectors.locks import (
    HIST_SLOTS,
    LockDrain,
    LockWaits,
    StackWaits,
    TaskWaits,
    check_record_layout,
    require_lock_tracepoints,
    thread_started_after,
)
from ktop.model import Bucket, UserFrame
from ktop.symbolize.kernel import Kallsyms

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")

# Addresses in tests/fixtures/locks_kallsyms.txt.
BPF_BEGIN = 0xFFFFFFFFC0A00000 + 0x5C
TRACEITER_BEGIN = 0xFFFFFFFF813DC530 + 0x2E
PERF_TRACE_BEGIN = 0xFFFFFFFF813DC6B0 + 0x95
PV_SLOWPATH = 0xFFFFFFFF821FE730 + 0x10E  # __lock_text
RAW_SPIN_LOCK = 0xFFFFFFFF821FE1A0 + 0x3B  # __lock_text
SCHEDULE_INNER = 0xFFFFFFFF821F4F70 + 0xAD  # __schedule, __sched_text
SCHEDULE = 0xFFFFFFFF821F5900 + 0x23  # __sched_text
RWSEM_SLOWPATH = 0xFFFFFFFF821FA0A0 + 0x37F  # __sched_text
DOWN_WRITE = 0xFFFFFFFF821FA770 + 0x66  # __sched_text
MUTEX_LOCK_INNER = 0xFFFFFFFF821F8600 + 0x1F1  # __sched_text
MUTEX_LOCK = 0xFFFFFFFF821F9130 + 0x1C  # __sched_text
TRY_TO_WAKE_UP = 0xFFFFFFFF813A8490 + 0x4E
WAKE_UP_PROCESS = 0xFFFFFFFF813A8C00 + 0x15
DO_UNLINKAT = 0xFFFFFFFF816CFAF0 + 0x134
SYS_UNLINK = 0xFFFFFFFF816CFFB0 + 0x3B
DO_SYSCALL = 0xFFFFFFFF821EA000 + 0x71
IRQ_EXIT_TO_USER = 0xFFFFFFFF821EF000 + 0x110

SPIN_STACK = (BPF_BEGIN, TRACEITER_BEGIN, PV_SLOWPATH, RAW_SPIN_LOCK, TRY_TO_WAKE_UP,
              WAKE_UP_PROCESS)
RWSEM_STACK = (RWSEM_SLOWPATH, DOWN_WRITE, DO_UNLINKAT, SYS_UNLINK, DO_SYSCALL)


@pytest.fixture(scope="module")
def kallsyms() -> Kallsyms:
    with open(os.path.join(FIXTURES, "locks_kallsyms.txt")) as f:
        return Kallsyms.from_text(f.read())


@pytest.fixture
def symbolizer(kallsyms: Kallsyms) -> StackSymbolizer:
    return StackSymbolizer(kallsyms)


def hist(*slots: tuple[int, int]) -> tuple[int, ...]:
    counts = [0] * HIST_SLOTS
    for slot, count in slots:
        counts[slot] += count
    return tuple(counts)


def stack_row(kernel, flags=LCB_F_SPIN, contended=1, total=100, max_ns=100, min_ns=100,
              slots=((6, 1),), error=0) -> StackWaits:
    return StackWaits(flags, tuple(kernel), error, contended, total, max_ns, min_ns, hist(*slots))


def task_row(tid, comm, kernel, flags=LCB_F_SPIN, contended=1, total=100, max_ns=100,
             min_ns=100) -> TaskWaits:
    return TaskWaits(tid, tid, comm, flags, tuple(kernel), 0, (0x401000,), 0, contended, total,
                     max_ns, min_ns)


def drain(start, end, stacks=(), locks=(), tasks=(), lost=None) -> LockDrain:
    return LockDrain(start, end, tuple(stacks), tuple(locks), tuple(tasks), dict(lost or {}))


# ---- caller selection ------------------------------------------------------------------


def test_caller_skips_bpf_tracepoint_and_spinlock_frames(symbolizer):
    frames, caller = symbolizer.resolve(SPIN_STACK)
    assert caller == "try_to_wake_up+0x4e"
    # The tracing machinery is not part of the stack shown; the lock functions are.
    assert frames[0] == "__pv_queued_spin_lock_slowpath+0x10e"
    assert frames[2:] == ("try_to_wake_up+0x4e", "wake_up_process+0x15")


def test_caller_skips_rwsem_slow_path_in_sched_text(symbolizer):
    assert symbolizer.resolve(RWSEM_STACK)[1] == "do_unlinkat+0x134"


def test_caller_is_found_by_ranges_not_by_a_fixed_frame_count(symbolizer):
    # A spinlock taken inside schedule(): four internal frames, then the real caller.
    stack = (PV_SLOWPATH, RAW_SPIN_LOCK, SCHEDULE_INNER, SCHEDULE, IRQ_EXIT_TO_USER)
    assert symbolizer.resolve(stack)[1] == "irqentry_exit_to_user_mode+0x110"
    # The same caller with a single internal frame above it.
    assert symbolizer.resolve((RAW_SPIN_LOCK, TRY_TO_WAKE_UP))[1] == "try_to_wake_up+0x4e"
    # A perf_event tracepoint stack (no BPF frames) starting right at the caller.
    assert symbolizer.resolve((PERF_TRACE_BEGIN, DO_UNLINKAT))[1] == "do_unlinkat+0x134"


def test_all_internal_stack_falls_back_to_the_innermost_lock_function(symbolizer):
    frames, caller = symbolizer.resolve((BPF_BEGIN, MUTEX_LOCK_INNER, MUTEX_LOCK))
    assert caller == "__mutex_lock.constprop.0+0x1f1"
    assert frames == ("__mutex_lock.constprop.0+0x1f1", "mutex_lock+0x1c")


def test_unknown_address_is_a_caller_shown_as_hex(symbolizer):
    assert symbolizer.resolve((RAW_SPIN_LOCK, 0xFFFF888000001234))[1] == "0xffff888000001234"


def test_ranges_come_from_the_kernel_markers(symbolizer):
    assert symbolizer.is_internal(PV_SLOWPATH) and symbolizer.is_internal(RWSEM_SLOWPATH)
    assert not symbolizer.is_internal(TRY_TO_WAKE_UP)
    assert not symbolizer.is_internal(0xFFFFFFFF821FF4C8)  # __lock_text_end is exclusive


def test_recorded_stacks_give_callers_outside_lock_and_sched_text():
    """Real stacks from this kernel: the workload's known callers, never a lock function."""
    with open(os.path.join(FIXTURES, "locks_drains.json")) as f:
        recorded = json.load(f)
    symbolizer = StackSymbolizer(Kallsyms.from_text("\n".join(recorded["kallsyms"])))
    callers = set()
    for row in (r for d in recorded["drains"] for r in d["stacks"]):
        if not row["kernel"]:
            continue
        frames, caller = symbolizer.resolve(tuple(row["kernel"]))
        index = frames.index(caller)
        assert all(symbolizer.is_internal(a) for a in row["kernel"][:index])
        internal = symbolizer.is_internal(row["kernel"][index])
        assert not internal or index == 0
        callers.add((caller.split("+")[0], lock_type_name(row["flags"])))
    # locks_workload.py: create/unlink in one directory, mmap/munmap in one process.
    assert ("do_unlinkat", "rwsem:W") in callers
    assert ("path_openat", "rwsem:W") in callers
    assert any(name in ("vm_mmap_pgoff", "__vm_munmap") for name, _ in callers)


# ---- lock types --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        (0, "semaphore"),
        (LCB_F_SPIN, "spinlock"),
        (LCB_F_SPIN | LCB_F_READ, "rwlock:R"),
        (LCB_F_SPIN | LCB_F_WRITE, "rwlock:W"),
        (LCB_F_READ, "rwsem:R"),
        (LCB_F_WRITE, "rwsem:W"),
        (LCB_F_RT, "rtmutex"),
        (LCB_F_RT | LCB_F_READ, "rwlock-rt:R"),
        (LCB_F_RT | LCB_F_WRITE, "rwlock-rt:W"),
        (LCB_F_PERCPU | LCB_F_READ, "pcpu-sem:R"),
        (LCB_F_PERCPU | LCB_F_WRITE, "pcpu-sem:W"),
        (LCB_F_MUTEX, "mutex"),
        (LCB_F_MUTEX | LCB_F_SPIN, "mutex"),
        (LCB_F_READ | LCB_F_WRITE, "unknown:0x6"),
        (1 << 6, "unknown:0x40"),
    ],
)
def test_lock_type_names_match_perf(flags, name):
    assert lock_type_name(flags) == name


# ---- aggregation -------------------------------------------------------------------------


def test_intervals_merge_count_total_max_min_and_histogram(kallsyms):
    aggregator = LockAggregator(kallsyms, window_s=5.0)
    aggregator.add(drain(0.0, 1.0, [stack_row(SPIN_STACK, contended=2, total=300, max_ns=200,
                                              min_ns=100, slots=((6, 1), (7, 1)))]))
    aggregator.add(drain(1.0, 2.0, [stack_row(SPIN_STACK, contended=1, total=50, max_ns=50,
                                              min_ns=50, slots=((5, 1),))]))
    (caller,) = aggregator.profile().callers
    assert (caller.caller, caller.type) == ("try_to_wake_up+0x4e", "spinlock")
    assert caller.contended == 3
    assert caller.total_wait_ns == 350
    assert caller.max_wait_ns == 200
    assert caller.min_wait_ns == 50
    assert caller.avg_wait_ns == 350 // 3
    assert caller.hist_ns == (Bucket(32, 63, 1), Bucket(64, 127, 1), Bucket(128, 255, 1))


def test_stacks_with_one_caller_fold_into_it_and_keep_their_own_figures(kallsyms):
    other_path = (PV_SLOWPATH, RAW_SPIN_LOCK, TRY_TO_WAKE_UP, DO_UNLINKAT)
    aggregator = LockAggregator(kallsyms)
    aggregator.add(drain(0.0, 1.0, [
        stack_row(SPIN_STACK, contended=4, total=400, max_ns=150),
        stack_row(other_path, contended=1, total=900, max_ns=900),
    ]))
    (caller,) = aggregator.profile().callers
    assert caller.contended == 5 and caller.total_wait_ns == 1300 and caller.max_wait_ns == 900
    assert [s.total_wait_ns for s in caller.stacks] == [900, 400]  # by total wait
    assert caller.stacks[0].frames[-1] == "do_unlinkat+0x134"
    assert (caller.stacks[1].contended, caller.stacks[1].max_wait_ns) == (4, 150)


def test_callers_are_sorted_by_total_wait_and_split_by_type(kallsyms):
    aggregator = LockAggregator(kallsyms)
    aggregator.add(drain(0.0, 1.0, [
        stack_row(SPIN_STACK, contended=50, total=5_000),
        stack_row(RWSEM_STACK, flags=LCB_F_WRITE, contended=2, total=90_000_000),
        stack_row(RWSEM_STACK, flags=LCB_F_READ, contended=1, total=7_000),
    ]))
    profile = aggregator.profile()
    assert [(c.caller, c.type) for c in profile.callers] == [
        ("do_unlinkat+0x134", "rwsem:W"),
        ("do_unlinkat+0x134", "rwsem:R"),
        ("try_to_wake_up+0x4e", "spinlock"),
    ]
    assert profile.events == 53


def test_window_slides_and_cumulative_keeps_everything(kallsyms):
    aggregator = LockAggregator(kallsyms, window_s=2.0)
    for second, total in enumerate((1000, 2000, 4000)):
        aggregator.add(drain(float(second), second + 1.0, [stack_row(SPIN_STACK, total=total,
                                                                     max_ns=total,
                                                                     min_ns=total)]))
    window = aggregator.profile()
    assert window.window_s == pytest.approx(2.0)
    assert window.callers[0].total_wait_ns == 6000
    assert window.callers[0].min_wait_ns == 2000  # the 1000 ns wait slid out
    everything = aggregator.profile(cumulative=True)
    assert everything.window_s == pytest.approx(3.0)
    assert everything.callers[0].total_wait_ns == 7000
    assert everything.callers[0].min_wait_ns == 1000
    assert everything.events == 3 and window.events == 2


def test_window_counts_intervals_by_their_middle(kallsyms):
    """Drains a little shorter than a second still give a 5 s window, not 6 intervals."""
    aggregator = LockAggregator(kallsyms, window_s=5.0)
    for i in range(10):
        aggregator.add(drain(i * 0.998, (i + 1) * 0.998, [stack_row(SPIN_STACK)]))
    assert aggregator.profile().events == 5
    assert aggregator.profile().window_s == pytest.approx(5 * 0.998)


def test_missing_stacks_are_shown_as_such_and_still_counted(kallsyms):
    aggregator = LockAggregator(kallsyms)
    aggregator.add(drain(0.0, 1.0, [
        stack_row((), error=-errno.EEXIST, contended=3, total=300),
        stack_row(SPIN_STACK, contended=1, total=100),
    ], lost={"kstack_collision": 3}))
    profile = aggregator.profile()
    assert profile.callers[0].caller == "[stack lost: collision]"
    assert profile.events == 4
    assert profile.lost["kstack_collision"] == 3


def test_tasks_by_caller_and_in_the_task_view(kallsyms):
    aggregator = LockAggregator(kallsyms)
    aggregator.add(drain(0.0, 1.0, [
        stack_row(RWSEM_STACK, flags=LCB_F_WRITE, contended=3, total=3000),
        stack_row(SPIN_STACK, contended=1, total=10),
    ], tasks=[
        task_row(101, "writer", RWSEM_STACK, flags=LCB_F_WRITE, contended=2, total=2500),
        task_row(102, "writer", RWSEM_STACK, flags=LCB_F_WRITE, contended=1, total=500),
        task_row(101, "writer", SPIN_STACK, contended=1, total=10, max_ns=10),
    ]))
    aggregator.add(drain(1.0, 2.0, tasks=[task_row(102, "writer", SPIN_STACK, total=7000,
                                                   max_ns=7000)]))
    profile = aggregator.profile()
    rwsem = profile.callers[0]
    assert [(t.pid, t.comm, t.contended, t.total_wait_ns) for t in rwsem.tasks] == [
        (101, "writer", 2, 2500), (102, "writer", 1, 500)]
    assert [(t.pid, t.contended, t.total_wait_ns, t.max_wait_ns) for t in profile.tasks] == [
        (102, 2, 7500, 7000),
        (101, 3, 2510, 100),
    ]


def test_each_task_keeps_the_stacks_it_waited_under(kallsyms):
    """Which task waited under which stack, as the folded and pprof exports need it: two
    tasks of one caller with different stacks stay apart, the same one merges over time."""
    other_unlink = (RWSEM_SLOWPATH, DOWN_WRITE, DO_UNLINKAT, DO_SYSCALL)
    names = {0x401000: UserFrame("unlink+0x9", "/usr/lib/libc.so.6")}
    aggregator = LockAggregator(
        kallsyms, resolve_user=lambda pid, addresses: tuple(names[a] for a in addresses)
    )
    aggregator.add(drain(0.0, 1.0, tasks=[
        task_row(101, "rm", RWSEM_STACK, flags=LCB_F_WRITE, contended=2, total=2500),
        task_row(102, "mv", other_unlink, flags=LCB_F_WRITE, contended=1, total=500),
    ], stacks=[stack_row(RWSEM_STACK, flags=LCB_F_WRITE), stack_row(other_unlink, flags=LCB_F_WRITE)]))
    aggregator.add(drain(1.0, 2.0, tasks=[
        task_row(101, "rm", RWSEM_STACK, flags=LCB_F_WRITE, contended=1, total=1000)],
        stacks=[stack_row(RWSEM_STACK, flags=LCB_F_WRITE)]))
    (caller,) = aggregator.profile(cumulative=True).callers
    assert [(t.pid, t.comm, t.frames[-1].split("+")[0], t.user_frames, t.contended, t.total_wait_ns)
            for t in caller.task_stacks] == [
        (101, "rm", "do_syscall_64", (names[0x401000],), 3, 3500),
        (102, "mv", "do_syscall_64", (names[0x401000],), 1, 500),
    ]
    assert len(caller.task_stacks[0].frames) == 5 and len(caller.task_stacks[1].frames) == 4


def test_lock_view_names_global_locks_only(kallsyms):
    aggregator = LockAggregator(kallsyms)
    rows = [
        LockWaits(0xFFFFFFFF830F3800, LCB_F_SPIN, 1, 400, 400, 400),  # exactly jiffies_lock
        LockWaits(0xFFFFFFFF830F3100, LCB_F_SPIN, 1, 300, 300, 300),  # inside rcu_state
        LockWaits(0xFFFF888142964610, LCB_F_WRITE, 1, 200, 200, 200),  # allocated: an inode
        LockWaits(0xFFFFFFFF82400040, LCB_F_SPIN, 1, 100, 100, 100),  # only a section marker
    ]
    aggregator.add(drain(0.0, 1.0, locks=rows))
    assert [(lock.address, lock.symbol, lock.type) for lock in aggregator.profile().locks] == [
        ("0xffffffff830f3800", "jiffies_lock", "spinlock"),
        ("0xffffffff830f3100", "rcu_state+0x100", "spinlock"),
        ("0xffff888142964610", "", "rwsem:W"),
        ("0xffffffff82400040", "", "spinlock"),
    ]


def test_lost_is_the_latest_cumulative_count(kallsyms):
    aggregator = LockAggregator(kallsyms)
    aggregator.add(drain(0.0, 1.0, lost={"unpaired_end": 1}))
    aggregator.add(drain(1.0, 2.0, lost={"unpaired_end": 4, "nested_begin": 2}))
    assert aggregator.profile().lost == {"unpaired_end": 4, "nested_begin": 2}


def test_empty_aggregator_gives_an_empty_profile(kallsyms):
    profile = LockAggregator(kallsyms).profile()
    assert (profile.events, profile.callers, profile.locks, profile.tasks) == (0, (), (), ())


def test_histogram_buckets_are_contiguous_log2_ranges():
    assert hist_buckets(hist((0, 2), (3, 1))) == (
        Bucket(0, 1, 2), Bucket(2, 3, 0), Bucket(4, 7, 0), Bucket(8, 15, 1),
    )
    assert hist_buckets(hist()) == ()


# ---- collector helpers that need no kernel -----------------------------------------------

BEGIN_FORMAT = """name: contention_begin
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned int flags;\toffset:16;\tsize:4;\tsigned:0;
"""
END_FORMAT = """name: contention_end
format:
\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int ret;\toffset:16;\tsize:4;\tsigned:1;
"""


def fake_tracefs(root, begin=BEGIN_FORMAT, end=END_FORMAT) -> str:
    for event, text in (("contention_begin", begin), ("contention_end", end)):
        directory = root / "events" / "lock" / event
        directory.mkdir(parents=True)
        (directory / "format").write_text(text)
    return str(root)


def test_record_layout_of_this_kernel_is_accepted(tmp_path):
    check_record_layout(fake_tracefs(tmp_path))


def test_a_moved_field_refuses_to_load_with_a_reason(tmp_path):
    moved = BEGIN_FORMAT.replace("offset:16;\tsize:4", "offset:20;\tsize:4")
    with pytest.raises(Unavailable, match=r"lock:contention_begin has an unexpected layout \(flags"):
        check_record_layout(fake_tracefs(tmp_path, begin=moved))


def test_missing_tracepoints_name_the_kernel_that_has_them(tmp_path):
    (tmp_path / "events").mkdir()
    with pytest.raises(Unavailable, match=r"kernel lacks tracepoint lock:contention_begin, "
                                          r"lock:contention_end \(needs Linux >= 5.19"):
        require_lock_tracepoints(str(tmp_path))


def test_a_begin_is_stale_once_its_thread_is_gone_or_newer():
    now_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    me = threading.get_native_id()
    assert not thread_started_after(me, now_ns)  # alive, and waiting since now: keep it
    assert thread_started_after(me, 0)  # this thread did not exist at boot: a reused id
    assert thread_started_after(2**22 + 1, now_ns)  # above pid_max: gone


def test_named_stacks_are_remembered_within_a_bound(symbolizer, monkeypatch):
    """Under process churn distinct lock stacks keep coming (~300 a minute): the names kept
    for the next interval stay bounded, and a stack named again after reads the same."""
    from ktop.symbolize import frames as kernelframes  # noqa: PLC0415

    monkeypatch.setattr(kernelframes, "SYMBOLIZED_KEPT", 8)
    first = symbolizer.resolve(RWSEM_STACK)
    for offset in range(1, 40):
        symbolizer.resolve((RWSEM_STACK[0] + offset, *RWSEM_STACK[1:]))
    assert len(symbolizer._cache) <= 9
    assert symbolizer.resolve(RWSEM_STACK) == first


def test_past_the_stacks_kept_the_rarest_merge_into_one_entry(kallsyms, monkeypatch):
    """Under process churn distinct lock stacks never stop coming: past LOCK_STACKS_KEPT the
    totals merge the rarest of a caller into one entry that says so. The caller's waits, and
    the sum over its stacks, stay exact; the window is not touched."""
    from ktop.aggregate import locks  # noqa: PLC0415

    monkeypatch.setattr(locks, "LOCK_STACKS_KEPT", 8)
    variants = [(*RWSEM_STACK[:3], SYS_UNLINK + i, DO_SYSCALL) for i in range(6)]
    waits = [10, 1, 1, 1, 1, 1]
    aggregator = LockAggregator(kallsyms, window_s=1)
    aggregator.add(drain(0.0, 1.0, stacks=[
        stack_row(v, flags=LCB_F_WRITE, contended=n, total=100 * n) for v, n in zip(variants, waits)
    ], tasks=[
        task_row(101 + i, "rm", v, flags=LCB_F_WRITE, contended=n, total=100 * n)
        for i, (v, n) in enumerate(zip(variants, waits))
    ]))
    aggregator.add(drain(1.0, 2.0, stacks=[stack_row(variants[1], flags=LCB_F_WRITE)]))
    aggregator.fold_exited(lambda pid: True)

    (caller,) = aggregator.profile(cumulative=True).callers
    assert caller.contended == 16 and sum(s.contended for s in caller.stacks) == 16
    assert sum(t.contended for t in caller.task_stacks) == 15
    assert len(caller.stacks) == 3  # the hottest two whole, and the rare stacks' entry
    assert caller.stacks[0].contended == 10 and len(caller.stacks[0].frames) == 5  # whole
    rare = [s for s in caller.stacks if s.frames == (locks.RARE_STACKS,)]
    assert len(rare) == 1 and rare[0].contended == 4
    assert any(t.frames == (locks.RARE_STACKS,) for t in caller.task_stacks)
    (recent,) = aggregator.profile().callers
    assert [(len(s.frames), s.contended) for s in recent.stacks] == [(5, 1)]


def test_lock_names_are_remembered_within_a_bound(kallsyms, monkeypatch):
    """Locks in allocated memory come and go with the processes that hold them: the names
    remembered stay bounded, and an address named again reads the same."""
    from ktop.aggregate import locks  # noqa: PLC0415

    monkeypatch.setattr(locks, "LOCK_NAMES_KEPT", 4)
    aggregator = LockAggregator(kallsyms)
    first = aggregator._lock_name(0xFFFF888000000000)
    for i in range(1, 40):
        aggregator._lock_name(0xFFFF888000000000 + 64 * i)
    assert len(aggregator._lock_names) <= 5
    assert aggregator._lock_name(0xFFFF888000000000) == first


def test_a_kernel_whose_btf_lacks_a_field_leaves_out_that_part_with_a_note(monkeypatch, tmp_path):
    """Owners and names each need every member they read; a BTF without one (or none at
    all) leaves that part out, and says which and why in one line."""
    from ktop.collectors import locks as collector  # noqa: PLC0415

    flags, notes = collector.owner_name_flags(str(tmp_path / "missing"))
    assert flags == [] and notes == [
        f"lock owners and names left out: no kernel BTF ({tmp_path / 'missing'}: "
        "No such file or directory)"]
    if not os.access(collector.BTF_PATH, os.R_OK):
        pytest.fail(f"{collector.BTF_PATH} unreadable: this kernel has no BTF to test with")
    monkeypatch.setitem(collector.NAME_FIELDS, "INODE_X_OFF", ("inode", "i_no_such_field", 8))
    flags, notes = collector.owner_name_flags()
    assert "-DOWNERS=1" in flags and "-DNAMES=1" not in flags and "-DINODE_PATHS=1" not in flags
    assert notes == ["lock names left out: struct inode has no i_no_such_field (kernel BTF)"]
    assert any(flag.startswith("-DMUTEX_OWNER_OFF=") for flag in flags)


def test_the_window_is_the_same_however_often_it_is_read(kallsyms):
    # The window's sum copies each interval's waits (no interval shares an entry with it):
    # reading it again adds nothing, and the newest interval keeps its own figures.
    aggregator = LockAggregator(kallsyms, window_s=5.0,
                                resolve_user=lambda pid, addresses: (UserFrame("f+0x1", "m"),))
    for second in range(3):
        aggregator.add(drain(float(second), second + 1.0,
                             [stack_row(SPIN_STACK, contended=2, total=300, slots=((6, 2),))],
                             tasks=[task_row(101, "rm", SPIN_STACK, contended=2, total=300)]))
    first, again = aggregator.profile(), aggregator.profile()
    assert first == again
    (caller,) = first.callers
    assert (caller.contended, caller.total_wait_ns) == (6, 900)
    assert caller.hist_ns == (Bucket(64, 127, 6),)
    assert [(t.contended, t.total_wait_ns) for t in caller.task_stacks] == [(6, 900)]
    (newest,) = aggregator.profile(latest=True).callers
    assert (newest.contended, newest.tasks[0].contended) == (2, 2)
