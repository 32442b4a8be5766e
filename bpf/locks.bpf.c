/* Lock contention: lock:contention_begin/end time each wait in the kernel and add it to
 * aggregates per (kernel stack, lock type), per (lock address, type) and per (task, stacks,
 * type). User space drains one generation of aggregates and stacks while the program fills
 * the other, then clears the drained stack map, so it never fills up.
 *
 * Spinning locks (spinlock, rwlock) never sleep or migrate while they wait, so their begin
 * is kept per CPU; that also times a spinlock taken inside a sleeping lock's slow path (a
 * mutex's wait_lock) on its own. Sleeping locks keep their begin per task.
 *
 * Owners (OWNERS=1): a sleeping lock's begin reads the owner from the lock (mutex->owner;
 * rw_semaphore->owner unless held for read), and the wait is charged to it per (owner,
 * owner's stack, waiter's stack, lock). The owner's kernel stack is taken when it wakes the
 * waiter (sched_waking in the owner's context: the unlock path), since a tracepoint program
 * cannot walk another task's stack. Names (NAMES=1): a begin compares the lock with the
 * waiting task's own objects (its mm's mmap_lock, its sighand's siglock) and, for an rwsem,
 * checks whether it sits in an inode whose own fields agree, keeping the answer per lock
 * address; every CPU records its run queue's address, which user space compares. Offsets
 * of the kernel's structs come from its BTF as -D flags (collectors/locks.py). */
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
#ifndef OWNERS
#define OWNERS 0
#endif
#ifndef NAMES
#define NAMES 0
#endif
#ifndef INODE_PATHS
#define INODE_PATHS 0
#endif
#ifndef OWNER_WAITS_ENTRIES
#define OWNER_WAITS_ENTRIES 4096
#endif
#ifndef LOCK_NAME_ENTRIES
#define LOCK_NAME_ENTRIES 4096
#endif
#ifndef RQ_CPUS
#define RQ_CPUS 256
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
#if OWNERS
BPF_HASH(owner_waits_0, struct lock_owner_key, struct lock_wait, OWNER_WAITS_ENTRIES);
BPF_HASH(owner_waits_1, struct lock_owner_key, struct lock_wait, OWNER_WAITS_ENTRIES);
#endif
#if OWNERS
/* The stack with which an owner last released a lock (seen waking one of its waiters): the
 * waits behind that owner that another task woke take it from here. */
struct release_key {
	u64 lock;
	u64 owner_task;
};
struct release_stack {
	s32 kstack;
	u32 generation;
};
BPF_TABLE("lru_hash", struct release_key, struct release_stack, release_stacks, OWNER_WAITS_ENTRIES);
#endif
#if NAMES
/* Lock address -> what it is; LRU: locks in freed objects age out. */
BPF_TABLE("lru_hash", u64, struct lock_name, lock_names, LOCK_NAME_ENTRIES);
BPF_PERCPU_ARRAY(name_scratch, struct lock_name, 1);
/* Each CPU's struct rq, as its own running task's cfs_rq says. */
BPF_ARRAY(cpu_rqs, u64, RQ_CPUS);
#endif

struct sched_waking_args {
	u64 common;
	char comm[16];
	s32 pid;
	s32 prio;
	s32 target_cpu;
};

static __always_inline u64 read_u64(u64 address)
{
	u64 value = 0;
	if (bpf_probe_read_kernel(&value, sizeof(value), (void *)address))
		return 0;
	return value;
}

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

#if OWNERS
static __always_inline struct lock_wait *
owner_wait_entry(u32 g, struct lock_owner_key *key, struct lock_wait *init)
{
	return g ? owner_waits_1.lookup_or_try_init(key, init) : owner_waits_0.lookup_or_try_init(key, init);
}
#endif

