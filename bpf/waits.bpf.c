/* Waits: where a thread's time goes when it is not on a CPU, counted in the kernel from
 * sched:sched_switch, sched_waking, sched_wakeup and sched_wakeup_new.
 *
 * Each wait is split in two, as offcputime and runqlat together would: blocked (switch-out
 * to the wake-up, by the state at switch-out) and run queue (wake-up, preemption or
 * creation to switch-in). Every wait's time is added to per-process totals whatever its
 * length; blocked waits are also added per (process, state, stacks, cgroup, waker).
 *
 * sched_switch fires ~10^5 times a second on a busy machine and a kernel stack walk costs
 * microseconds, so stacks are walked only for waits that matter: a blocking thread's stacks
 * at switch-out only when its previous blocked wait lasted at least MIN_WALK_NS (or it has
 * none yet), the waker's only for a wait that did. The length of a wait is known only when
 * it ends, and by then the stack cannot be walked from a tracepoint (bpf_get_task_stack
 * needs a BTF task pointer, and fentry/tp_btf programs are refused on this kernel); a
 * thread's waits tend to repeat, so the last one predicts the next. Long waits that were
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
#ifndef MIN_WALK_NS
#define MIN_WALK_NS 10000ULL
#endif
/* What a tracepoint program returns decides whether the kernel hands the event on to the
 * tracepoint's other perf users: 0 would blind a `perf sched record` running beside ktop. */
#ifndef PASS_ON
#define PASS_ON 1
#endif
#define WAIT_STACK_DEPTH 48

/* prev_state as sched_switch reports it (__trace_sched_switch_state): one TASK_REPORT bit,
 * or TASK_REPORT_MAX (0x100) for a preemption, 0 for a runnable task that yielded. */
#define REPORT_S	0x01
#define REPORT_D	0x02
#define REPORT_DEAD	(0x10 | 0x20)	/* EXIT_DEAD, EXIT_ZOMBIE: the last switch-out */
#define REPORT_MASK	0xff

/* Fixed layouts of the tracepoints' records (checked against tracefs before loading). */
struct sched_switch_args {
	u64 common;
	char prev_comm[16];
	s32 prev_pid;
	s32 prev_prio;
	s64 prev_state;
	char next_comm[16];
	s32 next_pid;
	s32 next_prio;
};

struct sched_wakeup_args {
	u64 common;
	char comm[16];
	s32 pid;
	s32 prio;
	s32 target_cpu;
};

struct wait_kstack {
	u64 ip[WAIT_STACK_DEPTH];
};

BPF_ARRAY(generation, u32, 1);
BPF_HASH(threads, u32, struct wait_thread, THREAD_ENTRIES);
BPF_HASH(procs_0, struct wait_proc_key, struct wait_proc, PROC_ENTRIES);
BPF_HASH(procs_1, struct wait_proc_key, struct wait_proc, PROC_ENTRIES);
BPF_HASH(wait_stacks_0, struct wait_stack_key, struct wait_stack, WAIT_STACK_ENTRIES);
BPF_HASH(wait_stacks_1, struct wait_stack_key, struct wait_stack, WAIT_STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct wait_kstack, stacks_0, STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct wait_kstack, stacks_1, STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct user_stack, user_stacks_0, USER_STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct user_stack, user_stacks_1, USER_STACK_ENTRIES);
BPF_PERCPU_ARRAY(lost, u64, WAIT_LOST_NR);
/* Zeroed values for new entries: too big for the BPF stack. */
BPF_PERCPU_ARRAY(zero_proc, struct wait_proc, 1);
BPF_PERCPU_ARRAY(zero_stack, struct wait_stack, 1);

static __always_inline void count_lost(int reason)
{
	u64 *n = lost.lookup(&reason);
	if (n)
		(*n)++;
}

