/* Syscalls: which calls each thread makes, how often, failing how, how slow, counted in the
 * kernel from the raw tracepoints sys_enter and sys_exit (and sched_switch, for where a slow
 * call blocked).
 *
 * raw_syscalls fires on every call, 10^6 times a second in a storm, so: the call's start
 * is kept in the thread's task storage (no hash of a thread id, no insert or delete a
 * call), and each exit does one per-CPU hash update of (thread, number, errno, cgroup,
 * command). Stacks are walked only for slow calls (at least SLOW_NS): the user stack at the
 * exit (the call site), the kernel stack where the call first went to sleep, at that
 * switch-out, when the thread's last call that slept was slow too (a call's length is known
 * only at its exit, when where it slept is gone). A slow call that slept and was predicted
 * short is counted without its kernel stack (SC_LOST_SLOW_UNWALKED).
 *
 * The 32-bit compat table is told apart by TS_COMPAT in the thread's thread_info.status,
 * what the kernel's own in_ia32_syscall() reads, set on a 32-bit entry and cleared only on
 * the return to user space (so still set at sys_exit); x32 calls by their number's
 * __X32_SYSCALL_BIT. */
#include <uapi/linux/ptrace.h>
#include "syscalls.h"

#ifndef COUNT_ENTRIES
#define COUNT_ENTRIES 8192
#endif
#ifndef SLOW_ENTRIES
#define SLOW_ENTRIES 2048
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 2048
#endif
#ifndef USER_STACK_ENTRIES
#define USER_STACK_ENTRIES 2048
#endif
#ifndef SLOW_NS
#define SLOW_NS 1000000ULL
#endif
#ifndef USER_STACKS
#define USER_STACKS 1
#endif
#define SC_STACK_DEPTH 48
#define TS_COMPAT_BIT 0x0002		/* arch/x86/include/asm/thread_info.h */
#define X32_SYSCALL_BIT 0x40000000

struct sc_kstack {
	u64 ip[SC_STACK_DEPTH];
};

BPF_ARRAY(generation, u32, 1);
BPF_TASK_STORAGE(threads, struct sc_thread);
BPF_PERCPU_HASH(counts_0, struct sc_key, struct sc_stat, COUNT_ENTRIES);
BPF_PERCPU_HASH(counts_1, struct sc_key, struct sc_stat, COUNT_ENTRIES);
BPF_HASH(slow_0, struct sc_slow_key, struct sc_stat, SLOW_ENTRIES);
BPF_HASH(slow_1, struct sc_slow_key, struct sc_stat, SLOW_ENTRIES);
/* Stacks keyed by a hash of their frames (ktop.h), read and emptied by user space. */
BPF_F_TABLE("hash", s64, struct sc_kstack, stacks, STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", s64, struct user_stack, user_stacks, USER_STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_PERCPU_ARRAY(lost, u64, SC_LOST_NR);
BPF_PERCPU_ARRAY(zero_stat, struct sc_stat, 1);
BPF_PERCPU_ARRAY(stack_walk, struct stack_walk, 1);
BPF_ARRAY(hash_seed, u64, 1);

static __always_inline void count_lost(int reason)
{
	u64 *n = lost.lookup(&reason);
	if (n)
		*n += 1;
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

static __always_inline u32 hist_slot(u64 ns)
{
	u32 slot = log2_floor(ns);
	slot = slot < SC_HIST_SLOTS ? slot : SC_HIST_SLOTS - 1;
	asm volatile("" : "+r"(slot));	/* keep the mask for the verifier */
	return slot & (SC_HIST_SLOTS - 1);
}

static __always_inline u64 stack_seed(void)
{
	u32 zero = 0;
	u64 *seed = hash_seed.lookup(&zero);
	return seed ? *seed : 0;
}

static __always_inline s64 kernel_stack(void *ctx)
{
	u32 zero = 0;
	struct stack_walk *walk = stack_walk.lookup(&zero);
	s64 key;

	if (!walk)
		return -ENOMEM;
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct sc_kstack), 0),
			       stack_seed(), SC_STACK_DEPTH);
	if (key < 0 || stacks.lookup(&key))
		return key;
	if (stacks.insert(&key, (struct sc_kstack *)walk) == -E2BIG) {
		count_lost(SC_LOST_KSTACK_FULL);
		return -ENOMEM;
	}
	return key;
}

static __always_inline s64 user_stack(void *ctx)
{
	u32 zero = 0;
	struct stack_walk *walk;
	s64 key;

	if (!USER_STACKS)
		return -EFAULT;
	walk = stack_walk.lookup(&zero);
	if (!walk)
		return -ENOMEM;
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct user_stack),
						   BPF_F_USER_STACK),
			       stack_seed(), KTOP_USER_STACK_DEPTH);
	if (key < 0 || user_stacks.lookup(&key))
		return key;
	if (user_stacks.insert(&key, (struct user_stack *)walk) == -E2BIG) {
		count_lost(SC_LOST_USTACK_FULL);
		return -ENOMEM;
	}
	return key;
}

static __always_inline void add_call(struct sc_stat *s, u64 ns)
{
	s->count += 1;
	s->total_ns += ns;
	if (ns > s->max_ns)
		s->max_ns = ns;
	s->hist[hist_slot(ns)] += 1;
}

