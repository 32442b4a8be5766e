"""Lock owners and names on the real kernel (root; about 12 s): each workload's known truth.
Debian's perf 6.1 here can neither name a lock (`perf lock contention -l`) nor own one (`-o`):
both need its BPF mode, which it is built without; so the workloads say what is true."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from ktop.aggregate.locks import LockAggregator
from ktop.collectors.locks import LockCollector
from ktop.model import OWNER_READERS, OWNER_TASK, LockProfile
from ktop.symbolize.kernel import Kallsyms

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]

WORKLOAD = os.path.join(os.path.dirname(__file__), "fixtures", "locks_workload.py")
SECONDS = 2.0
# Where this kernel changes a process's mappings under mmap_lock held for write, and where
# the same thread may release it after taking it again for read: the owner's stack is the one
# it has when its release wakes the waiter, and a writer whose section ended can wake it from
# a page fault's up_read (seen once in CI: the owner right, the stack the later read section).
MMAP_PATH = {"vm_mmap_pgoff", "__vm_munmap", "do_vmi_munmap", "do_mprotect_pkey",
             "vm_brk_flags", "do_mmap", "exc_page_fault", "do_user_addr_fault"}
# Where creating and unlinking a file holds its directory's i_rwsem for write.
CREATE_UNLINK_PATH = {"do_unlinkat", "path_openat", "open_last_lookups", "filename_create",
                      "do_filp_open", "do_mknodat", "do_rmdir"}


@pytest.fixture(scope="module")
def collector():
    collector = LockCollector()
    collector.start()
    yield collector
    collector.close()


def watch(collector: LockCollector, *options: str) -> tuple[LockProfile, dict, set[int]]:
    """The workload run under the collector: (profile, what it started, threads seen)."""
    aggregator = LockAggregator(Kallsyms.load(), window_s=60.0)
    with tempfile.TemporaryDirectory(prefix="ktop-owners-") as tmp:
        started = os.path.join(tmp, "started.json")
        collector.drain()
        workload = subprocess.Popen(
            [sys.executable, WORKLOAD, "--seconds", str(SECONDS), "--started", started,
             *options], stdout=subprocess.DEVNULL)
        threads: set[int] = set()
        deadline = time.monotonic() + SECONDS + 30
        while workload.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
            aggregator.add(collector.drain())
            try:
                with open(started) as f:
                    workers = json.load(f)
            except (OSError, ValueError):
                continue
            for pid in filter(None, [*workers["files"], workers["mmap"]]):
                try:
                    threads |= {int(tid) for tid in os.listdir(f"/proc/{pid}/task")}
                except OSError:
                    pass
        assert workload.wait(timeout=30) == 0
        aggregator.add(collector.drain())
    return aggregator.profile(cumulative=True), workers, threads


def functions(frames: tuple[str, ...]) -> set[str]:
    return {frame.split("+")[0] for frame in frames}


def owners_add_up(profile: LockProfile, address: str) -> None:
    """Every wait for a sleeping lock is charged somewhere: to an owner or to a kind of none."""
    waits = sum(lock.contended for lock in profile.locks if lock.address == address)
    charged = sum(o.contended for o in profile.owners if o.address == address)
    assert charged == waits, (charged, waits)


def test_mmap_lock_is_named_for_its_process_and_owned_by_its_threads(collector):
    profile, workers, threads = watch(collector, "--processes", "0", "--mmap-threads", "4",
                                      "--mmap-pages", "64")
    assert not profile.notes
    pid = workers["mmap"]
    mm = [lock for lock in profile.locks if lock.name == "&mm->mmap_lock"
          and lock.instance.startswith(f"pid {pid} ")]
    assert mm, [(lock.name, lock.instance) for lock in profile.locks[:8]]
    assert sum(lock.contended for lock in mm) >= 5  # other helpers' locks may wait longer
    owners = [o for o in profile.owners if o.address == mm[0].address]
    tasks = [o for o in owners if o.owner == OWNER_TASK]
    assert tasks, owners
    for o in tasks:  # every owner a thread of that process...
        assert o.tgid == pid and o.pid in threads, (o.pid, o.tgid, pid)
        # ...whose stack when it released the lock runs through the mmap path
        assert not o.frames or functions(o.frames) & MMAP_PATH, o.frames
    assert any(o.frames for o in tasks)
    # munmap frees pages with the lock downgraded to read: those waits have no single owner
    assert all(o.pid == 0 and not o.frames for o in owners if o.owner == OWNER_READERS)
    owners_add_up(profile, mm[0].address)


def test_i_rwsem_is_named_with_its_directory_and_owned_by_the_workers(collector):
    profile, workers, threads = watch(collector, "--processes", "4", "--mmap-threads", "0")
    directory = os.path.realpath(workers["directory"])
    named = [lock for lock in profile.locks if lock.name == "&inode->i_rwsem"
             and lock.instance == directory]
    assert named, [(lock.name, lock.instance) for lock in profile.locks[:8]]
    assert sum(lock.contended for lock in named) >= 5
    tasks = [o for o in profile.owners if o.address == named[0].address and o.owner == OWNER_TASK]
    assert tasks
    assert {o.tgid for o in tasks} <= set(workers["files"])
    assert {o.pid for o in tasks} <= threads
    with_stacks = [o for o in tasks if o.frames]
    assert with_stacks and all(functions(o.frames) & CREATE_UNLINK_PATH for o in with_stacks)
    # most waits find their owner's stack (the owner woke them or another of its waiters)
    assert sum(o.contended for o in with_stacks) >= sum(o.contended for o in tasks) // 2
    owners_add_up(profile, named[0].address)


def test_run_queue_locks_are_named_with_their_cpu(collector):
    profile, _, _ = watch(collector, "--processes", "0", "--mmap-threads", "0",
                          "--ping-pongs", "2", "--spinners", "2")
    queues = [lock for lock in profile.locks if lock.name == "runqueues.__lock"]
    assert queues, [(lock.name, lock.instance) for lock in profile.locks[:8]]
    assert all(lock.type == "spinlock" for lock in queues)
    cpus = {lock.instance: lock.address for lock in queues}
    assert set(cpus) <= {f"CPU {n}" for n in range(os.cpu_count() or 1)}
    assert len(set(cpus.values())) == len(cpus)  # one lock a CPU
    # The waits on them come from the scheduler's paths that take a run queue's lock.
    scheduler = {"__schedule", "raw_spin_rq_lock_nested", "try_to_wake_up", "sched_tick",
                 "sched_balance_rq", "__task_rq_lock", "task_rq_lock", "ttwu_queue",
                 "wake_up_new_task", "sched_ttwu_pending", "_raw_spin_rq_lock_irqsave"}
    in_scheduler = sum(s.contended for c in profile.callers if c.type == "spinlock"
                       for s in c.stacks if functions(s.frames) & scheduler)
    assert sum(lock.contended for lock in queues) <= in_scheduler
    # spinning locks record no owner: none is charged
    assert not any(o.type == "spinlock" for o in profile.owners)


def test_without_btf_waits_are_counted_and_owners_and_names_said_left_out(tmp_path):
    collector = LockCollector(btf_path=str(tmp_path / "no-btf"))
    collector.start()
    try:
        profile, workers, _ = watch(collector, "--processes", "4", "--mmap-threads", "0")
    finally:
        collector.close()
    (note,) = profile.notes
    assert note.startswith("lock owners and names left out: no kernel BTF") and "no-btf" in note
    assert profile.owners == ()
    assert not any(lock.name.startswith("&") or lock.name == "runqueues.__lock"
                   for lock in profile.locks)
    unlink = [c for c in profile.callers if c.caller.startswith("do_unlinkat+")]
    assert unlink and sum(c.contended for c in unlink) >= 5  # waits counted all the same
