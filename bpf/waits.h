/* Structs shared by bpf/waits.bpf.c and ktop/collectors/waits.py (which mirrors them with
 * ctypes and asserts the sizes). */
#ifndef KTOP_WAITS_H
#define KTOP_WAITS_H

#include "ktop.h"

#define WAIT_HIST_SLOTS 32		/* log2 slots of wait time in us: slot k holds [2^(k-1), 2^k) us,
					   slot 0 under 1 us */

/* The state a task left the CPU in, as ktop splits blocked time. */
enum wait_state {
	WAIT_STATE_S,			/* interruptible sleep (prev_state S) */
	WAIT_STATE_D,			/* uninterruptible (D), without TASK_NOLOAD */
	WAIT_STATE_OTHER,		/* stopped, traced, parked, idle kernel threads (I) */
	WAIT_STATE_NR,
};

/* Where a thread is now, as the program last saw it. */
enum wait_phase {
	PHASE_ON_CPU,			/* switched in at `since` */
	PHASE_BLOCKED,			/* switched out blocked at `since` */
	PHASE_RUNQ,			/* runnable since `since`: woken, preempted or new */
	PHASE_WAKING,			/* blocked since `since`, its waker seen (sched_waking), not
					   yet queued: the wait ends at sched_wakeup, as delay
					   accounting's and PSI's do, and run-queue time starts there */
};

