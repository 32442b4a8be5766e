/* Waits: where a thread's time goes when it is not on a CPU, counted in the kernel from the
 * raw tracepoints sched_switch, sched_waking, sched_wakeup and sched_wakeup_new.
 *
 * Each wait is split in two, as offcputime and runqlat together would: blocked (switch-out
 * to the wake-up, by the state at switch-out) and run queue (wake-up, preemption or
 * creation to switch-in). Every wait's time is added to per-process totals whatever its
 * length; blocked waits are also added per (process, state, stacks, cgroup, waker).
 *
 * A wait is added to the interval it ends in, but only its time since that interval began:
 * at each interval's end user space runs waits_flip over every thread, which adds each
 * phase in progress up to then (a thread asleep for 3 s reads 100% asleep in each 1 s
 * interval, not 0% then 300%).
 *
 * sched_switch fires ~10^5 times a second on a busy machine, so: raw tracepoints (no trace
 * record is built, and no perf event walked after the program); one thread lookup per
 * task an event; stacks walked only for waits that matter: a blocking thread's stacks at
 * switch-out only when its previous blocked wait in the same state (D, or S and other)
 * lasted at least that state's minimum (MIN_WALK_D_NS, MIN_WALK_S_NS) or it has none
 * yet, the waker's only for a wait that did. The length of a wait is known only when it
 * ends, and by then the stack cannot be walked from a tracepoint (bpf_get_task_stack needs
 * a BTF task pointer, and fentry/tp_btf programs are refused on this kernel); a thread's
 * waits tend to repeat, so the last one predicts the next. Long waits that were
 * mispredicted are counted (WAIT_LOST_LONG_UNWALKED), never guessed. */
#include <uapi/linux/ptrace.h>
#include "waits.h"

#ifndef THREAD_ENTRIES
#define THREAD_ENTRIES 16384
#endif
#ifndef PROC_ENTRIES
#define PROC_ENTRIES 4096
#endif
#ifndef WAIT_STACK_ENTRIES
#define WAIT_STACK_ENTRIES 8192
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 8192
#endif
#ifndef USER_STACK_ENTRIES
#define USER_STACK_ENTRIES 4096
#endif
#ifndef USER_STACKS
#define USER_STACKS 1
#endif
/* The stack-walk minimums by state: D (I/O, mostly 16-128 us here) from 10 us; S and other
 * (pipes, futexes, polls, timers: the switch-heavy kind) from 1 ms. */
#ifndef MIN_WALK_S_NS
#define MIN_WALK_S_NS 1000000ULL
#endif
#ifndef MIN_WALK_D_NS
#define MIN_WALK_D_NS 10000ULL
#endif
/* Offsets in struct task_struct, from the kernel's BTF (collectors/waits.py). */
#ifndef TASK_PID
#error "TASK_PID: the offset of task_struct.pid, from BTF"
#endif
#ifndef TASK_STACK
#error "TASK_STACK: the offset of task_struct.stack, from BTF"
#endif
#define WAIT_STACK_DEPTH 48
#define FLIP_THREADS 11		/* threads a waits_flip run takes (task addresses): args[1..11] */
#define FLIP_SETTLE 0		/* waits_flip's args[0] */
#define FLIP_END 1

/* The raw task state at switch-out (prev_state, include/linux/sched.h): stable since 4.14. */
#define KTOP_TASK_INTERRUPTIBLE		0x0001
#define KTOP_TASK_UNINTERRUPTIBLE	0x0002
#define KTOP_TASK_REPORT		0x007f	/* what ps reports; the rest are modifiers */
#define KTOP_TASK_DEAD			0x0080	/* the last switch-out */
#define KTOP_TASK_NOLOAD		0x0400	/* with UNINTERRUPTIBLE: idle kernel threads (I) */
#define KTOP_TASK_RTLOCK_WAIT		0x1000	/* a sleeping spinlock on PREEMPT_RT: D, as ps says */

struct wait_kstack {
	u64 ip[WAIT_STACK_DEPTH];
};

/* The interval being filled: its start (bpf_ktime_get_ns() at the last one's end) with the
 * generation of maps it fills in bit 0, one word written at once by waits_flip, so that no
 * event sees the one without the other. A thread's first event after the start settles its
 * part of the interval before (settle), waits_flip that of a thread with no event: however
 * late user space gets to it, nothing past an interval's end is added to it. */
BPF_ARRAY(generation, u64, 1);
/* Counts cgroup migrations: a thread reads its cgroup again at a switch-out only when this
 * moved since it last did (a move of a whole process is one event, for all its threads). */
BPF_ARRAY(cgroup_epoch, u32, 1);
/* Counts renames and new tasks: a name read before it moved may be another task's now. */
BPF_ARRAY(name_epoch, u32, 1);
/* Allocated as threads come: room for many, memory for those that live. Keyed by the
 * task's address: a task's record is deleted at its last switch-out, and a new task's
 * (sched_wakeup_new) replaces whatever a missed one left under a reused address. */
