/* Lock contention: lock:contention_begin/end time each wait in the kernel and add it to
 * aggregates per (kernel stack, lock type), per (lock address, type) and per (task, stacks,
 * type). User space drains one generation of aggregates and stacks while the program fills
 * the other, then clears the drained stack map, so it never fills up.
 *
 * Spinning locks (spinlock, rwlock) never sleep or migrate while they wait, so their begin
 * is kept per CPU; that also times a spinlock taken inside a sleeping lock's slow path (a
 * mutex's wait_lock) on its own. Sleeping locks keep their begin per task. */
#include <uapi/linux/ptrace.h>
#include "ktop.h"

#ifndef STACK_WAITS_ENTRIES
#define STACK_WAITS_ENTRIES 4096
#endif
#ifndef LOCK_WAITS_ENTRIES
#define LOCK_WAITS_ENTRIES 4096
#endif
#ifndef TASK_WAITS_ENTRIES
#define TASK_WAITS_ENTRIES 8192
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 16384
#endif
#ifndef USER_STACK_ENTRIES
#define USER_STACK_ENTRIES 8192
#endif
#ifndef START_ENTRIES
#define START_ENTRIES 16384
#endif
#ifndef USER_STACKS
#define USER_STACKS 1
#endif
/* What a tracepoint program returns decides whether the kernel hands the event on to the
 * tracepoint's other perf users: 0 would blind a `perf lock record` running beside ktop. */
#ifndef PASS_ON
#define PASS_ON 1
#endif
#define compiler_barrier() asm volatile("" ::: "memory")
/* A spinning wait this long means its end was missed (soft lockups are reported at 20 s). */
#define STALE_SPIN_NS (30ULL * 1000000000ULL)

struct lock_stack {
	u64 ip[LOCK_STACK_DEPTH];
};

BPF_ARRAY(generation, u32, 1);
/* Initial values of a new aggregate, written by user space: min_ns starts at U64_MAX. */
BPF_ARRAY(wait_template, struct lock_stack_wait, 1);
BPF_HASH(task_starts, u32, struct lock_start, START_ENTRIES);
BPF_PERCPU_ARRAY(cpu_starts, struct lock_start, 1);
BPF_HASH(stack_waits_0, struct lock_stack_key, struct lock_stack_wait, STACK_WAITS_ENTRIES);
BPF_HASH(stack_waits_1, struct lock_stack_key, struct lock_stack_wait, STACK_WAITS_ENTRIES);
BPF_HASH(lock_waits_0, struct lock_addr_key, struct lock_wait, LOCK_WAITS_ENTRIES);
BPF_HASH(lock_waits_1, struct lock_addr_key, struct lock_wait, LOCK_WAITS_ENTRIES);
BPF_HASH(task_waits_0, struct lock_task_key, struct lock_wait, TASK_WAITS_ENTRIES);
BPF_HASH(task_waits_1, struct lock_task_key, struct lock_wait, TASK_WAITS_ENTRIES);
BPF_TABLE("stacktrace", int, struct lock_stack, stacks_0, STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct lock_stack, stacks_1, STACK_ENTRIES);
/* User stacks apart: a stack map refuses a new stack whose bucket is taken (-EEXIST), so
 * sharing one map would double the losses. */
BPF_TABLE("stacktrace", int, struct user_stack, user_stacks_0, USER_STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct user_stack, user_stacks_1, USER_STACK_ENTRIES);
BPF_PERCPU_ARRAY(lost, u64, LOCK_LOST_NR);

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

/* Written out per map: bcc rewrites map references only in method-call form. */
static __always_inline s32 kernel_stack(void *ctx, u32 g)
{
	s32 id = g ? stacks_1.get_stackid(ctx, 0) : stacks_0.get_stackid(ctx, 0);
	/* Two stacks whose hashes share a bucket collide in every interval, and the loser's
	 * waits would all go without a stack: store it again without its innermost frame (a
	 * lock function; the caller is further out), which hashes to another bucket. */
	if (id == -EEXIST)
		id = g ? stacks_1.get_stackid(ctx, 1) : stacks_0.get_stackid(ctx, 1);
	count_lost(stack_loss(id, LOCK_LOST_KSTACK_COLLISION, LOCK_LOST_KSTACK_FULL));
	return id;
}

