/* Hot kernel functions: a cpu-clock perf event on every CPU counts samples in the kernel by
 * (pid, cgroup, kernel stack, user stack). User space drains one generation of maps while the
 * program fills the other, stacks included (collectors/cpu.py). */
#include <uapi/linux/ptrace.h>
#include "ktop.h"

/* Only a pointer to the context is passed on: its full type (uapi/linux/bpf_perf_event.h)
 * would pull in the kernel's ptrace.h and cost 0.9 s of clang time at every start. */
struct bpf_perf_event_data;

#ifndef COUNTS_ENTRIES
#define COUNTS_ENTRIES 16384
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 16384
#endif
#ifndef USER_STACK_ENTRIES
#define USER_STACK_ENTRIES 16384
#endif
#ifndef IDLE_STACK_ENTRIES
#define IDLE_STACK_ENTRIES 1024
#endif

BPF_ARRAY(generation, u32, 1);
/* Maps of one interval are allocated as entries come (no preallocation): their sizes bound
 * a burst, not the memory held while idle. */
BPF_F_TABLE("hash", struct cpu_key, u64, counts_0, COUNTS_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct cpu_key, u64, counts_1, COUNTS_ENTRIES, BPF_F_NO_PREALLOC);
/* Stacks keyed by a hash of their frames, not kept in stack maps: a stack map loses a new
 * stack whose bucket another holds (-EEXIST) until user space empties it, and under process
 * churn distinct stacks never stop coming. A hash map has no such loss, and a stack keeps
 * its key across intervals, so user space reads each new stack once. Each generation holds
 * the stacks of its own interval: user space empties it after each drain. */
BPF_F_TABLE("hash", s64, struct kernel_stack, stacks_0, STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", s64, struct kernel_stack, stacks_1, STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", s64, struct user_stack, user_stacks_0, USER_STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", s64, struct user_stack, user_stacks_1, USER_STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_PERCPU_ARRAY(lost, u64, CPU_LOST_NR);
BPF_PERCPU_ARRAY(stack_walk, struct stack_walk, 1);
BPF_ARRAY(hash_seed, u64, 1);	/* frames_hash's seed (ktop.h) */

static __always_inline u64 stack_seed(void)
{
	u32 zero = 0;
	u64 *seed = hash_seed.lookup(&zero);
	return seed ? *seed : 0;
}

/* Returns the kernel stack's key, or -errno: -EFAULT for a sample in user mode (no kernel
 * frames), -E2BIG when the generation's map is full. */
static __always_inline s64 kernel_stack_key(struct bpf_perf_event_data *ctx, u32 g)
{
	u32 zero = 0;
	struct stack_walk *walk = stack_walk.lookup(&zero);
	s64 key;

	if (!walk)
		return -ENOMEM;
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct kernel_stack), 0),
			       stack_seed(), KTOP_KERNEL_STACK_DEPTH);
	if (key < 0)
		return key;
	if (g ? stacks_1.lookup(&key) : stacks_0.lookup(&key))
		return key;
	if ((g ? stacks_1.insert(&key, (struct kernel_stack *)walk)
	     : stacks_0.insert(&key, (struct kernel_stack *)walk)) == -E2BIG)
		return -ENOMEM;
	return key;
}

static __always_inline s64 user_stack_key(struct bpf_perf_event_data *ctx, u32 g)
{
	u32 zero = 0;
	struct stack_walk *walk = stack_walk.lookup(&zero);
	s64 key;

	if (!walk)
		return -ENOMEM;
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct user_stack),
						   BPF_F_USER_STACK),
			       stack_seed(), KTOP_USER_STACK_DEPTH);
	if (key < 0)
		return key;
	if (g ? user_stacks_1.lookup(&key) : user_stacks_0.lookup(&key))
		return key;
	if ((g ? user_stacks_1.insert(&key, (struct user_stack *)walk)
	     : user_stacks_0.insert(&key, (struct user_stack *)walk)) == -E2BIG)
		return -ENOMEM;
	return key;
}