BPF_F_TABLE("hash", u64, struct wait_thread, threads, THREAD_ENTRIES, BPF_F_NO_PREALLOC);
BPF_HASH(procs_0, struct wait_proc_key, struct wait_proc, PROC_ENTRIES);
BPF_HASH(procs_1, struct wait_proc_key, struct wait_proc, PROC_ENTRIES);
BPF_HASH(wait_stacks_0, struct wait_stack_key, struct wait_stack, WAIT_STACK_ENTRIES);
BPF_HASH(wait_stacks_1, struct wait_stack_key, struct wait_stack, WAIT_STACK_ENTRIES);
/* Stacks keyed by a hash of their frames, as bpf/cpu.bpf.c keeps them: a stack map loses a
 * new stack whose bucket another holds, and a key names the same frames for as long as a
 * blocked thread holds it, however many intervals later its wait ends. User space reads and
 * empties these after each drain and remembers what it read. */
BPF_F_TABLE("hash", s64, struct wait_kstack, stacks, STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", s64, struct user_stack, user_stacks, USER_STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_PERCPU_ARRAY(lost, u64, WAIT_LOST_NR);
/* Zeroed values for new entries: too big for the BPF stack. */
BPF_PERCPU_ARRAY(zero_thread, struct wait_thread, 1);
BPF_PERCPU_ARRAY(zero_proc, struct wait_proc, 1);
BPF_PERCPU_ARRAY(zero_stack, struct wait_stack, 1);
BPF_PERCPU_ARRAY(stack_walk, struct stack_walk, 1);
/* What each CPU remembers between events, to read less of the tasks. */
struct wait_cpu {
	u64 idle;			/* its idle task (learned as it switches out) */
	u64 task;			/* the last waker whose stack base was read */
	u64 stack;			/* that task's task_struct.stack */
	u64 sp;				/* scratch: a stack address, read back as a number */
	u32 epoch;			/* the name_epoch `stack` was read at */
	u32 pad;
};
BPF_PERCPU_ARRAY(cpu_cache, struct wait_cpu, 1);
BPF_ARRAY(hash_seed, u64, 1);	/* frames_hash's seed (ktop.h) */
/* How often the stacks of a wait are walked, set by user space (collectors/waits.py), by
 * whether it is predicted short [WALK_SHORT] or long [WALK_LONG]: 0 never, 1 every one, N (a
 * power of two) a random 1 in N, which user space scales by N. Short waits are sampled so
 * that their reasons are named, not lumped as not walked; long ones only past the cost
 * budget. Every wait's time is counted in the totals whatever these say. */
#define WALK_SHORT 0
#define WALK_LONG 1
BPF_ARRAY(walk_every, u32, 2);

static __always_inline void count_lost_n(int reason, u64 count)
{
	u64 *n = lost.lookup(&reason);
	if (n)
		*n += count;
}

static __always_inline void count_lost(int reason)
{
	count_lost_n(reason, 1);
}

static __always_inline u32 names_moved(void)
{
	u32 zero = 0, *epoch = name_epoch.lookup(&zero);
	return epoch ? *epoch : 0;
}

static __always_inline void name_moves(void)
{
	u32 zero = 0, *epoch = name_epoch.lookup(&zero);
	if (epoch)
		__sync_fetch_and_add(epoch, 1);
}

static __always_inline u64 interval_word(void)
{
	u32 zero = 0;
	u64 *word = generation.lookup(&zero);
	return word ? *word : 0;
}

#define WORD_GENERATION(word)	((u32)((word) & 1))
#define WORD_START(word)	((word) & ~1ULL)

static __always_inline u32 read_u32(u64 base, u32 offset)
{
	u32 value = 0;
	bpf_probe_read_kernel(&value, sizeof(value), (const void *)(base + offset));
	return value;
}

/* floor(log2(v)), 0 for v <= 1 */
static __always_inline u32 log2_floor(u64 v)
{
	u32 r, shift;

	r = (v > 0xFFFFFFFFULL) << 5; v >>= r;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

/* Slot k >= 1 holds [2^(k-1), 2^k) us; slot 0 under 1 us. */
static __always_inline u32 hist_slot(u64 ns)
{
	u64 us = ns / 1000;
	u32 slot = us ? log2_floor(us) + 1 : 0;
	slot = slot < WAIT_HIST_SLOTS ? slot : WAIT_HIST_SLOTS - 1;
	/* clang drops a mask it can prove useless; the verifier needs to see one. */
	asm volatile("" : "+r"(slot));
	return slot & (WAIT_HIST_SLOTS - 1);
}

static __always_inline u64 stack_seed(void)
{
	u32 zero = 0;
	u64 *seed = hash_seed.lookup(&zero);
	return seed ? *seed : 0;
}

/* Written out per map: bcc rewrites map references only in method-call form. */
static __always_inline s64 kernel_stack(void *ctx)
{
	u32 zero = 0;
	struct stack_walk *walk = stack_walk.lookup(&zero);
	s64 key;

	if (!walk)
		return -ENOMEM;
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct wait_kstack), 0),
			       stack_seed(), WAIT_STACK_DEPTH);
	if (key < 0)
		return key;
	if (stacks.lookup(&key))
		return key;
	if (stacks.insert(&key, (struct wait_kstack *)walk) == -E2BIG) {
		count_lost(WAIT_LOST_KSTACK_FULL);
		return -ENOMEM;
	}
	return key;
}