static __always_inline s32 user_stack(void *ctx, u32 g, u32 tgid)
{
	if (!USER_STACKS || !tgid)
		return -EFAULT;
	s32 id = g ? user_stacks_1.get_stackid(ctx, BPF_F_USER_STACK)
		   : user_stacks_0.get_stackid(ctx, BPF_F_USER_STACK);
	if (id == -EEXIST)	/* as for kernel stacks: without the innermost frame */
		id = g ? user_stacks_1.get_stackid(ctx, BPF_F_USER_STACK | 1)
		       : user_stacks_0.get_stackid(ctx, BPF_F_USER_STACK | 1);
	count_lost(stack_loss(id, LOCK_LOST_USTACK_COLLISION, LOCK_LOST_USTACK_FULL));
	return id;
}

/* floor(log2(v)), 0 for v <= 1 */
static __always_inline u32 log2_slot(u64 v)
{
	u32 r, shift;

	r = (v > 0xFFFFFFFFULL) << 5; v >>= r;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r < LOCK_HIST_SLOTS ? r : LOCK_HIST_SLOTS - 1;
}

/* Racy max/min as perf's lock_contention.bpf.c has them: a lost update needs two CPUs
 * finishing waits with the same key in the same instant. */
static __always_inline void add_wait(struct lock_wait *w, u64 wait_ns)
{
	__sync_fetch_and_add(&w->count, 1);
	__sync_fetch_and_add(&w->total_ns, wait_ns);
	if (wait_ns > w->max_ns)
		w->max_ns = wait_ns;
	if (wait_ns < w->min_ns)
		w->min_ns = wait_ns;
}

static __always_inline struct lock_stack_wait *
stack_wait_entry(u32 g, struct lock_stack_key *key, struct lock_stack_wait *init)
{
	return g ? stack_waits_1.lookup_or_try_init(key, init) : stack_waits_0.lookup_or_try_init(key, init);
}

static __always_inline struct lock_wait *
lock_wait_entry(u32 g, struct lock_addr_key *key, struct lock_wait *init)
{
	return g ? lock_waits_1.lookup_or_try_init(key, init) : lock_waits_0.lookup_or_try_init(key, init);
}

static __always_inline struct lock_wait *
task_wait_entry(u32 g, struct lock_task_key *key, struct lock_wait *init)
{
	return g ? task_waits_1.lookup_or_try_init(key, init) : task_waits_0.lookup_or_try_init(key, init);
}

static __always_inline void account(void *ctx, struct lock_start *begin, u64 wait_ns)
{
	u32 zero = 0, g = current_generation();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	s32 kstack = begin->kstack, ustack = begin->ustack;
	struct lock_stack_wait *init = wait_template.lookup(&zero);

	if (!init)
		return;
	/* The wait outlived a drain: its stack ids point into the map being cleared. The call
	 * path is the same now, only the lock function's own offset differs. */
	if (begin->generation != g) {
		kstack = kernel_stack(ctx, g);
		ustack = user_stack(ctx, g, pid_tgid >> 32);
	}

	struct lock_stack_key stack_key = {.kstack = kstack, .flags = begin->flags};
	struct lock_stack_wait *sw = stack_wait_entry(g, &stack_key, init);
	if (sw) {
		add_wait(&sw->wait, wait_ns);
		u32 slot = log2_slot(wait_ns);
		if (slot < LOCK_HIST_SLOTS)
			__sync_fetch_and_add(&sw->hist[slot], 1);
	} else {
		count_lost(LOCK_LOST_STACKS_FULL);
	}

	struct lock_addr_key addr_key = {.lock = begin->lock, .flags = begin->flags};
	struct lock_wait *lw = lock_wait_entry(g, &addr_key, &init->wait);
	if (lw)
		add_wait(lw, wait_ns);
	else
		count_lost(LOCK_LOST_LOCKS_FULL);

	struct lock_task_key task_key = {
		.tid = (u32)pid_tgid,
		.tgid = pid_tgid >> 32,
		.kstack = kstack,
		.ustack = ustack,
		.flags = begin->flags,
		.cgroup = bpf_get_current_cgroup_id(),
	};
	bpf_get_current_comm(&task_key.comm, sizeof(task_key.comm));
	struct lock_wait *tw = task_wait_entry(g, &task_key, &init->wait);
	if (tw)
		add_wait(tw, wait_ns);
	else
		count_lost(LOCK_LOST_TASKS_FULL);
}

