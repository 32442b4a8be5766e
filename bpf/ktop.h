/* Structs and constants shared by ktop's BPF programs and ktop/collectors/ (which mirror them
 * with ctypes). Keep the two in step: the Python side asserts the sizes. */
#ifndef KTOP_H
#define KTOP_H

#define KTOP_COMM_LEN 16
#define KTOP_USER_STACK_DEPTH 64
#define KTOP_KERNEL_STACK_DEPTH 127	/* PERF_MAX_STACK_DEPTH */

/* User stacks are kept shallower than kernel ones: they only serve the drill-downs, and it
 * halves their memory. */
struct user_stack {
	u64 ip[KTOP_USER_STACK_DEPTH];
};

/* The loss reason for bpf_get_stackid's result: -EEXIST a collision (the bucket holds
 * another stack), -ENOMEM a full map; -1 for none. Each program counts it with its own
 * count_lost (bcc rewrites map calls only in a program's own file, so that one helper
 * cannot live here): an index out of the `lost` array's range is counted nowhere. */
static __always_inline int stack_loss(int stack_id, int collision, int full)
{
	return stack_id == -EEXIST ? collision : stack_id == -ENOMEM ? full : -1;
}

/* Stacks keyed by a hash of their frames (cpu.bpf.c, waits.bpf.c): a stack is walked into a
 * per-CPU `struct stack_walk` (too big for the BPF stack) and kept in a hash map under
 * walked_stack_key's key, looked up and inserted by each program in its own file (bcc
 * rewrites map calls only there). The seed is random, written by user space, so that no
 * process can choose frames that hash alike. */
#define WALK_SLOTS 128	/* a power of two above either depth: an index masked stays inside */
struct stack_walk {
	u64 ip[WALK_SLOTS];
};