static __always_inline s64 user_stack(void *ctx, u32 tgid)
{
	u32 zero = 0;
	struct stack_walk *walk;
	s64 key;

	if (!USER_STACKS || !tgid)
		return -EFAULT;
	walk = stack_walk.lookup(&zero);
	if (!walk)
		return -ENOMEM;
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct user_stack),
						   BPF_F_USER_STACK),
			       stack_seed(), KTOP_USER_STACK_DEPTH);
	if (key < 0)
		return key;
	if (user_stacks.lookup(&key))
		return key;
	if (user_stacks.insert(&key, (struct user_stack *)walk) == -E2BIG) {
		count_lost(WAIT_LOST_USTACK_FULL);
		return -ENOMEM;
	}
	return key;
}

/* The time of the thread's phase from where it was charged up to `until`, claimed for the
 * caller to add (0: nothing left, or another CPU claimed it first). */
static __always_inline u64 claim(struct wait_thread *t, u64 until)
{
#pragma unroll
	for (int i = 0; i < 3; i++) {
		u64 from = t->charged;
		if (from >= until)
			return 0;
		if (__sync_val_compare_and_swap(&t->charged, from, until) == from)
			return until - from;
	}
	return 0;
}

/* The stack-walk minimum of a wait in this state. */
static __always_inline u64 min_walk_ns(u32 state)
{
	return state == WAIT_STATE_D ? MIN_WALK_D_NS : MIN_WALK_S_NS;
}

/* A thread's last blocked wait is kept per kind, D or the rest: last_blocked_ns[is_d]. */
#define SEEN_FLAG(is_d)	((is_d) ? WAIT_THREAD_SEEN_D : WAIT_THREAD_SEEN_S)

/* Whether the wait the thread begins in this state is predicted long enough to walk: its
 * last one of the same kind was (or it has none yet). */
static __always_inline bool predicted_long(struct wait_thread *t, u32 state)
{
	u32 is_d = state == WAIT_STATE_D;

	return !(t->flags & SEEN_FLAG(is_d)) || t->last_blocked_ns[is_d & 1] >= min_walk_ns(state);
}

/* Whether this program runs on another stack than the current task's: in an interrupt
 * (hard or soft) entered from kernel mode, or idle, where `current` is only the task it
 * interrupted and woke no one. One entered from user mode runs on the task's stack (x86-64)
 * and is not told apart here: about 1 in 10 interrupt wake-ups on a busy machine. */
static __always_inline bool on_interrupt_stack(void)
{
	u32 zero = 0, epoch = names_moved();
	struct wait_cpu *c = cpu_cache.lookup(&zero);
	u64 task = bpf_get_current_task(), base = 0, sp;

	if (!c)
		return false;
	/* The task's stack base, read once while it wakes others from this CPU (a task at a
	 * reused address is new: the epoch moved). */
	if (c->task != task || c->epoch != epoch) {
		if (bpf_probe_read_kernel(&base, sizeof(base), (const void *)(task + TASK_STACK)) < 0)
			return false;
		c->task = task;
		c->stack = base;
		c->epoch = epoch;
	}
	/* The stack pointer as a number: through memory, the verifier allows no arithmetic
	 * on it (a root program may store a pointer in a map). */
	c->sp = (u64)&zero;
	asm volatile("" ::: "memory");
	sp = *(volatile u64 *)&c->sp;
	return sp - c->stack >= THREAD_SIZE;
}

/* What a switch-out leaves the thread as: (prev_state as the kernel passes it). */
enum switched_out { OUT_RUNNABLE, OUT_S, OUT_D, OUT_OTHER, OUT_DEAD };

static __always_inline u32 switched_out(u64 preempt, u64 state)
{
	if (preempt & 1)
		return OUT_RUNNABLE;
	if (state & KTOP_TASK_DEAD)
		return OUT_DEAD;
	if (state & KTOP_TASK_RTLOCK_WAIT)
		return OUT_D;
	state &= KTOP_TASK_REPORT | KTOP_TASK_NOLOAD;
	if (state == 0)
		return OUT_RUNNABLE;	/* yielded while runnable */
	if (state & KTOP_TASK_INTERRUPTIBLE)
		return OUT_S;
	if ((state & KTOP_TASK_UNINTERRUPTIBLE) && !(state & KTOP_TASK_NOLOAD))
		return OUT_D;
	return OUT_OTHER;
}

static __always_inline struct wait_thread *new_thread(u64 task, u32 tid, u32 phase, u64 now)
{
	u64 word = interval_word();
	u32 zero = 0;
	struct wait_thread *fresh = zero_thread.lookup(&zero);
	struct wait_thread *t;

	if (!fresh)
		return 0;
	threads.update(&task, fresh);
	t = threads.lookup(&task);
	if (!t) {
		count_lost(WAIT_LOST_THREADS_FULL);
		return 0;
	}
	t->tid = tid;
	t->phase = phase;
	t->since = now;
	t->charged = now;
	t->interval = WORD_START(word);
	t->kstack = -ENOENT;
	t->ustack = -ENOENT;
	return t;
}