int on_contention_begin(struct contention_begin_args *args)
{
	u64 now = bpf_ktime_get_boot_ns();
	u64 lock = args->lock_addr;
	u32 flags = args->flags;
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 zero = 0, tid = (u32)pid_tgid;
	struct lock_start *start;

	if ((flags & (LCB_F_SPIN | LCB_F_MUTEX)) == LCB_F_SPIN) {
		start = cpu_starts.lookup(&zero);
		if (!start)
			return PASS_ON;
		if (start->lock) {
			/* An interrupt contending while this CPU already spins: keep the outer. */
			if (now - start->time_ns < STALE_SPIN_NS) {
				start->nested++;
				count_lost(LOCK_LOST_NESTED_BEGIN);
				return PASS_ON;
			}
			count_lost(LOCK_LOST_STALE_SPIN);
		}
	} else {
		start = task_starts.lookup(&tid);
		if (start) {
			/* A mutex that spun and now sleeps begins again: the first begin stands. */
			if (start->lock != lock) {
				start->nested++;
				count_lost(LOCK_LOST_NESTED_BEGIN);
			}
			return PASS_ON;
		}
		struct lock_start empty = {};
		task_starts.insert(&tid, &empty);
		start = task_starts.lookup(&tid);
		if (!start) {
			count_lost(LOCK_LOST_START_FULL);
			return PASS_ON;
		}
	}

	/* Claim the slot before the slow stack walks: an interrupt that contends meanwhile on
	 * this CPU then counts as nested, instead of overwriting half of this record. */
	start->time_ns = now;
	start->nested = 0;
	start->lock = lock;
	compiler_barrier();
	u32 g = current_generation();
	start->generation = g;
	start->flags = flags;
	start->kstack = kernel_stack(args, g);
	start->ustack = user_stack(args, g, pid_tgid >> 32);
	/* After the stack walks, so their cost is not reported as time waiting for the lock. */
	start->time_ns = bpf_ktime_get_boot_ns();
	return PASS_ON;
}

int on_contention_end(struct contention_end_args *args)
{
	u64 now = bpf_ktime_get_boot_ns();
	u64 lock = args->lock_addr;
	u32 zero = 0, tid = 0;
	struct lock_start *start = cpu_starts.lookup(&zero);
	/* A CPU spinning on a lock cannot be ending a sleeping lock's wait at the same time. */
	bool per_cpu = start && start->lock;

	if (!per_cpu) {
		tid = (u32)bpf_get_current_pid_tgid();
		start = task_starts.lookup(&tid);
		if (!start) {
			count_lost(LOCK_LOST_UNPAIRED_END);
			return PASS_ON;
		}
	}
	if (start->lock != lock) {
		if (start->nested)
			start->nested--;	/* the end of a begin nested in this wait */
		else
			count_lost(LOCK_LOST_UNPAIRED_END);
		return PASS_ON;
	}

	/* Copied before the slot is freed: a deleted hash element may be reused at once. */
	struct lock_start begin = *start;
	if (per_cpu)
		start->lock = 0;
	else
		task_starts.delete(&tid);
	account(args, &begin, now > begin.time_ns ? now - begin.time_ns : 0);
	return PASS_ON;
}