/* Who holds the lock a sleeping wait begins on: perf's get_lock_owner, without CO-RE. */
static __always_inline void read_owner(struct lock_start *start, u64 lock, u32 flags)
{
	start->owner_task = 0;
	start->owner_tid = 0;
	start->owner_tgid = 0;
	start->owner_kstack = LOCK_OWNER_STACK_UNSEEN;
	start->owner_generation = 0;
	__builtin_memset(start->owner_comm, 0, sizeof(start->owner_comm));
#if OWNERS
	u64 owner;
	if (flags & LCB_F_MUTEX) {
		owner = read_u64(lock + MUTEX_OWNER_OFF);
	} else if (flags == LCB_F_READ || flags == LCB_F_WRITE) {
		owner = read_u64(lock + RWSEM_OWNER_OFF);
		if (owner & 1) {	/* RWSEM_READER_OWNED: the field only hints at a reader */
			start->owner_kind = LOCK_OWNER_READERS;
			return;
		}
	} else {
		start->owner_kind = LOCK_OWNER_NONE;
		return;
	}
	owner &= ~7ULL;	/* MUTEX_FLAGS, RWSEM_OWNER_FLAGS_MASK */
	if (!owner) {
		start->owner_kind = LOCK_OWNER_UNKNOWN;
		return;
	}
	start->owner_kind = LOCK_OWNER_TASK;
	start->owner_task = owner;
	bpf_probe_read_kernel(&start->owner_tid, sizeof(u32), (void *)(owner + TASK_PID_OFF));
	bpf_probe_read_kernel(&start->owner_tgid, sizeof(u32), (void *)(owner + TASK_TGID_OFF));
	bpf_probe_read_kernel(&start->owner_comm, sizeof(start->owner_comm),
			      (void *)(owner + TASK_COMM_OFF));
#else
	start->owner_kind = (flags & LCB_F_SPIN) && !(flags & LCB_F_MUTEX) ? LOCK_OWNER_NONE
									     : LOCK_OWNER_UNTRACED;
#endif
}

#if NAMES
/* This CPU's run queue, once: what user space names run-queue locks by. */
static __always_inline void learn_cpu_rq(void)
{
	u32 cpu = bpf_get_smp_processor_id();
	u64 *rq = cpu_rqs.lookup(&cpu);
	if (!rq || *rq)
		return;
	u64 task = bpf_get_current_task();
	u64 cfs_rq = read_u64(task + TASK_SE_CFS_RQ_OFF);
	if (cfs_rq)
		*rq = read_u64(cfs_rq + CFS_RQ_RQ_OFF);
}

/* An rwsem inside an inode: the inode's i_mapping points at its own i_data, whose host is
 * the inode (true of directories and regular files, never of chance memory). */
static __always_inline bool name_inode(struct lock_name *name, u64 lock)
{
	u64 inode = lock - INODE_RWSEM_OFF;
	if (read_u64(inode + INODE_MAPPING_OFF) != inode + INODE_DATA_OFF ||
	    read_u64(inode + INODE_DATA_OFF + MAPPING_HOST_OFF) != inode)
		return false;
	name->kind = LOCK_NAME_INODE_RWSEM;
	name->ino = read_u64(inode + INODE_INO_OFF);
	u64 sb = read_u64(inode + INODE_SB_OFF);
	if (sb)
		bpf_probe_read_kernel(&name->dev, sizeof(u32), (void *)(sb + SB_DEV_OFF));
#if INODE_PATHS
	/* The path through the inode's first dentry, up to its file system's root. */
	u64 first = read_u64(inode + INODE_DENTRY_OFF);
	if (!first)
		return true;
	u64 dentry = first - DENTRY_ALIAS_OFF;
	#pragma unroll
	for (int i = 0; i < LOCK_PATH_DEPTH; i++) {
		u64 text = read_u64(dentry + DENTRY_NAME_OFF);
		if (!text || bpf_probe_read_kernel_str(&name->path[i * LOCK_PATH_NAME], LOCK_PATH_NAME, (void *)text) < 0)
			break;
		name->depth = i + 1;
		u64 parent = read_u64(dentry + DENTRY_PARENT_OFF);
		if (!parent || parent == dentry)
			break;
		dentry = parent;
	}
#endif
	return true;
}

/* What the lock is, looked at once per address and generation; a found name stands until
 * the address is seen as something else. */