/* The entry of this key in generation g, made if new (0: the map is full, not counted). */
static __always_inline struct wait_stack *stack_at(struct wait_stack_key *key, u32 g)
{
	struct wait_stack *w = g ? wait_stacks_1.lookup(key) : wait_stacks_0.lookup(key);

	if (!w) {
		u32 zero = 0;
		struct wait_stack *init = zero_stack.lookup(&zero);
		if (!init)
			return 0;
		w = g ? wait_stacks_1.lookup_or_try_init(key, init)
		      : wait_stacks_0.lookup_or_try_init(key, init);
	}
	return w;
}

static __always_inline struct wait_stack *stack_entry(struct wait_thread *t, u32 g,
						      bool woken, bool ended)
{
	struct wait_stack_key key = {};
	struct wait_stack *w;

	key.pid = t->tgid;
	key.state = t->state;
	key.kstack = t->kstack;
	key.ustack = t->ustack;
	key.scale = t->flags >> WAIT_THREAD_SCALE_SHIFT;
	if (key.scale && (t->flags & WAIT_THREAD_LONG_END))
		key.scale |= WAIT_SCALE_LONG_END;
	key.cgroup = t->cgroup;
	__builtin_memcpy(key.comm, t->comm, sizeof(key.comm));
	if (!ended) {
		key.waker_kstack = -EINPROGRESS;
	} else if (woken) {
		key.waker_pid = t->waker_pid;
		key.waker_kstack = t->waker_kstack;
		__builtin_memcpy(key.waker_comm, t->waker_comm, sizeof(key.waker_comm));
	} else {
		key.waker_kstack = -ENOENT;
	}
	w = stack_at(&key, g);
	if (!w)
		count_lost(WAIT_LOST_STACKS_FULL);
	return w;
}

/* Moves the thread's short waits (short_key's) to generation g's per-stack map. Only by
 * whoever owns the thread's record now (see catch_up). */
static __always_inline void move_short(struct wait_thread *t, u32 g)
{
	struct wait_stack *w;
	u64 count = t->short_count;

	if (!count)
		return;
	w = stack_at(&t->short_key, g);
	if (w) {
		__sync_fetch_and_add(&w->total_ns, t->short_ns);
		__sync_fetch_and_add(&w->count, count);
		if (t->short_max_ns > w->max_ns)
			w->max_ns = t->short_max_ns;
	} else {
		count_lost_n(WAIT_LOST_STACKS_FULL, count);
	}
#pragma clang loop unroll(disable)
	for (int i = 0; i < WAIT_HIST_SLOTS; i++) {
		u32 n = t->short_hist[i];
		if (n) {
			if (w)
				__sync_fetch_and_add(&w->hist[i], n);
			t->short_hist[i] = 0;
		}
	}
	t->short_ns = 0;
	t->short_count = 0;
	t->short_max_ns = 0;
}

/* Adds an ended wait (woken, unwalked) to the thread's short waits, moving those of another
 * key to generation g first. */
static __always_inline void add_short(struct wait_thread *t, u64 ns, u64 wait_ns, u32 g)
{
	struct wait_stack_key *key = &t->short_key;
	u64 *comm = (u64 *)t->comm, *waker_comm = (u64 *)t->waker_comm;
	u64 *key_comm = (u64 *)key->comm, *key_waker_comm = (u64 *)key->waker_comm;

	if (!t->short_count || key->pid != t->tgid || key->state != t->state ||
	    key->waker_pid != t->waker_pid || key->waker_kstack != t->waker_kstack ||
	    key->cgroup != t->cgroup ||
	    key_comm[0] != comm[0] || key_comm[1] != comm[1] ||
	    key_waker_comm[0] != waker_comm[0] || key_waker_comm[1] != waker_comm[1]) {
		move_short(t, g);
		key->pid = t->tgid;
		key->state = t->state;
		key->kstack = -ENOENT;
		key->ustack = -ENOENT;
		key->waker_kstack = t->waker_kstack;	/* -ENOENT, or -EINTR: in an interrupt */
		key->waker_pid = t->waker_pid;
		key->scale = 0;
		key->cgroup = t->cgroup;
		key_comm[0] = comm[0];
		key_comm[1] = comm[1];
		key_waker_comm[0] = waker_comm[0];
		key_waker_comm[1] = waker_comm[1];
	}
	t->short_ns += ns;
	t->short_count++;
	if (wait_ns > t->short_max_ns)
		t->short_max_ns = wait_ns;
	t->short_hist[hist_slot(wait_ns)]++;
}

/* The totals of the process with this identity, in generation g. */
static __always_inline struct wait_proc *proc_entry(struct wait_proc_key *key, u32 g)
{
	struct wait_proc *p = g ? procs_1.lookup(key) : procs_0.lookup(key);

	if (!p) {
		u32 zero = 0;
		struct wait_proc *init = zero_proc.lookup(&zero);
		if (!init)
			return 0;
		p = g ? procs_1.lookup_or_try_init(key, init) : procs_0.lookup_or_try_init(key, init);
		if (!p)
			count_lost(WAIT_LOST_PROCS_FULL);
	}
	return p;
}

/* The totals of the thread's process as of its last switch-out. */
static __always_inline struct wait_proc *thread_proc(struct wait_thread *t, u32 g)
{
	struct wait_proc_key key = {};

	key.pid = t->tgid;
	key.cgroup = t->cgroup;
	__builtin_memcpy(key.comm, t->comm, sizeof(key.comm));
	return proc_entry(&key, g);
}