/* A 63-bit hash of the first `depth` frames (a key is >= 0; an error is -errno). */
static __always_inline s64 frames_hash(u64 seed, const u64 *ip, u32 depth, u32 max_depth)
{
	u64 h = seed ^ depth;

	for (u32 i = 0; i < max_depth; i++) {
		if (i >= depth)
			break;
		/* Masked out of clang's sight: it folds the two bounds into one count, and walks
		 * a pointer the verifier cannot bound. */
		u32 slot = i;
		asm volatile("" : "+r"(slot));
		h = (h ^ ip[slot & (WALK_SLOTS - 1)]) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 31;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (s64)(h >> 1);
}

/* The key of the stack bpf_get_stack just walked into `walk` (`bytes`: what it returned),
 * or -errno (-EFAULT: no frames). The frames are ended with a 0 for readers: past it lie
 * an older walk's. */
static __always_inline s64 walked_stack_key(struct stack_walk *walk, long bytes, u64 seed,
					    u32 max_depth)
{
	u32 depth;

	if (bytes < 0)
		return bytes;
	depth = (u32)bytes >> 3;
	if (depth == 0)
		return -EFAULT;
	walk->ip[depth & (WALK_SLOTS - 1)] = 0;
	return frames_hash(seed, walk->ip, depth, max_depth);
}

/* ---- cpu.bpf.c: perf_event sampling ------------------------------------------------- */

struct kernel_stack {
	u64 ip[KTOP_KERNEL_STACK_DEPTH];
};

/* One counter per (process, kernel stack, user stack). */
struct cpu_key {
	u32 pid;			/* tgid; 0 is the idle task */
	u32 pad;
	s64 kstack;			/* kernel stack's key (a hash of its frames), or -errno
				   (-EFAULT: sampled in user mode) */
	s64 ustack;			/* user stack's key, or -errno (kernel threads have none;
				   -ENOENT: ktop's own, not walked) */
	u64 cgroup;			/* bpf_get_current_cgroup_id(): the task's cgroup v2 */
	char comm[KTOP_COMM_LEN];
};

/* Index into the `lost` per-CPU array: every sample that could not be counted whole. */
enum cpu_lost {
	CPU_LOST_KSTACK_COLLISION,	/* stack map bucket held another stack (-EEXIST): no
					   longer happens (stacks are hash map entries), kept so
					   that the names stay in order */
	CPU_LOST_KSTACK_FULL,		/* stack map out of room (-ENOMEM) */
	CPU_LOST_USTACK_COLLISION,
	CPU_LOST_USTACK_FULL,
	CPU_LOST_COUNTS_FULL,		/* counts map full: the sample is not counted at all */
	CPU_LOST_NR,
};

/* ---- blockio.bpf.c: block I/O requests --------------------------------------------- */

/* Direction of a request as ktop counts it: as /proc/diskstats does, discards are neither
 * reads nor writes, and a flush (an empty write with REQ_PREFLUSH: fsync's cache flush) is
 * its own, as biosnoop's rwbs says F. */
enum blk_rw {
	BLK_RW_READ,
	BLK_RW_WRITE,
	BLK_RW_FLUSH,
	BLK_RW_OTHER,
};

#define BLK_FLAG_BIO		1	/* bio-based device: a bio from queue to completion */
#define BLK_FLAG_LATE		2	/* first seen at insert/issue: submission not seen */

/* One request (or bio) in flight, keyed by its struct request (struct bio) address. */
struct blk_inflight {
	u64 start_ns;			/* block_io_start / block_bio_queue, or first sighting */
	u64 insert_ns;			/* last block_rq_insert, 0 if it bypassed the scheduler */
	u64 issue_ns;			/* last block_rq_issue; block_bio_queue for a bio */
	u64 sector;			/* start sector at issue */
	u64 done_bytes;			/* completed so far (partial completions) */
	u32 pid;			/* submitter's tgid */
	u32 dev;			/* kernel dev_t: major << 20 | minor */
	u32 rw;				/* enum blk_rw */
	u32 flags;			/* BLK_FLAG_* */
	u32 bytes;			/* size at issue (at queue, for a bio) */
	u32 pad;
	u64 cgroup;			/* submitter's cgroup v2 id */
	char comm[KTOP_COMM_LEN];	/* submitter's comm */
};

/* Completed requests per (process, disk, direction), counted in the kernel. */
struct blk_io_key {
	u32 pid;
	u32 dev;
	u32 rw;
	u32 pad;
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

struct blk_io_totals {
	u64 requests;
	u64 bytes;
	u64 latency_ns;			/* issue (or submission, if never issued) to completion */
	u64 queue_ns;			/* insert to issue */
};

/* Log2 histogram of device latency in microseconds per (process, disk, direction). */
struct blk_hist_key {
	u32 pid;
	u32 dev;
	u32 rw;
	u32 slot;			/* bpf_log2l(lat_us | 1): slot k holds [2^(k-1), 2^k) us */
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

/* Submitted requests per (process, disk, direction, submitter's stacks): the drill-down. */
struct blk_stack_key {
	u32 pid;
	u32 dev;
	u32 rw;
	s32 kstack;			/* kernel stack id, or -errno */
	s32 ustack;			/* user stack id, or -errno (-EFAULT unless USER_STACKS) */
	u32 pad;
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

/* One completed request, streamed through the `completions` ring buffer. */
struct blk_event {
	u64 ts_ns;			/* completion, bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
	u64 sector;
	u64 latency_ns;
	u64 queue_ns;
	u32 pid;
	u32 dev;
	u32 bytes;
	u32 rw;
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

/* Index into the `lost` per-CPU array. */
enum blk_lost {
	BLK_LOST_UNPAIRED_COMPLETE,	/* completion of a request never seen submitted */
	BLK_LOST_COMPLETE_MISSED,	/* a request's address reused while we had it in flight */
	BLK_LOST_INFLIGHT_FULL,		/* in-flight map full: the request goes uncounted */
	BLK_LOST_TOTALS_FULL,		/* per-process counters full: a completion is not counted */
	BLK_LOST_HIST_FULL,
	BLK_LOST_STACK_COUNTS_FULL,
	BLK_LOST_KSTACK_COLLISION,
	BLK_LOST_KSTACK_FULL,
	BLK_LOST_USTACK_COLLISION,
	BLK_LOST_USTACK_FULL,
	BLK_LOST_RINGBUF_FULL,		/* the request stream dropped one; counters still have it */
	BLK_LOST_NR,
};

/* ---- locks.bpf.c: lock contention ------------------------------------------------ */

/* Lock type flags of lock:contention_begin, as include/trace/events/lock.h defines them. */
#define LCB_F_SPIN	(1U << 0)
#define LCB_F_READ	(1U << 1)
#define LCB_F_WRITE	(1U << 2)
#define LCB_F_RT	(1U << 3)
#define LCB_F_PERCPU	(1U << 4)
#define LCB_F_MUTEX	(1U << 5)

#define LOCK_HIST_SLOTS	40		/* log2 slots of wait time in ns: slot k holds [2^k, 2^(k+1)) */
#define LOCK_STACK_DEPTH 48		/* kernel frames kept; callers are found in the first few */

/* Who held a lock when a wait for it began. */
enum lock_owner_kind {
	LOCK_OWNER_NONE,		/* a lock that records no owner (spinning locks, semaphores) */
	LOCK_OWNER_TASK,		/* the task in the lock's owner field (mutex; rwsem held for write) */
	LOCK_OWNER_READERS,		/* an rwsem held for read: no single owner */
	LOCK_OWNER_UNKNOWN,		/* the owner field empty (just released) or unreadable */
	LOCK_OWNER_UNTRACED,		/* owners not traced (the kernel's BTF lacks a field) */
};

/* owner_kstack when the owner was not seen waking the waiter (-ENODATA). */
#define LOCK_OWNER_STACK_UNSEEN	(-61)
/* owner_kstack taken before a drain: its id points into the map being cleared (-ESTALE). */
#define LOCK_OWNER_STACK_STALE	(-116)

/* A wait in progress: per task for locks that sleep, per CPU for spinning locks. */
struct lock_start {
	u64 time_ns;			/* CLOCK_BOOTTIME, as /proc/<tid>/stat's starttime */
	u64 lock;			/* lock address; 0 marks a free per-CPU slot */
	u32 flags;			/* LCB_F_* of the first begin */
	s32 kstack;			/* kernel stack id in stacks_<generation>, or -errno */
	s32 ustack;			/* user stack id in user_stacks_<generation>, or -errno */
	u32 generation;			/* the map generation the stack ids belong to */
	u32 nested;			/* begins of other locks inside this wait, whose ends to skip */
	u32 owner_kind;			/* enum lock_owner_kind */
	u64 owner_task;			/* the owner's task_struct, to know it when it wakes us */
	u32 owner_tid;
	u32 owner_tgid;
	s32 owner_kstack;		/* the owner's stack when it woke this waiter, or -errno */
	u32 owner_generation;		/* the map generation owner_kstack belongs to */
	char owner_comm[KTOP_COMM_LEN];
};

/* Fixed layouts of the tracepoints' records (checked against tracefs before loading). */
struct contention_begin_args {
	u64 common;
	u64 lock_addr;
	u32 flags;
};

struct contention_end_args {
	u64 common;
	u64 lock_addr;
	s32 ret;
};

struct lock_wait {
	u64 count;
	u64 total_ns;
	u64 max_ns;
	u64 min_ns;
};

/* Waits per (kernel stack, lock type): the caller view and its drill-down. */
struct lock_stack_key {
	s32 kstack;			/* kernel stack id, or -errno when it could not be stored */
	u32 flags;
};

struct lock_stack_wait {
	struct lock_wait wait;
	u64 hist[LOCK_HIST_SLOTS];
};

/* Waits per (lock address, lock type): the lock view. */
struct lock_addr_key {
	u64 lock;
	u32 flags;
	u32 pad;
};

/* Waits per (task, stacks, lock type): the task view, and who waits at each caller. */
struct lock_task_key {
	u32 tid;
	u32 tgid;
	s32 kstack;
	s32 ustack;
	u32 flags;
	u32 pad;
	u64 cgroup;			/* the task's cgroup v2 id */
	char comm[KTOP_COMM_LEN];
};

/* Waits of sleeping locks per (owner, owner's stack, waiter's stack, lock, type): the
 * owner view and the owners in the caller and lock drill-downs. */
struct lock_owner_key {
	u64 lock;
	u32 owner_tid;			/* 0 unless owner_kind is LOCK_OWNER_TASK */
	u32 owner_tgid;
	s32 owner_kstack;		/* stack id, or -errno (LOCK_OWNER_STACK_*) */
	s32 kstack;			/* the waiter's kernel stack id */
	u32 flags;
	u32 owner_kind;
	char owner_comm[KTOP_COMM_LEN];
};

/* What a lock is, found at a wait's begin from the waiting task's own objects. */
enum lock_name_kind {
	LOCK_NAME_NONE,			/* none of the objects below */
	LOCK_NAME_MMAP_LOCK,		/* &mm->mmap_lock of the waiter's process */
	LOCK_NAME_SIGLOCK,		/* &sighand->siglock of the waiter's process */
	LOCK_NAME_INODE_RWSEM,		/* &inode->i_rwsem: an inode whose own fields agree */
};

#define LOCK_PATH_DEPTH	8		/* dentry names kept, innermost first */
#define LOCK_PATH_NAME	48		/* bytes of each */

struct lock_name {
	u32 kind;			/* enum lock_name_kind */
	u32 pid;			/* the process of an mm or sighand */
	u64 ino;			/* an inode's number */
	u32 dev;			/* its super_block's s_dev: major << 20 | minor */
	u32 generation;			/* the map generation when last looked at */
	u32 depth;			/* names in path[] */
	u32 pad;
	char comm[KTOP_COMM_LEN];	/* the process's command (of the waiting thread) */
	char path[LOCK_PATH_DEPTH * LOCK_PATH_NAME];	/* LOCK_PATH_NAME bytes a name */
};

/* Index into the `lost` per-CPU array: every wait not counted whole. */
enum lock_lost {
	LOCK_LOST_UNPAIRED_END,		/* an end whose begin was not seen: the wait is not counted */
	LOCK_LOST_NESTED_BEGIN,		/* a begin inside another wait: only the outer one is timed */
	LOCK_LOST_START_FULL,		/* task start map full: the wait is not counted */
	LOCK_LOST_STALE_SPIN,		/* a per-CPU begin whose end never came, replaced */
	LOCK_LOST_KSTACK_COLLISION,	/* stack map bucket held another stack (-EEXIST) */
	LOCK_LOST_KSTACK_FULL,		/* stack map out of room (-ENOMEM) */
	LOCK_LOST_USTACK_COLLISION,
	LOCK_LOST_USTACK_FULL,
	LOCK_LOST_STACKS_FULL,		/* per-stack aggregate map full: not in the caller view */
	LOCK_LOST_LOCKS_FULL,		/* per-lock aggregate map full: not in the lock view */
	LOCK_LOST_TASKS_FULL,		/* per-task aggregate map full: not in the task view */
	LOCK_LOST_OWNERS_FULL,		/* per-owner aggregate map full: not in the owner view */
	LOCK_LOST_OWNER_STACK_STALE,	/* the owner's stack was taken before a drain: left out */
	LOCK_LOST_NR,
};

#endif