static __always_inline void name_lock(u64 lock, u32 flags, u32 g)
{
	learn_cpu_rq();
	struct lock_name *known = lock_names.lookup(&lock);
	if (known && (known->kind != LOCK_NAME_NONE || known->generation == g))
		return;
	u32 zero = 0;
	struct lock_name *name = name_scratch.lookup(&zero);
	if (!name)
		return;
	name->kind = LOCK_NAME_NONE;
	name->pid = 0;
	name->ino = 0;
	name->dev = 0;
	name->depth = 0;
	name->generation = g;
	u64 task = bpf_get_current_task();
	if (flags == LCB_F_READ || flags == LCB_F_WRITE) {
		u64 mm = read_u64(task + TASK_MM_OFF);
		if (mm && lock == mm + MM_MMAP_LOCK_OFF)
			name->kind = LOCK_NAME_MMAP_LOCK;
		else
			name_inode(name, lock);
	} else if ((flags & (LCB_F_SPIN | LCB_F_MUTEX)) == LCB_F_SPIN) {
		u64 sighand = read_u64(task + TASK_SIGHAND_OFF);
		if (sighand && lock == sighand + SIGHAND_SIGLOCK_OFF)
			name->kind = LOCK_NAME_SIGLOCK;
	}
	if (name->kind == LOCK_NAME_MMAP_LOCK || name->kind == LOCK_NAME_SIGLOCK) {
		name->pid = bpf_get_current_pid_tgid() >> 32;
		bpf_get_current_comm(&name->comm, sizeof(name->comm));
	}
	lock_names.update(&lock, name);
}
#endif

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

#if OWNERS
	if (begin->owner_kind != LOCK_OWNER_NONE) {	/* sleeping locks only */
		s32 owner_kstack = begin->owner_kstack;
		if (owner_kstack == LOCK_OWNER_STACK_UNSEEN && begin->owner_kind == LOCK_OWNER_TASK) {
			struct release_key release = {.lock = begin->lock, .owner_task = begin->owner_task};
			struct release_stack *seen = release_stacks.lookup(&release);
			if (seen && seen->generation == g) {
				owner_kstack = seen->kstack;
				begin->owner_generation = g;
			}
		}
		if (owner_kstack >= 0 && begin->owner_generation != g) {
			owner_kstack = LOCK_OWNER_STACK_STALE;
			count_lost(LOCK_LOST_OWNER_STACK_STALE);
		}
		struct lock_owner_key owner_key = {
			.lock = begin->lock,
			.owner_tid = begin->owner_tid,
			.owner_tgid = begin->owner_tgid,
			.owner_kstack = owner_kstack,
			.kstack = kstack,
			.flags = begin->flags,
			.owner_kind = begin->owner_kind,
		};
		__builtin_memcpy(owner_key.owner_comm, begin->owner_comm, sizeof(owner_key.owner_comm));
		struct lock_wait *ow = owner_wait_entry(g, &owner_key, &init->wait);
		if (ow)
			add_wait(ow, wait_ns);
		else
			count_lost(LOCK_LOST_OWNERS_FULL);
	}
#endif

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
			/* A mutex that spun and now sleeps begins again: the first begin stands,
			 * but the owner is the one it sleeps behind (others may have taken the
			 * lock while it spun), whose unlock will wake it. */
			if (start->lock != lock) {
				start->nested++;
				count_lost(LOCK_LOST_NESTED_BEGIN);
			} else if (flags == LCB_F_MUTEX) {
				read_owner(start, lock, flags);
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
	read_owner(start, lock, flags);
#if NAMES
	name_lock(lock, flags, g);
#endif
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

/* The owner of a lock this thread waits for wakes it: the owner's stack then is the unlock
 * path of the section that made it wait. A waker that is not the owner is left alone. */
int on_lock_waking(struct sched_waking_args *args)
{
#if NAMES
	learn_cpu_rq();
#endif
#if OWNERS
	u32 tid = args->pid;
	struct lock_start *start = task_starts.lookup(&tid);
	if (!start || start->owner_kind != LOCK_OWNER_TASK ||
	    start->owner_kstack != LOCK_OWNER_STACK_UNSEEN ||
	    start->owner_task != bpf_get_current_task())
		return PASS_ON;
	u32 g = current_generation();
	s32 kstack = kernel_stack(args, g);
	start->owner_generation = g;
	start->owner_kstack = kstack;
	struct release_key release = {.lock = start->lock, .owner_task = start->owner_task};
	struct release_stack seen = {.kstack = kstack, .generation = g};
	release_stacks.update(&release, &seen);
#endif
	return PASS_ON;
}