/* Constant indexes: the verifier cannot bound one read from the map. */
static __always_inline void add_blocked(u64 *ns_by_state, u64 *count_by_state, u32 state,
					u64 ns, u64 count)
{
	if (state == WAIT_STATE_S) {
		__sync_fetch_and_add(&ns_by_state[WAIT_STATE_S], ns);
		__sync_fetch_and_add(&count_by_state[WAIT_STATE_S], count);
	} else if (state == WAIT_STATE_D) {
		__sync_fetch_and_add(&ns_by_state[WAIT_STATE_D], ns);
		__sync_fetch_and_add(&count_by_state[WAIT_STATE_D], count);
	} else {
		__sync_fetch_and_add(&ns_by_state[WAIT_STATE_OTHER], ns);
		__sync_fetch_and_add(&count_by_state[WAIT_STATE_OTHER], count);
	}
}

/* Moves what the thread added since the last time to its process's totals. */
static __always_inline void flush(struct wait_thread *t, struct wait_proc *p)
{
	u64 v;

	if (!(t->on_cpu_ns | t->runq_ns | t->runq_count | t->blocked_ns[0] | t->blocked_ns[1] |
	      t->blocked_ns[2] | t->blocked_count[0] | t->blocked_count[1] | t->blocked_count[2] |
	      t->switches_unseen))
		return;
	if ((v = __sync_lock_test_and_set(&t->on_cpu_ns, 0)))
		__sync_fetch_and_add(&p->on_cpu_ns, v);
	if ((v = __sync_lock_test_and_set(&t->runq_ns, 0)))
		__sync_fetch_and_add(&p->runq_ns, v);
	if ((v = __sync_lock_test_and_set(&t->runq_count, 0)))
		__sync_fetch_and_add(&p->runq_count, v);
	if ((v = __sync_lock_test_and_set(&t->switches_unseen, 0)))
		__sync_fetch_and_add(&p->switches_unseen, v);
#pragma unroll
	for (int i = 0; i < WAIT_STATE_NR; i++) {
		if ((v = __sync_lock_test_and_set(&t->blocked_ns[i], 0)))
			__sync_fetch_and_add(&p->blocked_ns[i], v);
		if ((v = __sync_lock_test_and_set(&t->blocked_count[i], 0)))
			__sync_fetch_and_add(&p->blocked_count[i], v);
	}
#pragma clang loop unroll(disable)
	for (int i = 0; i < WAIT_HIST_SLOTS; i++) {
		if (t->runq_hist[i]) {
			u64 n = __sync_lock_test_and_set(&t->runq_hist[i], 0);
			__sync_fetch_and_add(&p->runq_hist[i], n);
		}
	}
}

static __always_inline void flush_thread(struct wait_thread *t, u32 g)
{
	struct wait_proc *p;

	if (!t->tgid)
		return;	/* its name is known at its first switch-out: kept until then */
	p = thread_proc(t, g);
	if (p)
		flush(t, p);
}

/* Bit 0 of `interval` while settle runs: the short waits are being moved. */
#define SETTLING 1ULL

/* The thread's part in the interval that ended at `end`, to that interval's generation g:
 * its phase's time up to the end, and what it added before. Done once, by whoever moves
 * `interval` on first: the thread's first event after the end, waits_flip, or a rename.
 * Whether this call did it (false: it had nothing to settle, or another CPU does). */
static __always_inline bool settle(struct wait_thread *t, u64 from, u64 end, u32 g)
{
	u32 phase = t->phase;
	struct wait_proc *p;
	u64 ns;

	if (!t->tgid)
		return true;	/* its name is known at its first switch-out: all added then */
	if (__sync_val_compare_and_swap(&t->interval, from, end | SETTLING) != from)
		return false;	/* being settled on another CPU */
	move_short(t, g);
	p = thread_proc(t, g);
	if (!p)
		goto done;
	ns = claim(t, end);
	if (ns) {
		if (phase == PHASE_ON_CPU) {
			__sync_fetch_and_add(&p->on_cpu_ns, ns);
		} else if (phase == PHASE_RUNQ) {
			__sync_fetch_and_add(&p->runq_ns, ns);
		} else {
			add_blocked(p->blocked_ns, p->blocked_count, t->state, ns, 0);
			struct wait_stack *w = stack_entry(t, g, false, false);
			if (w)
				__sync_fetch_and_add(&w->total_ns, ns);
		}
	}
	flush(t, p);
done:
	__sync_lock_test_and_set(&t->interval, end);	/* a full barrier: the moves are seen first */
	return true;
}

/* Before a thread's event adds anything: its part of an interval that has ended since its
 * last event goes to that interval (one comparison when none has). Whether the caller owns
 * the short waits (false: another CPU is settling them; add to the map instead). Waits_flip
 * settles every thread after the last events that read the interval's old word have ended
 * (collectors/waits.py waits for them), so an owner's plain adds are never moved under it. */
static __always_inline bool catch_up(struct wait_thread *t, u64 word)
{
	u64 start = WORD_START(word), from = t->interval;

	if (from == start)
		return true;
	if (from & SETTLING)
		return false;
	return settle(t, from, start, WORD_GENERATION(word) ^ 1);
}

/* A blocked wait ends, by a wake-up (or, unseen, by the switch-in): its time since the
 * last interval's end, and its count and whole length. */