static __always_inline void add_call_atomic(struct sc_stat *s, u64 ns)
{
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->total_ns, ns);
	if (ns > s->max_ns)
		s->max_ns = ns;	/* a race may keep the smaller of two at once: slow calls are rare */
	__sync_fetch_and_add(&s->hist[hist_slot(ns)], 1);
}

int sc_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	struct sc_thread *t = threads.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	u64 nr = ctx->args[1];
	u16 abi = SC_ABI_X64;

	if (!t) {
		count_lost(SC_LOST_NO_STORAGE);
		return 0;
	}
#ifdef TASK_TI_STATUS
	{
		u32 status = 0;
		bpf_probe_read_kernel(&status, sizeof(status),
				      (const void *)(bpf_get_current_task() + TASK_TI_STATUS));
		if (status & TS_COMPAT_BIT)
			abi = SC_ABI_IA32;
	}
#endif
	if (abi == SC_ABI_X64 && (nr & X32_SYSCALL_BIT)) {
		abi = SC_ABI_X32;
		nr &= ~(u64)X32_SYSCALL_BIT;
	}
	t->nr = (u32)nr;
	t->abi = abi;
	t->kstack = -ENOENT;
	t->flags &= ~SC_THREAD_BLOCKED;
	t->start_ns = bpf_ktime_get_ns();
	return 0;
}

int sc_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	struct sc_thread *t = threads.task_storage_get(task, 0, 0);
	u64 now = bpf_ktime_get_ns(), pid_tgid = bpf_get_current_pid_tgid(), ns;
	long ret = (long)ctx->args[1];
	struct sc_key key = {};
	struct sc_stat *s;
	u32 zero = 0;

	if (!t || !t->start_ns) {
		count_lost(SC_LOST_UNPAIRED_EXIT);
		return 0;
	}
	ns = now - t->start_ns;
	t->start_ns = 0;
	key.tid = (u32)pid_tgid;
	key.nr = t->nr;
	key.abi = t->abi;
	key.err = ret < 0 && ret >= -4095 ? (u16)-ret : 0;

	if (t->flags & SC_THREAD_BLOCKED) {
		t->last_blocked_ns = ns;
		t->flags |= SC_THREAD_SEEN_BLOCK;
	}
	if (ns >= SLOW_NS) {
		struct sc_slow_key slow = {};
		struct sc_stat *z, *v;

		slow.tgid = pid_tgid >> 32;
		slow.tid = key.tid;
		slow.nr = key.nr;
		slow.abi = key.abi;
		slow.err = key.err;
		slow.kstack = t->kstack;
		slow.ustack = slow.tgid ? user_stack(ctx) : -EFAULT;
		slow.cgroup = bpf_get_current_cgroup_id();
		bpf_get_current_comm(&slow.comm, sizeof(slow.comm));
		if ((t->flags & SC_THREAD_BLOCKED) && t->kstack == -ENOENT)
			count_lost(SC_LOST_SLOW_UNWALKED);
		z = zero_stat.lookup(&zero);
		if (z) {
			v = current_generation() ? slow_1.lookup(&slow) : slow_0.lookup(&slow);
			if (!v) {
				if ((current_generation() ? slow_1.insert(&slow, z) : slow_0.insert(&slow, z))
				    == -E2BIG)
					count_lost(SC_LOST_SLOW_FULL);
				v = current_generation() ? slow_1.lookup(&slow) : slow_0.lookup(&slow);
			}
			if (v)
				add_call_atomic(v, ns);
		}
	}

	if (current_generation()) {
		s = counts_1.lookup(&key);
		if (!s) {
			struct sc_stat *z = zero_stat.lookup(&zero);
			if (!z)
				return 0;
			if (counts_1.insert(&key, z) == -E2BIG) {
				count_lost(SC_LOST_COUNTS_FULL);
				return 0;
			}
			s = counts_1.lookup(&key);
		}
	} else {
		s = counts_0.lookup(&key);
		if (!s) {
			struct sc_stat *z = zero_stat.lookup(&zero);
			if (!z)
				return 0;
			if (counts_0.insert(&key, z) == -E2BIG) {
				count_lost(SC_LOST_COUNTS_FULL);
				return 0;
			}
			s = counts_0.lookup(&key);
		}
	}
	if (!s)
		return 0;
	if (!s->count) {	/* a new entry (on this CPU): whose it is */
		s->tgid = pid_tgid >> 32;
		s->cgroup = bpf_get_current_cgroup_id();
		bpf_get_current_comm(&s->comm, sizeof(s->comm));
	}
	add_call(s, ns);
	return 0;
}

/* A thread going to sleep inside a call: walk its kernel stack there, once a call, when its
 * last call that slept was slow (or it has none yet). */
int sc_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task;
	struct sc_thread *t;

	if ((ctx->args[0] & 1) || ctx->args[3] == 0)	/* preempted, or yielded runnable */
		return 0;
	task = (struct task_struct *)bpf_get_current_task_btf();
	t = threads.task_storage_get(task, 0, 0);
	if (!t || !t->start_ns || (t->flags & SC_THREAD_BLOCKED))
		return 0;
	t->flags |= SC_THREAD_BLOCKED;
	if ((t->flags & SC_THREAD_SEEN_BLOCK) && t->last_blocked_ns < SLOW_NS)
		return 0;
	t->kstack = kernel_stack(ctx);
	return 0;
}