static __always_inline u32 current_generation(void)
{
	u32 zero = 0, *g = generation.lookup(&zero);
	return g ? *g : 0;
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

/* Written out per map: bcc rewrites map references only in method-call form. */
static __always_inline s32 kernel_stack(void *ctx, u32 g)
{
	s32 id = g ? stacks_1.get_stackid(ctx, 0) : stacks_0.get_stackid(ctx, 0);
	/* A stack whose bucket is taken would lose its stack in every interval: store it
	 * again without its innermost frame (tracing code), which hashes elsewhere. */
	if (id == -EEXIST)
		id = g ? stacks_1.get_stackid(ctx, 1) : stacks_0.get_stackid(ctx, 1);
	count_lost(stack_loss(id, WAIT_LOST_KSTACK_COLLISION, WAIT_LOST_KSTACK_FULL));
	return id;
}

static __always_inline s32 user_stack(void *ctx, u32 g, u32 tgid)
{
	if (!USER_STACKS || !tgid)
		return -EFAULT;
	s32 id = g ? user_stacks_1.get_stackid(ctx, BPF_F_USER_STACK)
		   : user_stacks_0.get_stackid(ctx, BPF_F_USER_STACK);
	if (id == -EEXIST)
		id = g ? user_stacks_1.get_stackid(ctx, BPF_F_USER_STACK | 1)
		       : user_stacks_0.get_stackid(ctx, BPF_F_USER_STACK | 1);
	count_lost(stack_loss(id, WAIT_LOST_USTACK_COLLISION, WAIT_LOST_USTACK_FULL));
	return id;
}

static __always_inline u32 state_of(s64 report)
{
	if (report & REPORT_S)
		return WAIT_STATE_S;
	if (report & REPORT_D)
		return WAIT_STATE_D;
	return WAIT_STATE_OTHER;
}

static __always_inline struct wait_thread *new_thread(u32 tid, u32 phase, u64 now)
{
	struct wait_thread fresh = {};

	fresh.phase = phase;
	fresh.since = now;
	fresh.kstack = -ENOENT;
	fresh.ustack = -ENOENT;
	threads.update(&tid, &fresh);
	struct wait_thread *t = threads.lookup(&tid);
	if (!t)
		count_lost(WAIT_LOST_THREADS_FULL);
	return t;
}

/* A blocked wait, ended by a wake-up (or, unseen, by the switch-in). */
static __always_inline void account_blocked(void *ctx, struct wait_thread *t, u64 wait_ns,
					    u32 g, bool woken)
{
	u32 zero = 0;
	struct wait_stack *init = zero_stack.lookup(&zero);
	struct wait_stack_key key = {};
	struct wait_stack *w;

	if (!init)
		return;
	key.pid = t->tgid;
	key.state = t->state;
	key.kstack = t->kstack;
	key.ustack = t->ustack;
	key.stack_generation = t->stack_generation;
	key.cgroup = t->cgroup;
	__builtin_memcpy(key.comm, t->comm, sizeof(key.comm));
	key.waker_kstack = -ENOENT;
	if (woken) {
		key.waker_pid = t->waker_pid;
		key.waker_kstack = t->waker_kstack;
		key.waker_generation = t->waker_generation;
		__builtin_memcpy(key.waker_comm, t->waker_comm, sizeof(key.waker_comm));
	}
	if (wait_ns >= MIN_WALK_NS && t->kstack == -ENOENT)
		count_lost(WAIT_LOST_LONG_UNWALKED);
	w = g ? wait_stacks_1.lookup_or_try_init(&key, init)
	      : wait_stacks_0.lookup_or_try_init(&key, init);
	if (!w) {
		count_lost(WAIT_LOST_STACKS_FULL);
		return;
	}
	__sync_fetch_and_add(&w->total_ns, wait_ns);
	__sync_fetch_and_add(&w->count, 1);
	if (wait_ns > w->max_ns)
		w->max_ns = wait_ns;
	__sync_fetch_and_add(&w->hist[hist_slot(wait_ns)], 1);
}

/* The totals of the thread's process as of its last switch-out. */
static __always_inline struct wait_proc *thread_proc(struct wait_thread *t, u32 g)
{
	u32 zero = 0;
	struct wait_proc *init = zero_proc.lookup(&zero);
	struct wait_proc_key key = {};
	struct wait_proc *p;

	if (!init)
		return 0;
	key.pid = t->tgid;
	key.cgroup = t->cgroup;
	__builtin_memcpy(key.comm, t->comm, sizeof(key.comm));
	p = g ? procs_1.lookup_or_try_init(&key, init) : procs_0.lookup_or_try_init(&key, init);
	if (!p)
		count_lost(WAIT_LOST_PROCS_FULL);
	return p;
}

static __always_inline void add_runq(struct wait_proc *p, u64 wait_ns)
{
	__sync_fetch_and_add(&p->runq_ns, wait_ns);
	__sync_fetch_and_add(&p->runq_count, 1);
	__sync_fetch_and_add(&p->runq_hist[hist_slot(wait_ns)], 1);
}

/* Constant indexes: the verifier cannot bound one read from the map. */
static __always_inline void add_blocked(struct wait_proc *p, u32 state, u64 wait_ns)
{
	if (state == WAIT_STATE_S) {
		__sync_fetch_and_add(&p->blocked_ns[WAIT_STATE_S], wait_ns);
		__sync_fetch_and_add(&p->blocked_count[WAIT_STATE_S], 1);
	} else if (state == WAIT_STATE_D) {
		__sync_fetch_and_add(&p->blocked_ns[WAIT_STATE_D], wait_ns);
		__sync_fetch_and_add(&p->blocked_count[WAIT_STATE_D], 1);
	} else {
		__sync_fetch_and_add(&p->blocked_ns[WAIT_STATE_OTHER], wait_ns);
		__sync_fetch_and_add(&p->blocked_count[WAIT_STATE_OTHER], 1);
	}
}

/* A wait is added to its process's totals when it ends, as schedstat adds run_delay: a
 * thread blocked has switched out, so its process is known. */
static __always_inline void end_blocked(void *ctx, struct wait_thread *t, u64 now, u32 g,
					bool woken)
{
	u64 wait_ns = now > t->since ? now - t->since : 0;
	struct wait_proc *p = thread_proc(t, g);

	account_blocked(ctx, t, wait_ns, g, woken);
	if (p)
		add_blocked(p, t->state, wait_ns);
	t->last_blocked_ns = wait_ns;
	t->flags |= WAIT_THREAD_SEEN_BLOCKED;
}

/* The switch-out of the current thread: its on-CPU time and the waits parked since its
 * last switch-out go to its process's totals; then its new wait begins. */
static __always_inline void switch_out(struct sched_switch_args *args, u32 tid, u64 now, u32 g)
{
	s64 report = args->prev_state;
	struct wait_thread *t = threads.lookup(&tid);
	bool first = !t;
	u32 zero = 0;

	if (!t) {
		t = new_thread(tid, PHASE_ON_CPU, now);
		if (!t)
			return;
	}
	struct wait_proc_key key = {};
	u64 pid_tgid = bpf_get_current_pid_tgid();
	key.pid = pid_tgid >> 32;
	key.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(&key.comm, sizeof(key.comm));

	struct wait_proc *init = zero_proc.lookup(&zero);
	struct wait_proc *p = 0;
	if (init)
		p = g ? procs_1.lookup_or_try_init(&key, init) : procs_0.lookup_or_try_init(&key, init);
	if (p) {
		/* A thread first seen here was on the CPU since before ktop looked. */
		if (!first && t->phase == PHASE_ON_CPU && now > t->since)
			__sync_fetch_and_add(&p->on_cpu_ns, now - t->since);
		if (t->flags & WAIT_THREAD_RUNQ_PENDING)
			add_runq(p, t->runq_ns);
	} else {
		count_lost(WAIT_LOST_PROCS_FULL);
	}
	t->flags &= ~WAIT_THREAD_RUNQ_PENDING;

	if (report & REPORT_DEAD) {
		threads.delete(&tid);
		return;
	}
	t->tgid = key.pid;
	t->cgroup = key.cgroup;
	__builtin_memcpy(t->comm, key.comm, sizeof(t->comm));
	t->since = now;
	if ((report & REPORT_MASK) == 0) {	/* preempted, or yielded while runnable */
		t->phase = PHASE_RUNQ;
		return;
	}
	t->phase = PHASE_BLOCKED;
	t->state = state_of(report);
	t->stack_generation = g;
	if (!(t->flags & WAIT_THREAD_SEEN_BLOCKED) || t->last_blocked_ns >= MIN_WALK_NS) {
		t->kstack = kernel_stack(args, g);
		t->ustack = user_stack(args, g, key.pid);
	} else {
		t->kstack = -ENOENT;
		t->ustack = -ENOENT;
	}
}

static __always_inline void switch_in(void *ctx, u32 tid, u64 now, u32 g)
{
	struct wait_thread *t = threads.lookup(&tid);

	if (!t) {
		/* Waiting since before ktop looked (threads created since are seen at
		 * sched_wakeup_new): that wait is not counted. */
		count_lost(WAIT_LOST_UNSEEN_START);
		new_thread(tid, PHASE_ON_CPU, now);
		return;
	}
	if (t->phase == PHASE_RUNQ) {
		u64 wait_ns = now > t->since ? now - t->since : 0;
		if (t->tgid) {
			struct wait_proc *p = thread_proc(t, g);
			if (p)
				add_runq(p, wait_ns);
		} else {	/* new, never switched out: added under its name at its first */
			t->runq_ns = wait_ns;
			t->flags |= WAIT_THREAD_RUNQ_PENDING;
		}
	} else if (t->phase == PHASE_WAKING) {	/* its sched_wakeup was missed */
		end_blocked(ctx, t, now, g, true);
	} else if (t->phase == PHASE_BLOCKED) {
		count_lost(WAIT_LOST_NO_WAKEUP);
		end_blocked(ctx, t, now, g, false);
	}
	t->phase = PHASE_ON_CPU;
	t->since = now;
}

int on_sched_switch(struct sched_switch_args *args)
{
	u64 now = bpf_ktime_get_ns();
	u32 g = current_generation();
	u32 prev = args->prev_pid, next = args->next_pid;

	/* pid 0 is each CPU's idle task: never a waiter. */
	if (prev)
		switch_out(args, prev, now, g);
	if (next)
		switch_in(args, next, now, g);
	return PASS_ON;
}

/* In the waker's context: who woke it, and the waker's stack if the wait was long. In an
 * interrupt this is the task it interrupted; user space tells that case by the walked stack
 * (the records' common_flags are written only after BPF programs ran). */
int on_sched_waking(struct sched_wakeup_args *args)
{
	u64 now = bpf_ktime_get_ns();
	u32 tid = args->pid;
	struct wait_thread *t = threads.lookup(&tid);

	if (!t) {
		count_lost(WAIT_LOST_UNSEEN_START);
		new_thread(tid, PHASE_RUNQ, now);
		return PASS_ON;
	}
	if (t->phase != PHASE_BLOCKED)
		return PASS_ON;	/* woken before it left the CPU, or already runnable */
	u32 g = current_generation();
	t->phase = PHASE_WAKING;
	t->waker_pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(&t->waker_comm, sizeof(t->waker_comm));
	t->waker_generation = g;
	t->waker_kstack = now - t->since >= MIN_WALK_NS ? kernel_stack(args, g) : -ENOENT;
	return PASS_ON;
}

/* The woken thread is on a run queue now (on its CPU, maybe from an IPI): its blocked
 * wait ends and its run-queue wait starts, where delay accounting and schedstat's
 * run_delay switch too. */
int on_sched_wakeup(struct sched_wakeup_args *args)
{
	u32 tid = args->pid;
	struct wait_thread *t = threads.lookup(&tid);

	if (!t || t->phase != PHASE_WAKING)
		return PASS_ON;
	u64 now = bpf_ktime_get_ns();
	end_blocked(args, t, now, current_generation(), true);
	t->phase = PHASE_RUNQ;
	t->since = now;
	return PASS_ON;
}

int on_sched_wakeup_new(struct sched_wakeup_args *args)
{
	new_thread(args->pid, PHASE_RUNQ, bpf_ktime_get_ns());
	return PASS_ON;
}