static __always_inline void end_blocked(struct wait_thread *t, u64 now, u32 g, bool woken,
					bool owner)
{
	u64 wait_ns = now > t->since ? now - t->since : 0;
	u64 ns = claim(t, now);
	bool unwalked = t->kstack == -ENOENT;	/* then so are its user and waker stacks */
	struct wait_stack *w = 0;

	if (unwalked && wait_ns >= min_walk_ns(t->state) && !(t->flags & WAIT_THREAD_SKIPPED))
		count_lost(WAIT_LOST_LONG_UNWALKED);
	add_blocked(t->blocked_ns, t->blocked_count, t->state, ns, 1);
	/* Waits predicted short that ended long are a stratum of their own: sampled, they are
	 * scaled against their unwalked peers alone (kstack -ETIME), not against the short ones
	 * (a 5 ms futex wait among 6 us ones, scaled by N, read as 320 ms of them). */
	bool long_end = wait_ns >= min_walk_ns(t->state);
	if (long_end) {
		t->flags |= WAIT_THREAD_LONG_END;
		if (unwalked)
			t->kstack = -ETIME;
	} else {
		t->flags &= ~WAIT_THREAD_LONG_END;
	}
	if (owner && woken && unwalked && !long_end && t->tgid)
		add_short(t, ns, wait_ns, g);
	else if (t->tgid)
		w = stack_entry(t, g, woken, true);
	if (w) {
		__sync_fetch_and_add(&w->total_ns, ns);
		__sync_fetch_and_add(&w->count, 1);
		if (wait_ns > w->max_ns)
			w->max_ns = wait_ns;
		__sync_fetch_and_add(&w->hist[hist_slot(wait_ns)], 1);
	}
	u32 is_d = t->state == WAIT_STATE_D;
	t->last_blocked_ns[is_d & 1] = wait_ns;
	t->flags |= SEEN_FLAG(is_d);
}

/* A switch of the thread the tracepoint never showed: counted as lost, and in its process's
 * totals, which must still say it ran (the processes pane reads what ran). */
static __always_inline void switch_unseen(struct wait_thread *t)
{
	count_lost(WAIT_LOST_SWITCH_UNSEEN);
	__sync_fetch_and_add(&t->switches_unseen, 1);
}

/* The switch-out of the current thread: its on-CPU time is added, under its name now
 * (what it added before goes to its process under its old name if that changed: exec,
 * another cgroup); then its new wait begins. */
static __always_inline void switch_out(struct bpf_raw_tracepoint_args *ctx, u64 task, u32 tid,
				       u32 tgid, u32 out, u64 now, u64 word)
{
	u32 g = WORD_GENERATION(word);
	struct wait_thread *t = threads.lookup(&task);
	u32 zero = 0, *moved = cgroup_epoch.lookup(&zero);
	u32 epoch = moved ? *moved : 0;	/* read before the cgroup: a move after it is seen next time */

	if (!t) {
		/* On the CPU since before ktop looked: that time is not counted. */
		t = new_thread(task, tid, PHASE_ON_CPU, now);
		if (!t)
			return;
	}
	t->tid = tid;	/* an exec from another thread takes the leader's id */
	bool owner = catch_up(t, word);
	/* The command changes only by a rename (on_task_rename, exec's too), the cgroup only
	 * by a migration: neither is read at every switch. */
	if (t->tgid != tgid) {	/* its first switch-out, or a new process (exec's de_thread) */
		flush_thread(t, g);
		t->tgid = tgid;
		t->cgroup = bpf_get_current_cgroup_id();
		t->cgroup_epoch = epoch;
		bpf_get_current_comm(t->comm, sizeof(t->comm));
	} else if (t->cgroup_epoch != epoch) {
		u64 cgroup = bpf_get_current_cgroup_id();

		if (cgroup != t->cgroup) {
			flush_thread(t, g);
			t->cgroup = cgroup;
		}
		t->cgroup_epoch = epoch;
	}
	/* Any other phase: its switch-in was missed: what the time since was is unknown. */
	u64 ns = claim(t, now);
	if (t->phase != PHASE_ON_CPU)
		switch_unseen(t);
	else if (ns)
		__sync_fetch_and_add(&t->on_cpu_ns, ns);
	if (out == OUT_DEAD) {
		flush_thread(t, g);
		if (owner)	/* else the settle on another CPU moves them */
			move_short(t, g);
		threads.delete(&task);
		return;
	}
	t->since = now;
	if (out == OUT_RUNNABLE) {	/* preempted, or yielded while runnable */
		t->flags &= ~WAIT_THREAD_WAKE_PENDING;
		t->phase = PHASE_RUNQ;
		return;
	}
	t->state = out == OUT_S ? WAIT_STATE_S : out == OUT_D ? WAIT_STATE_D : WAIT_STATE_OTHER;
	bool long_wait = predicted_long(t, t->state);
	u32 kind = long_wait ? WALK_LONG : WALK_SHORT, *setting = walk_every.lookup(&kind);
	u32 every = setting ? *setting : 1;
	bool walk = every == 1 || (every && !(bpf_get_prandom_u32() & (every - 1)));

	t->flags &= ~(WAIT_THREAD_SKIPPED | WAIT_THREAD_LONG_END) &
		    ((1U << WAIT_THREAD_SCALE_SHIFT) - 1);
	if (walk && every > 1)
		t->flags |= every << WAIT_THREAD_SCALE_SHIFT;
	else if (long_wait && !walk)
		t->flags |= WAIT_THREAD_SKIPPED;
	if (walk) {
		t->kstack = kernel_stack(ctx);
		/* A short wait's sample names its reason, in the kernel: its user stack (the
		 * costlier walk, whose time a sampled wait would lose beside its peers) is not. */
		t->ustack = long_wait ? user_stack(ctx, tgid) : -ENOENT;
		/* The walk lengthens a sampled wait whose waker needs this CPU (a ping-pong on
		 * one CPU: the other runs only after it) and shortens one timed from before it
		 * (a timer armed before the switch): half of it counts as the wait's, half as
		 * time on the CPU, so a sample reads as its unwalked peers do either way. */
		if (every > 1) {
			u64 half = now + (bpf_ktime_get_ns() - now) / 2;
			u64 ns = claim(t, half);

			if (ns)
				__sync_fetch_and_add(&t->on_cpu_ns, ns);
			t->since = half;
		}
	} else {
		t->kstack = -ENOENT;
		t->ustack = -ENOENT;
	}
	/* The phase last: a waker on another CPU that sees it blocked sees its stacks. Woken
	 * already (sched_waking saw it still on the CPU): its sched_wakeup comes once it is
	 * off the CPU, and ends the wait (as it does if the mark lands just after this). */
	u32 pending = t->flags & WAIT_THREAD_WAKE_PENDING;
	if (pending)
		t->flags &= ~WAIT_THREAD_WAKE_PENDING;
	t->phase = pending ? PHASE_WAKING : PHASE_BLOCKED;
}

