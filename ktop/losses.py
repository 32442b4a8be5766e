"""Every loss ktop counts, once: its name, the pane counting it, why it happens and what it
costs, and the BPF C enum member that counts it in the kernel (none for those counted in
Python).

The collectors read their programs' `lost` arrays by the names here, in the C enums' order;
the header and `L` explain each loss by its reason here; tests/test_lost_names.py parses
every C enum of bpf/ against this list, so a reason added, removed or moved in C fails there
and never shows under a wrong name. A loss is data that did not make it into the counts; a
note is counted whole and only missing from some view (shown apart, not as a loss).

No imports: the collectors, the UI and the tests all read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loss:
    name: str  # as recorded and shown after its pane's prefix: cpu.kstack_map_full
    pane: str  # the pane that counts it (ktop.registry' name)
    reason: str  # why it happens and what it cost, one line (L, the help)
    enum: str = ""  # the C enum member counting it in the kernel; "" when counted in Python
    counts_intact: bool = False  # what it dropped is counted all the same (a list entry)
    note: bool = False  # not a loss: counted whole, missing from a view only


_KSTACK_COLLISION = ("a kernel stack's bucket in the stack map held another stack: counted "
                     "without its kernel stack")
_KSTACK_FULL = "the stack map had no room for a kernel stack: counted without it"
_USTACK_COLLISION = ("a user stack's bucket in the stack map held another stack: counted "
                     "without its user stack")
_USTACK_FULL = "the stack map had no room for a user stack: counted without it"
_STACK_MISSING = "a stack was emptied from its map before ktop read it: counted without it"
_RECURSION = ("the kernel skipped the program (another BPF program was running on that CPU): "
              "the event was not seen")

# Each pane's in-kernel losses in its C enum's order, then those counted in Python.
CATALOGUE: tuple[Loss, ...] = (
    # ---- hot functions: enum cpu_lost (bpf/ktop.h) ----
    Loss("kstack_collision", "functions", _KSTACK_COLLISION, "CPU_LOST_KSTACK_COLLISION"),
    Loss("kstack_map_full", "functions", _KSTACK_FULL, "CPU_LOST_KSTACK_FULL"),
    Loss("ustack_collision", "functions", _USTACK_COLLISION, "CPU_LOST_USTACK_COLLISION"),
    Loss("ustack_map_full", "functions", _USTACK_FULL, "CPU_LOST_USTACK_FULL"),
    Loss("counts_map_full", "functions",
         "the counts map was full: the sample is not counted at all", "CPU_LOST_COUNTS_FULL"),
    Loss("stack_missing", "functions", _STACK_MISSING),
    Loss("recursion_misses", "functions", _RECURSION),
    Loss("binary_unread", "functions",
         "a binary's symbols were past what ktop reads of one (sections, table sizes, CPU "
         "time): its frames show as [unknown]", counts_intact=True),
    # ---- lock contention: enum lock_lost (bpf/ktop.h) ----
    Loss("unpaired_end", "locks",
         "a lock wait ended whose start was not seen: the wait is not counted",
         "LOCK_LOST_UNPAIRED_END"),
    Loss("nested_begin", "locks", "a wait began inside another: only the outer one is timed",
         "LOCK_LOST_NESTED_BEGIN"),
    Loss("start_map_full", "locks",
         "the map of waits in progress was full: the wait is not counted", "LOCK_LOST_START_FULL"),
    Loss("stale_spin", "locks", "a spinning wait whose end never came was replaced",
         "LOCK_LOST_STALE_SPIN"),
    Loss("kstack_collision", "locks", _KSTACK_COLLISION, "LOCK_LOST_KSTACK_COLLISION"),
    Loss("kstack_map_full", "locks", _KSTACK_FULL, "LOCK_LOST_KSTACK_FULL"),
    Loss("ustack_collision", "locks", _USTACK_COLLISION, "LOCK_LOST_USTACK_COLLISION"),
    Loss("ustack_map_full", "locks", _USTACK_FULL, "LOCK_LOST_USTACK_FULL"),
    Loss("stacks_map_full", "locks",
         "the per-stack map was full: the wait is missing from the caller view",
         "LOCK_LOST_STACKS_FULL"),
    Loss("locks_map_full", "locks",
         "the per-lock map was full: the wait is missing from the address view",
         "LOCK_LOST_LOCKS_FULL"),
    Loss("tasks_map_full", "locks",
         "the per-task map was full: the wait is missing from the task view",
         "LOCK_LOST_TASKS_FULL"),
    Loss("owners_map_full", "locks",
         "the per-owner map was full: the wait is missing from the owner view and the "
         "drill-downs' owners", "LOCK_LOST_OWNERS_FULL"),
    Loss("owner_stack_stale", "locks",
         "a lock owner's stack was taken just before a drain: the wait is charged to its "
         "owner without that stack", "LOCK_LOST_OWNER_STACK_STALE", counts_intact=True),
    Loss("stack_missing", "locks", _STACK_MISSING),
    Loss("recursion_misses", "locks", _RECURSION),
    Loss("stale_begin", "locks",
         "a wait's start whose thread is gone was forgotten: its end would never come, the "
         "wait is not counted"),
    # ---- block I/O: enum blk_lost (bpf/ktop.h) ----
    Loss("unpaired_complete", "blockio",
         "a request completed that was not seen submitted: not counted",
         "BLK_LOST_UNPAIRED_COMPLETE"),
    Loss("complete_missed", "blockio",
         "a request's address was reused while in flight: one completion lost",
         "BLK_LOST_COMPLETE_MISSED"),
    Loss("inflight_full", "blockio",
         "the map of requests in flight was full: the request is not counted",
         "BLK_LOST_INFLIGHT_FULL"),
    Loss("totals_map_full", "blockio",
         "the per-process counters were full: a completion is not counted",
         "BLK_LOST_TOTALS_FULL"),
    Loss("hist_map_full", "blockio",
         "the latency histogram map was full: a latency is not counted", "BLK_LOST_HIST_FULL"),
    Loss("stack_counts_map_full", "blockio",
         "the per-stack counters were full: a request's stack is not counted",
         "BLK_LOST_STACK_COUNTS_FULL"),
    Loss("kstack_collision", "blockio", _KSTACK_COLLISION, "BLK_LOST_KSTACK_COLLISION"),
    Loss("kstack_map_full", "blockio", _KSTACK_FULL, "BLK_LOST_KSTACK_FULL"),
    Loss("ustack_collision", "blockio", _USTACK_COLLISION, "BLK_LOST_USTACK_COLLISION"),
    Loss("ustack_map_full", "blockio", _USTACK_FULL, "BLK_LOST_USTACK_FULL"),
    Loss("ringbuf_full", "blockio",
         "the stream of recent requests dropped one: missing from that list only, every "
         "count has it", "BLK_LOST_RINGBUF_FULL", counts_intact=True),
    Loss("stack_missing", "blockio", _STACK_MISSING),
    Loss("recursion_misses", "blockio", _RECURSION),
    Loss("stale_inflight", "blockio",
         "a request still held in flight when its disk had none in flight was forgotten: "
         "its completion was never seen, it is not counted"),
    # ---- waits: enum wait_lost (bpf/waits.h) ----
    Loss("threads_map_full", "waits",
         "the map of threads was full, or had no memory for one more: a thread's waits are "
         "not counted", "WAIT_LOST_THREADS_FULL"),
    Loss("procs_map_full", "waits",
         "the per-process map was full: a switch-out's or a wait's time is lost",
         "WAIT_LOST_PROCS_FULL"),
    Loss("wait_stacks_full", "waits",
         "the per-stack map was full: a blocked wait is missing from the stack views (its "
         "process's totals have it)", "WAIT_LOST_STACKS_FULL"),
    Loss("kstack_collision", "waits", _KSTACK_COLLISION, "WAIT_LOST_KSTACK_COLLISION"),
    Loss("kstack_map_full", "waits", _KSTACK_FULL, "WAIT_LOST_KSTACK_FULL"),
    Loss("ustack_collision", "waits", _USTACK_COLLISION, "WAIT_LOST_USTACK_COLLISION"),
    Loss("ustack_map_full", "waits", _USTACK_FULL, "WAIT_LOST_USTACK_FULL"),
    Loss("no_wakeup_seen", "waits",
         "a thread was switched in while blocked, its wake-up unseen: counted as blocked "
         "until then, with no waker", "WAIT_LOST_NO_WAKEUP"),
    Loss("unseen_start", "waits",
         "a thread first seen in the middle of a wait (begun before ktop started): that wait "
         "is not in its stacks", "WAIT_LOST_UNSEEN_START", note=True),
    Loss("long_wait_unwalked", "waits",
         "a wait past the minimum whose stack was not walked (it was predicted short): "
         "counted in full, under [not walked: a short wait]", "WAIT_LOST_LONG_UNWALKED",
         note=True),
    Loss("switch_unseen", "waits",
         "a thread was switched out while ktop had it off a CPU, or in while on one: a "
         "switch was not seen, and the thread's time since its last event (on a CPU, queued "
         "or blocked) is not counted", "WAIT_LOST_SWITCH_UNSEEN"),
    Loss("stack_missing", "waits", _STACK_MISSING),
    Loss("recursion_misses", "waits", _RECURSION),
    Loss("exited_unseen", "waits",
         "a thread exited without its last switch-out seen: forgotten by ktop"),
    # ---- syscalls: enum syscalls_lost (bpf/syscalls.h) ----
    Loss("no_task_storage", "syscalls",
         "the kernel had no task storage for a thread: its call is not counted",
         "SC_LOST_NO_STORAGE"),
    Loss("unpaired_exit", "syscalls",
         "a call returned whose start was not seen (begun before ktop attached): not "
         "counted", "SC_LOST_UNPAIRED_EXIT", note=True),
    Loss("counts_map_full", "syscalls",
         "the per-thread call counters were full: the call is not counted",
         "SC_LOST_COUNTS_FULL"),
    Loss("slow_map_full", "syscalls",
         "the slow-call map was full: a slow call is missing from the drill-down (every "
         "count has it)", "SC_LOST_SLOW_FULL", counts_intact=True),
    Loss("kstack_map_full", "syscalls", _KSTACK_FULL, "SC_LOST_KSTACK_FULL"),
    Loss("ustack_map_full", "syscalls", _USTACK_FULL, "SC_LOST_USTACK_FULL"),
    Loss("slow_sleep_unwalked", "syscalls",
         "a slow call slept where its stack was not walked (its thread's last call that "
         "slept was short): counted in full, without where it slept",
         "SC_LOST_SLOW_UNWALKED", note=True),
    Loss("stack_missing", "syscalls", _STACK_MISSING),
    Loss("recursion_misses", "syscalls", _RECURSION),
    # ---- endings: enum ending_lost (bpf/endings.h) ----
    Loss("signals_map_full", "endings",
         "the per-(sender, target, signal) map was full: a signal is missing from the "
         "signal counts", "ENDING_LOST_SIGNALS_FULL"),
    Loss("signal_ring_full", "endings",
         "the signal stream had no room: a signal is counted without its record (sender's "
         "stacks, the ending it caused named without its killer)",
         "ENDING_LOST_SIGNAL_RING_FULL", counts_intact=True),
    Loss("signal_sampled", "endings",
         "a frequent signal (SIGCHLD, SIGURG, timers, real-time) past its per-CPU budget of "
         "records a second: counted, without a record", "ENDING_LOST_SIGNAL_SAMPLED",
         counts_intact=True),
    Loss("exit_ring_full", "endings",
         "the exit stream had no room: a process's end is not listed",
         "ENDING_LOST_EXIT_RING_FULL"),
    Loss("oom_ring_full", "endings",
         "an OOM kill's mark had no room in the stream: not counted as an OOM kill",
         "ENDING_LOST_OOM_RING_FULL"),
    Loss("recursion_misses", "endings", _RECURSION),
    Loss("endings_not_kept", "endings",
         "more processes ended or signals came in an interval than a record keeps: the "
         "newest are listed, the rest counted only", counts_intact=True),
    # ---- interrupts: enum irqs_lost (bpf/irqs.h) ----
    Loss("counts_map_full", "irqs",
         "the interrupt counters were full: the handler's or vector's run is not counted",
         "IRQ_LOST_COUNTS_FULL"),
    Loss("unpaired_exit", "irqs",
         "a handler or softirq ended whose start was not seen (begun before ktop attached): "
         "not counted", "IRQ_LOST_UNPAIRED_EXIT", note=True),
    Loss("recursion_misses", "irqs", _RECURSION),
    # ---- memory: enum memory_lost (bpf/memory.h) ----
    Loss("starts_map_full", "memory",
         "no room to keep a reclaim or compaction stall's start: the stall is not counted",
         "MEM_LOST_STARTS_FULL"),
    Loss("unpaired_end", "memory",
         "a stall ended whose start was not seen (begun before ktop attached): not counted",
         "MEM_LOST_UNPAIRED_END", note=True),
    Loss("counts_map_full", "memory",
         "the per-thread stall counters were full: the stall is not counted",
         "MEM_LOST_COUNTS_FULL"),
    Loss("kstack_map_full", "memory", _KSTACK_FULL, "MEM_LOST_KSTACK_FULL"),
    Loss("ustack_map_full", "memory", _USTACK_FULL, "MEM_LOST_USTACK_FULL"),
    Loss("stack_missing", "memory", _STACK_MISSING),
    Loss("recursion_misses", "memory", _RECURSION),
)

# Not data lost: how a pane started (ktop.collectors.progcache). Listed in L, apart from the
# header's figures.
BPF_CACHE_REPLACED = "bpf_cache_replaced"
CATALOGUE += tuple(
    Loss(BPF_CACHE_REPLACED, pane,
         "the pane's compiled BPF program kept in /var/cache/ktop was stale, foreign or "
         "corrupt: it was not used, but compiled again and replaced", counts_intact=True)
    for pane in ("functions", "locks", "blockio", "waits"))

UNKNOWN_REASON = "counted by the BPF program"  # a name from a newer ktop's recording


def kernel_names(pane: str) -> tuple[str, ...]:
    """The names of the pane's BPF `lost` array, index by index (its C enum's order)."""
    return tuple(loss.name for loss in CATALOGUE if loss.pane == pane and loss.enum)


def note_names(pane: str) -> tuple[str, ...]:
    """What the pane's program counts beside its losses that is not one (shown as notes)."""
    return tuple(loss.name for loss in CATALOGUE if loss.pane == pane and loss.note)


def loss(pane: str, name: str) -> Loss | None:
    for entry in CATALOGUE:
        if entry.pane == pane and entry.name == name:
            return entry
    return None


def reason(pane: str, name: str) -> str:
    entry = loss(pane, name)
    return entry.reason if entry is not None else UNKNOWN_REASON


def counts_intact(pane: str, name: str) -> bool:
    entry = loss(pane, name)
    return entry is not None and entry.counts_intact