/* ktop's own processes (user space writes them): ktop's, and its BPF compiler's while it
 * runs (0: none). Their user stacks are not walked. Each sample of the Python interpreter
 * is a stack never seen before, and at 4000 Hz they were 60% of the new stacks each second,
 * every one read and named in user space: watching itself made ktop's cost grow with the
 * rate. The compiler's are clang's, in a 100 MiB libLLVM whose symbols took 0.25 s to read,
 * in the refresh that would show the first hot function. Samples and kernel stacks are
 * kept. */
#define OWN_PIDS_NR 2
BPF_ARRAY(own_pids, u32, OWN_PIDS_NR);

static __always_inline bool is_own(u32 pid)
{
	for (u32 i = 0; i < OWN_PIDS_NR; i++) {
		u32 *own = own_pids.lookup(&i);
		if (own && *own == pid)
			return true;
	}
	return false;
}

/* The idle task idling is most samples of an idle machine, and a kernel stack walk costs
 * 18-28 us a sample on these VMs. Its stack is walked once per (CPU, instruction, stack
 * pointer) and interval, and the key reused: in the idle loop, the same instruction at the
 * same depth is the same call path (an interrupt is not cached: its instruction is no idle
 * code). User space writes the idle code's ranges (the functions the aggregator calls idle)
 * and empties a generation's cache with its stack maps, after each drain. */
#define IDLE_RANGES 16
struct idle_code {
	u64 start[IDLE_RANGES];
	u64 end[IDLE_RANGES];
};
struct idle_at {
	u64 ip;
	u64 sp;
	u32 cpu;
	u32 pad;
};
BPF_ARRAY(idle_code, struct idle_code, 1);
BPF_HASH(idle_stacks_0, struct idle_at, s64, IDLE_STACK_ENTRIES);
BPF_HASH(idle_stacks_1, struct idle_at, s64, IDLE_STACK_ENTRIES);

static __always_inline bool in_idle_code(u64 ip)
{
	u32 zero = 0;
	struct idle_code *code = idle_code.lookup(&zero);

	if (!code)
		return false;
#pragma unroll
	for (int i = 0; i < IDLE_RANGES; i++)
		if (ip >= code->start[i] && ip < code->end[i])
			return true;
	return false;
}

/* The idle task's kernel stack key: cached while idling, else walked. */
static __always_inline s64 idle_task_stack(struct bpf_perf_event_data *ctx, u32 g)
{
	struct pt_regs *regs = (struct pt_regs *)ctx;
	struct idle_at at = {};
	s64 *cached, key;

	at.ip = PT_REGS_IP(regs);
	if (!in_idle_code(at.ip))
		return kernel_stack_key(ctx, g);
	at.sp = PT_REGS_SP(regs);
	at.cpu = bpf_get_smp_processor_id();
	cached = g ? idle_stacks_1.lookup(&at) : idle_stacks_0.lookup(&at);
	if (cached)
		return *cached;
	key = kernel_stack_key(ctx, g);
	if (key >= 0) {  /* a full cache only means walking again */
		if (g)
			idle_stacks_1.update(&at, &key);
		else
			idle_stacks_0.update(&at, &key);
	}
	return key;
}

static __always_inline void count_lost(int reason)
{
	u64 *n = lost.lookup(&reason);
	if (n)
		(*n)++;
}

int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	u32 zero = 0, *gen = generation.lookup(&zero);
	u32 g = gen ? *gen : 0;
	struct cpu_key key = {};

	key.pid = bpf_get_current_pid_tgid() >> 32;
	key.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	if (key.pid == 0) {  /* the idle task: no user stack */
		key.kstack = idle_task_stack(ctx, g);
		key.ustack = -EFAULT;
	} else {
		key.kstack = kernel_stack_key(ctx, g);
		key.ustack = is_own(key.pid) ? -ENOENT : user_stack_key(ctx, g);
	}
	if (key.kstack < 0)
		count_lost(stack_loss(key.kstack, CPU_LOST_KSTACK_COLLISION, CPU_LOST_KSTACK_FULL));
	if (key.ustack < 0)
		count_lost(stack_loss(key.ustack, CPU_LOST_USTACK_COLLISION, CPU_LOST_USTACK_FULL));
	/* Written out per map: bcc rewrites map references only in method-call form. */
	u64 none = 0, *n;
	n = g ? counts_1.lookup_or_try_init(&key, &none) : counts_0.lookup_or_try_init(&key, &none);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		count_lost(CPU_LOST_COUNTS_FULL);
	return 0;
}