static __always_inline void switch_in(u64 task, u64 now, u64 word)
{
	struct wait_thread *t = threads.lookup(&task);
	u32 g = WORD_GENERATION(word);

	if (!t) {
		/* Waiting since before ktop looked (threads created since are seen at
		 * sched_wakeup_new): that wait is not counted. */
		count_lost(WAIT_LOST_UNSEEN_START);
		new_thread(task, read_u32(task, TASK_PID), PHASE_ON_CPU, now);
		return;
	}
	bool owner = catch_up(t, word);
	if (t->phase == PHASE_RUNQ) {
		u64 wait_ns = now > t->since ? now - t->since : 0;
		u64 ns = claim(t, now);
		__sync_fetch_and_add(&t->runq_ns, ns);
		__sync_fetch_and_add(&t->runq_count, 1);
		__sync_fetch_and_add(&t->runq_hist[hist_slot(wait_ns)], 1);
	} else if (t->phase == PHASE_WAKING) {	/* its sched_wakeup was missed */
		end_blocked(t, now, g, true, owner);
	} else if (t->phase == PHASE_BLOCKED) {
		count_lost(WAIT_LOST_NO_WAKEUP);
		end_blocked(t, now, g, false, owner);
	} else {	/* on the CPU: its switch-out was missed, what the time since was is unknown */
		switch_unseen(t);
		claim(t, now);
	}
	t->phase = PHASE_ON_CPU;
	t->since = now;
}

/* (bool preempt, struct task_struct *prev, struct task_struct *next[, prev_state]), in the
 * context of prev. */
int on_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
	u64 now = bpf_ktime_get_ns();
	u64 word = interval_word();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u64 next = ctx->args[2];
	u32 zero = 0;
	struct wait_cpu *c = cpu_cache.lookup(&zero);

	if (!c)
		return 0;
	/* pid 0 is each CPU's idle task: never a waiter. Its address is learned as it leaves
	 * the CPU (it is current then), so that switching to it reads nothing of it. */
	if ((u32)pid_tgid) {
#ifdef SWITCH_STATE_ARG
		u64 state = ctx->args[SWITCH_STATE_ARG];
#else	/* before Linux 5.18: the state as the tracepoint fires */
		u64 state = read_u32(ctx->args[1], TASK_STATE);
#endif
		switch_out(ctx, ctx->args[1], (u32)pid_tgid, pid_tgid >> 32,
			   switched_out(ctx->args[0], state), now, word);
	} else {
		c->idle = ctx->args[1];
	}
	if (next != c->idle && (c->idle || read_u32(next, TASK_PID)))
		switch_in(next, now, word);
	return 0;
}

/* (struct task_struct *p), in the waker's context: who woke it, and the waker's stack if
 * the wait was long. In an interrupt this is the task it interrupted; user space tells that
 * case by the walked stack. */
