/* Hot kernel functions: a cpu-clock perf event on every CPU counts samples in the kernel by
 * (pid, cgroup, kernel stack, user stack). User space drains one generation of maps while the
 * program fills the other; stack maps are emptied by user space once crowded (maps.py). */
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
#define USER_STACK_ENTRIES 8192
#endif

BPF_ARRAY(generation, u32, 1);
BPF_HASH(counts_0, struct cpu_key, u64, COUNTS_ENTRIES);
BPF_HASH(counts_1, struct cpu_key, u64, COUNTS_ENTRIES);
/* Kernel and user stacks in separate maps: a stack map returns -EEXIST when a new stack
 * hashes to an occupied bucket, so sharing one map doubles the losses. */
BPF_STACK_TRACE(stacks_0, STACK_ENTRIES);
BPF_STACK_TRACE(stacks_1, STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct user_stack, user_stacks_0, USER_STACK_ENTRIES);
BPF_TABLE("stacktrace", int, struct user_stack, user_stacks_1, USER_STACK_ENTRIES);
BPF_PERCPU_ARRAY(lost, u64, CPU_LOST_NR);

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
	if (g == 0) {
		key.kstack = stacks_0.get_stackid(ctx, 0);
		key.ustack = key.pid ? user_stacks_0.get_stackid(ctx, BPF_F_USER_STACK) : -EFAULT;
	} else {
		key.kstack = stacks_1.get_stackid(ctx, 0);
		key.ustack = key.pid ? user_stacks_1.get_stackid(ctx, BPF_F_USER_STACK) : -EFAULT;
	}
	count_lost(stack_loss(key.kstack, CPU_LOST_KSTACK_COLLISION, CPU_LOST_KSTACK_FULL));
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
