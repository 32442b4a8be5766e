/* Memory: who is stalled by reclaim and compaction, how often, how long, reclaiming how many
 * pages, at which stacks, counted in the kernel from raw tracepoints:
 * vmscan:mm_vmscan_direct_reclaim_begin/end (the page allocator's direct reclaim),
 * vmscan:mm_vmscan_memcg_reclaim_begin/end (a memory cgroup's limit reached),
 * compaction:mm_compaction_begin/end, and kswapd's time awake (mm_vmscan_kswapd_wake/sleep),
 * kept apart: it is nobody's stall.
 *
 * A begin keeps its start in a small hash keyed by (thread, kind); its end adds the stall to
 * a hash keyed by (thread, kind, cgroup, stacks, command). Stalls are rare beside context
 * switches (thousands a second at most, each of tens of us or more), so both stacks are
 * walked at every end: the task is still inside the function that fired the begin (the end
 * tracepoint is in the same function), so its stack names the allocation that stalled. */
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>
#include "memory.h"

#ifndef COUNT_ENTRIES
#define COUNT_ENTRIES 4096
#endif
#ifndef START_ENTRIES
#define START_ENTRIES 4096
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 2048
#endif
#ifndef USER_STACK_ENTRIES
#define USER_STACK_ENTRIES 2048
#endif
#ifndef USER_STACKS
#define USER_STACKS 1
#endif
#define MEM_STACK_DEPTH 48
#define KTOP_PF_KTHREAD 0x00200000	/* include/linux/sched.h */

struct mem_kstack {
	u64 ip[MEM_STACK_DEPTH];
};

BPF_ARRAY(generation, u32, 1);
BPF_HASH(starts, u64, u64, START_ENTRIES);
BPF_HASH(counts_0, struct mem_key, struct mem_stat, COUNT_ENTRIES);
BPF_HASH(counts_1, struct mem_key, struct mem_stat, COUNT_ENTRIES);
BPF_F_TABLE("hash", s64, struct mem_kstack, stacks, STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", s64, struct user_stack, user_stacks, USER_STACK_ENTRIES, BPF_F_NO_PREALLOC);
BPF_PERCPU_ARRAY(lost, u64, MEM_LOST_NR);
BPF_PERCPU_ARRAY(zero_stat, struct mem_stat, 1);
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
	slot = slot < MEM_HIST_SLOTS ? slot : MEM_HIST_SLOTS - 1;
	asm volatile("" : "+r"(slot));	/* keep the mask for the verifier */
	return slot & (MEM_HIST_SLOTS - 1);
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
	key = walked_stack_key(walk, bpf_get_stack(ctx, walk->ip, sizeof(struct mem_kstack), 0),
			       stack_seed(), MEM_STACK_DEPTH);
	if (key < 0 || stacks.lookup(&key))
		return key;
	if (stacks.insert(&key, (struct mem_kstack *)walk) == -E2BIG) {
		count_lost(MEM_LOST_KSTACK_FULL);
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
		count_lost(MEM_LOST_USTACK_FULL);
		return -ENOMEM;
	}
	return key;
}

static __always_inline int stall_begin(u32 kind)
{
	u64 key = (bpf_get_current_pid_tgid() << 2) | kind, now = bpf_ktime_get_ns();

	if (starts.update(&key, &now) != 0)
		count_lost(MEM_LOST_STARTS_FULL);
	return 0;
}

static __always_inline int stall_end(void *ctx, u32 kind, u64 reclaimed)
{
	u64 pid_tgid = bpf_get_current_pid_tgid(), skey = (pid_tgid << 2) | kind;
	u64 *start = starts.lookup(&skey), ns, flags = 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct mem_key key = {};
	struct mem_stat *s, *z;
	u32 zero = 0;

	if (!start) {
		count_lost(MEM_LOST_UNPAIRED_END);
		return 0;
	}
	ns = bpf_ktime_get_ns() - *start;
	starts.delete(&skey);
	bpf_probe_read_kernel(&flags, sizeof(task->flags), &task->flags);
	key.tgid = pid_tgid >> 32;
	key.tid = (u32)pid_tgid;
	key.kind = kind;
	key.flags = (flags & KTOP_PF_KTHREAD) ? MEM_FLAG_KTHREAD : 0;
	key.cgroup = bpf_get_current_cgroup_id();
	if (kind == MEM_KSWAPD) {
		key.kstack = -ENOENT;	/* always the same: kswapd's loop */
		key.ustack = -EFAULT;
	} else {
		key.kstack = kernel_stack(ctx);
		key.ustack = key.flags ? -EFAULT : user_stack(ctx);
	}
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	z = zero_stat.lookup(&zero);
	if (!z)
		return 0;
	s = current_generation() ? counts_1.lookup(&key) : counts_0.lookup(&key);
	if (!s) {
		if ((current_generation() ? counts_1.insert(&key, z) : counts_0.insert(&key, z))
		    == -E2BIG) {
			count_lost(MEM_LOST_COUNTS_FULL);
			return 0;
		}
		s = current_generation() ? counts_1.lookup(&key) : counts_0.lookup(&key);
	}
	if (!s)
		return 0;
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->total_ns, ns);
	__sync_fetch_and_add(&s->reclaimed, reclaimed);
	if (ns > s->max_ns)
		s->max_ns = ns;	/* two ends at once on one key may keep the smaller: rare */
	__sync_fetch_and_add(&s->hist[hist_slot(ns)], 1);
	return 0;
}

int on_direct_reclaim_begin(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_begin(MEM_DIRECT_RECLAIM);
}

int on_direct_reclaim_end(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_end(ctx, MEM_DIRECT_RECLAIM, ctx->args[0]);
}

int on_memcg_reclaim_begin(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_begin(MEM_MEMCG_RECLAIM);
}

int on_memcg_reclaim_end(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_end(ctx, MEM_MEMCG_RECLAIM, ctx->args[0]);
}

int on_compaction_begin(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_begin(MEM_COMPACTION);
}

int on_compaction_end(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_end(ctx, MEM_COMPACTION, 0);
}

int on_kswapd_wake(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_begin(MEM_KSWAPD);
}

int on_kswapd_sleep(struct bpf_raw_tracepoint_args *ctx)
{
	return stall_end(ctx, MEM_KSWAPD, 0);
}