int on_sched_waking(struct bpf_raw_tracepoint_args *ctx)
{
	u64 task = ctx->args[0];
	struct wait_thread *t = threads.lookup(&task);

	if (!t) {
		u64 now = bpf_ktime_get_ns();
		count_lost(WAIT_LOST_UNSEEN_START);
		new_thread(task, read_u32(task, TASK_PID), PHASE_RUNQ, now);
		return 0;
	}
	if (t->phase == PHASE_ON_CPU) {
		/* Woken while still switching out (its state set, the switch-out's program yet
		 * to run), or before it blocked at all (its sched_wakeup follows at once, on the
		 * CPU: the mark is dropped there). Without the mark, such a wait read as one with
		 * no wake-up seen, its run-queue time counted as blocked. */
		t->flags |= WAIT_THREAD_WAKE_PENDING;
	} else if (t->phase == PHASE_BLOCKED) {
		t->phase = PHASE_WAKING;
	} else {
		return 0;	/* already runnable */
	}
	/* A long wait's waker is walked (its stack tells an interrupt's from a task's); a
	 * short one's, or one woken before it blocked (its length unknown), is not. */
	bool walk = t->phase != PHASE_ON_CPU && t->kstack != -ENOENT &&
		    bpf_ktime_get_ns() - t->since >= min_walk_ns(t->state);
	if (!walk && on_interrupt_stack()) {
		t->waker_pid = 0;	/* not the task it interrupted */
		t->waker_task = 0;
		__builtin_memset(t->waker_comm, 0, sizeof(t->waker_comm));
		t->waker_kstack = -EINTR;
		return 0;
	}
	/* The waker's name, read again only for another waker or after a rename (a thread
	 * woken by the same one again and again reads it once). */
	u64 waker = bpf_get_current_task();
	u32 epoch = names_moved();
	if (t->waker_task != waker || t->waker_epoch != epoch) {
		bpf_get_current_comm(&t->waker_comm, sizeof(t->waker_comm));
		t->waker_task = waker;
		t->waker_epoch = epoch;
	}
	t->waker_pid = bpf_get_current_pid_tgid() >> 32;
	t->waker_kstack = walk ? kernel_stack(ctx) : -ENOENT;
	return 0;
}

/* The woken thread is on a run queue now (on its CPU, maybe from an IPI): its blocked
 * wait ends and its run-queue wait starts, where delay accounting and schedstat's
 * run_delay switch too. */
int on_sched_wakeup(struct bpf_raw_tracepoint_args *ctx)
{
	u64 task = ctx->args[0];
	struct wait_thread *t = threads.lookup(&task);

	if (!t)
		return 0;
	if (t->phase != PHASE_WAKING) {
		if (!(t->flags & WAIT_THREAD_WAKE_PENDING))
			return 0;
		t->flags &= ~WAIT_THREAD_WAKE_PENDING;
		if (t->phase != PHASE_BLOCKED)
			return 0;	/* woken before it blocked */
		/* marked by a wake-up between the switch-out's reading the mark and its phase */
		t->phase = PHASE_WAKING;
	}
	u64 now = bpf_ktime_get_ns();
	u64 word = interval_word();

	end_blocked(t, now, WORD_GENERATION(word), true, catch_up(t, word));
	t->phase = PHASE_RUNQ;
	t->since = now;
	return 0;
}

/* (struct task_struct *task, const char *comm), before the kernel copies the new name in
 * (exec's, prctl's, or another thread's write to /proc/.../comm): what the thread added goes
 * to its process under its old name, and it goes on under the new one. */
int on_task_rename(struct bpf_raw_tracepoint_args *ctx)
{
	u64 task = ctx->args[0];
	struct wait_thread *t = threads.lookup(&task);
	u64 comm[2] = {};

	name_moves();

	/* A kernel string: were it unreadable, the old name would stay. */
	if (!t || bpf_probe_read_kernel_str(comm, sizeof(comm), (const void *)ctx->args[1]) < 0)
		return 0;
	u64 word = interval_word();

	catch_up(t, word);
	flush_thread(t, WORD_GENERATION(word));
	((u64 *)t->comm)[0] = comm[0];
	((u64 *)t->comm)[1] = comm[1];
	return 0;
}

/* (struct cgroup *dst, const char *path, struct task_struct *task, bool threadgroup), after
 * the move: every thread reads its cgroup again at its next switch-out. */
int on_cgroup_attach_task(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0, *epoch = cgroup_epoch.lookup(&zero);

	if (epoch)
		__sync_fetch_and_add(epoch, 1);
	return 0;
}

int on_sched_wakeup_new(struct bpf_raw_tracepoint_args *ctx)
{
	u64 task = ctx->args[0];

	name_moves();	/* its address may be an exited task's, a waker remembered */
	new_thread(task, read_u32(task, TASK_PID), PHASE_RUNQ, bpf_ktime_get_ns());
	return 0;
}

/* Run by user space (BPF_PROG_TEST_RUN) to end an interval. args[0] FLIP_END: now, the
 * clock read and the word written together (user space may be preempted anywhere, this
 * program is not between the two). Then FLIP_SETTLE with args[1..] threads' keys (0 ends the
 * list): each one not settled by an event of its own since is settled now, to the generation
 * ending: a wait spanning intervals is spread over them. */
int waits_flip(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0;
	u64 *current = generation.lookup(&zero);

	if (!current)
		return 0;
	u64 word = *current;
	if (ctx->args[0] == FLIP_END) {
		*current = (bpf_ktime_get_ns() & ~1ULL) | (WORD_GENERATION(word) ^ 1);
		return 0;
	}
#pragma unroll
	for (int i = 1; i <= FLIP_THREADS; i++) {
		u64 task = ctx->args[i];
		if (!task)
			break;
		struct wait_thread *t = threads.lookup(&task);
		if (t)
			catch_up(t, word);
	}
	return 0;
}