/* Time per (process, command, cgroup), every wait counted whatever its length. */
struct wait_proc_key {
	u32 pid;			/* tgid */
	u32 pad;
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

struct wait_proc {
	u64 on_cpu_ns;			/* switch-in to switch-out */
	u64 runq_ns;			/* wake-up, preemption or creation to switch-in */
	u64 runq_count;
	u64 blocked_ns[WAIT_STATE_NR];	/* switch-out to wake-up, by state at switch-out */
	u64 blocked_count[WAIT_STATE_NR];
	u64 runq_hist[WAIT_HIST_SLOTS];
	/* Switches the tracepoint never showed (WAIT_LOST_SWITCH_UNSEEN): the process ran in
	 * the interval though its time on a CPU may not say so (that time is unknown). */
	u64 switches_unseen;
};

/* Blocked time per (process, state, stacks, cgroup, waker): the off-CPU stacks and who
 * ended each wait (offwaketime's one hop). Stacks are walked only for waits predicted long
 * (see waits.bpf.c); the others are counted here with kstack = ustack = -ENOENT. A wait
 * still going at an interval's end adds its time so far under waker -EINPROGRESS, and its
 * count, length and the rest under its waker when it ends. */
struct wait_stack_key {
	u32 pid;
	u32 state;			/* enum wait_state */
	s64 kstack;			/* a key in `stacks`, or -errno */
	s64 ustack;			/* a key in `user_stacks`, or -errno */
	s64 waker_kstack;		/* a key in `stacks`, or -errno (-EINPROGRESS: still waiting
					   at an interval's end, its time up to there; -EINTR: not
					   walked, woken in an interrupt) */
	u32 waker_pid;			/* tgid of the waker (0: no wake-up seen) */
	u32 scale;			/* 0: every such wait counted here; N: a random 1 in N of
					   them (walked by sampling, see walk_every), the others in
					   the not-walked entries: user space scales these by N.
					   | WAIT_SCALE_LONG_END: of those that ended long, whose
					   unwalked peers are under kstack -ETIME */
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
	char waker_comm[KTOP_COMM_LEN];
};

struct wait_stack {
	u64 total_ns;
	u64 count;			/* waits ended */
	u64 max_ns;
	u64 hist[WAIT_HIST_SLOTS];
};

/* One thread, keyed by its task_struct's address (the tracepoints pass it: no read of the
 * task for its id), kept from its first sighting to its exit, with its identity (process,
 * command, cgroup): waits end in another thread's context (the waker's, or whoever
 * switches it in). Its time is added here as it comes (one lookup an event, no per-process
 * one), and moved to its process's totals at each interval's end (waits_flip), when its
 * identity changes (exec, a rename, another cgroup) and at its exit. */
struct wait_thread {
	u64 since;			/* bpf_ktime_get_ns() of the phase's start: its length */
	/* How far the phase's time has been added: up to the end of each interval it spans
	 * (waits_flip, as user space ends the interval), then the rest when it ends. Advanced
	 * by compare-and-swap: whoever moves it adds that time. */
	u64 charged;
	/* The start of the interval its counts below belong to: its first event after that
	 * interval ends (or waits_flip) settles them to it, by compare-and-swap. */
	u64 interval;
	/* The length of the last blocked wait in D, and in S or other: predicts the next one
	 * in that state (a thread's short futex waits say nothing of its disk reads). */
	u64 last_blocked_ns[2];
	u64 cgroup;			/* as of the last switch-out after a migration */
	s64 kstack;			/* blocked phase: kernel stack key, or -errno (-ENOENT: not walked) */
	s64 ustack;
	s64 waker_kstack;
	u32 tgid;			/* 0 until its first switch-out */
	u32 phase;			/* enum wait_phase */
	u32 state;			/* enum wait_state of the blocked phase */
	u32 flags;			/* WAIT_THREAD_* */
	u32 waker_pid;			/* PHASE_WAKING: who woke it, as sched_waking saw */
	u32 cgroup_epoch;		/* the `cgroup_epoch` its cgroup was read at */
	u32 tid;			/* its thread id, as of its last switch-out (exec moves it) */
	u32 waker_epoch;		/* the `name_epoch` waker_comm was read at */
	u64 waker_task;			/* the task whose name waker_comm holds (0: none) */
	char comm[KTOP_COMM_LEN];	/* as of its first switch-out, then of each rename */
	char waker_comm[KTOP_COMM_LEN];
	/* Not yet in its process's totals (taken with an atomic exchange). */
	u64 on_cpu_ns;
	u64 runq_ns;
	u64 runq_count;
	u64 blocked_ns[WAIT_STATE_NR];
	u64 blocked_count[WAIT_STATE_NR];
	u64 runq_hist[WAIT_HIST_SLOTS];
	u64 switches_unseen;
	/* Its blocked waits that ended unwalked and woken, all under one key (the same waker,
	 * state and name), added up here instead of in the per-stack map: a thread woken by
	 * the same waker again and again (a ping-pong, a worker and its queue) does no map
	 * lookup a wait. Moved to the map when a wait comes under another key, at each
	 * interval's end (settle) and at its exit. Written by the thread's own events only
	 * (catch_up says when one is not: waits_flip or a rename is settling it). */
	struct wait_stack_key short_key;
	u64 short_ns;
	u64 short_count;		/* 0: short_key is unset */
	u64 short_max_ns;
	u32 short_hist[WAIT_HIST_SLOTS];
};

#define WAIT_THREAD_SEEN_S	4	/* last_blocked_ns[0] is known (S or other) */
#define WAIT_THREAD_SEEN_D	8	/* last_blocked_ns[1] is known */
#define WAIT_THREAD_WAKE_PENDING 16	/* woken while still on the CPU, about to block: sched_waking
					   ran before the switch-out's program (the waker spins on
					   the task's on_cpu meanwhile); the waker fields hold who */
#define WAIT_THREAD_SKIPPED	32	/* a wait predicted long left unwalked by sampling (not a
					   misprediction: its stack's sampled peers stand for it) */
#define WAIT_THREAD_LONG_END	64	/* the blocked wait ended past its state's minimum */
#define WAIT_SCALE_LONG_END	(1U << 16)	/* in a key's scale: of the waits that ended long */
#define WAIT_THREAD_SCALE_SHIFT	16	/* flags >> this: the blocked wait's walk was a 1 in N
					   sample (its key's scale), 0 when not sampled */

/* Index into the `lost` per-CPU array: every wait not counted whole. */
enum wait_lost {
	WAIT_LOST_THREADS_FULL,		/* thread map full (or no memory for a record): its waits go uncounted */
	WAIT_LOST_PROCS_FULL,		/* per-process map full: a switch-out's times are lost */
	WAIT_LOST_STACKS_FULL,		/* per-stack map full: a blocked wait is not in the stack views */
	WAIT_LOST_KSTACK_COLLISION,	/* none since stacks are keyed by a hash of their frames */
	WAIT_LOST_KSTACK_FULL,
	WAIT_LOST_USTACK_COLLISION,
	WAIT_LOST_USTACK_FULL,
	WAIT_LOST_NO_WAKEUP,		/* switched in while blocked, no wake-up seen: counted as blocked, no waker */
	WAIT_LOST_UNSEEN_START,		/* a thread first seen mid-wait (before ktop): that wait uncounted */
	WAIT_LOST_LONG_UNWALKED,	/* a wait past the minimum whose stack was not walked */
	WAIT_LOST_SWITCH_UNSEEN,	/* switched out while off a CPU, or in while on one, as
					   ktop saw it: a switch unseen, the time since uncounted */
	WAIT_LOST_NR,
};

#endif
