/* Block I/O: every request from submission to completion, counted in the kernel.
 *
 * Raw tracepoints, not the formatted ones, for two reasons measured on this kernel:
 * - they hand over the struct request (struct bio) itself, so a request in flight is keyed
 *   by its address: never confused with another request at the same sector (four O_DIRECT
 *   readers of one file put several in flight at one sector all the time);
 * - the kernel skips a formatted tracepoint's BPF program whenever any other tracing BPF
 *   program is running on that CPU (the per-CPU bpf_prog_active guard), which is where an
 *   I/O completion interrupt lands when another collector's probe is busy: 0.2-0.4% of
 *   completions with a lock-contention collector attached, half of them with a busy
 *   syscall probe. A raw tracepoint is only skipped on recursion into the same program,
 *   and the kernel counts that (recursion_misses, reported by user space).
 * Completions still go unseen now and then, in bursts, with no miss counted (a trivial raw
 * tracepoint counter shows it too, against /proc/diskstats; task-context events never
 * do). Such a request stays in flight until its address is reused (complete_missed) or it
 * is swept as stale: counted, never turned into a wrong latency.
 * The struct offsets come from the kernel's BTF, passed in as -D macros by user space.
 *
 * The submitter (pid, comm, stacks) is taken at block_io_start (6.5+), which fires where
 * the request is made, in the submitting task: insert and issue often run in a kworker.
 * Without block_io_start, the first insert or issue outside a kworker stands in for it.
 *
 * Bio-based devices (zram, device-mapper, md) make no requests: their bios are timed from
 * block_bio_queue to block_bio_complete, for the devices user space lists in
 * `bio_devices` only. Request-based devices queue bios too; timing those as well would
 * count their I/O twice.
 *
 * Counters live in two generations of maps; user space drains the one the program just
 * left, so nothing is lost between its lookup and its delete, and the stack map it clears
 * is one no in-flight update refers to. */
#include <uapi/linux/ptrace.h>
#include "ktop.h"

#ifndef INFLIGHT_ENTRIES
#define INFLIGHT_ENTRIES 16384
#endif
#ifndef TOTALS_ENTRIES
#define TOTALS_ENTRIES 8192
#endif
#ifndef HIST_ENTRIES
#define HIST_ENTRIES 32768
#endif
#ifndef STACK_COUNT_ENTRIES
#define STACK_COUNT_ENTRIES 8192
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 4096
#endif
#ifndef RINGBUF_PAGES
#define RINGBUF_PAGES 256
#endif
#define MAX_SLOT 40			/* 2^40 us: about 12 days */
#define REQ_OP_BITMASK 0xff		/* REQ_OP_BITS = 8 */

/* Byte offsets of the fields read, and which raw tracepoint argument holds the request or
 * bio: all set by ktop/panes/blockio/collector.py from /sys/kernel/btf/vmlinux. block_io_start
 * (6.5+) has always taken the request alone. */
#if !defined(RQ_Q) || !defined(RQ_CMD_FLAGS) || !defined(RQ_DATA_LEN) || !defined(RQ_SECTOR) || \
	!defined(Q_DISK) || !defined(DISK_MAJOR) || !defined(DISK_FIRST_MINOR) || \
	!defined(BIO_BDEV) || !defined(BIO_OPF) || !defined(BIO_SECTOR) || !defined(BIO_SIZE) || \
	!defined(BDEV_DEV) || !defined(RQ_INSERT_ARG) || !defined(RQ_ISSUE_ARG) || \
	!defined(RQ_COMPLETE_ARG) || !defined(RQ_MERGE_ARG) || !defined(BIO_QUEUE_ARG) || \
	!defined(BIO_COMPLETE_ARG) || !defined(REQ_PREFLUSH)
#error "struct offsets from BTF are missing"
#endif

BPF_ARRAY(generation, u32, 1);
BPF_HASH(inflight, u64, struct blk_inflight, INFLIGHT_ENTRIES);
BPF_HASH(bio_devices, u32, u8, 1024);
BPF_HASH(totals_0, struct blk_io_key, struct blk_io_totals, TOTALS_ENTRIES);
BPF_HASH(totals_1, struct blk_io_key, struct blk_io_totals, TOTALS_ENTRIES);
BPF_HASH(latency_hist_0, struct blk_hist_key, u64, HIST_ENTRIES);
BPF_HASH(latency_hist_1, struct blk_hist_key, u64, HIST_ENTRIES);
BPF_HASH(stack_counts_0, struct blk_stack_key, u64, STACK_COUNT_ENTRIES);
BPF_HASH(stack_counts_1, struct blk_stack_key, u64, STACK_COUNT_ENTRIES);
BPF_STACK_TRACE(stacks_0, STACK_ENTRIES);
BPF_STACK_TRACE(stacks_1, STACK_ENTRIES);
BPF_PERCPU_ARRAY(lost, u64, BLK_LOST_NR);
BPF_RINGBUF_OUTPUT(completions, RINGBUF_PAGES);

static __always_inline void count_lost(int reason)
{
	u64 *n = lost.lookup(&reason);
	if (n)
		(*n)++;
}

static __always_inline u32 current_generation(void)
{
	u32 zero = 0, *gen = generation.lookup(&zero);
	return gen ? *gen : 0;
}

static __always_inline u64 read_u64(const void *base, u32 offset)
{
	u64 value = 0;
	bpf_probe_read_kernel(&value, sizeof(value), (const char *)base + offset);
	return value;
}

static __always_inline u32 read_u32(const void *base, u32 offset)
{
	u32 value = 0;
	bpf_probe_read_kernel(&value, sizeof(value), (const char *)base + offset);
	return value;
}

static __always_inline const void *read_ptr(const void *base, u32 offset)
{
	const void *value = 0;
	bpf_probe_read_kernel(&value, sizeof(value), (const char *)base + offset);
	return value;
}

/* As /proc/diskstats groups them: READ; WRITE, SECURE_ERASE, ZONE_APPEND, WRITE_ZEROES;
 * a write without data that flushes the cache first (REQ_PREFLUSH: fsync's flush) is a
 * flush. The flush machinery's own REQ_OP_FLUSH requests (one per such write, or fewer),
 * DISCARD and driver-private (passthrough) requests are left out. */
static __always_inline u32 rw_of(u32 opf, u32 bytes)
{
	u32 op = opf & REQ_OP_BITMASK;
	if (op == 0)
		return BLK_RW_READ;
	if (op == 1 || op == 5 || op == 7 || op == 9)
		return (opf & REQ_PREFLUSH) && !bytes ? BLK_RW_FLUSH : BLK_RW_WRITE;
	return BLK_RW_OTHER;
}

/* The whole disk's dev_t, as the block_rq_* tracepoints report it: rq->q->disk. */
static __always_inline u32 request_dev(const void *rq)
{
	const void *queue = read_ptr(rq, RQ_Q);
	const void *disk = queue ? read_ptr(queue, Q_DISK) : 0;
	if (!disk)
		return 0;
	return read_u32(disk, DISK_MAJOR) << 20 | read_u32(disk, DISK_FIRST_MINOR);
}

/* The bio's device (a partition's, if it was sent to one): bio->bi_bdev->bd_dev. */
static __always_inline u32 bio_dev(const void *bio)
{
	const void *bdev = read_ptr(bio, BIO_BDEV);
	return bdev ? read_u32(bdev, BDEV_DEV) : 0;
}

static __always_inline bool is_kworker(const char *comm)
{
	return comm[0] == 'k' && comm[1] == 'w' && comm[2] == 'o' && comm[3] == 'r' &&
	       comm[4] == 'k' && comm[5] == 'e' && comm[6] == 'r';
}

/* Counts one submission under the submitter's stacks. */
static __always_inline void count_submission(void *ctx, struct blk_inflight *req)
{
	u32 g = current_generation();
	struct blk_stack_key key = {};
	key.pid = req->pid;
	key.dev = req->dev;
	key.rw = req->rw;
	key.cgroup = req->cgroup;
	__builtin_memcpy(key.comm, req->comm, sizeof(key.comm));
	key.kstack = g ? stacks_1.get_stackid(ctx, 0) : stacks_0.get_stackid(ctx, 0);
	count_lost(stack_loss(key.kstack, BLK_LOST_KSTACK_COLLISION, BLK_LOST_KSTACK_FULL));
#ifdef USER_STACKS
	key.ustack = g ? stacks_1.get_stackid(ctx, BPF_F_USER_STACK)
		       : stacks_0.get_stackid(ctx, BPF_F_USER_STACK);
	count_lost(stack_loss(key.ustack, BLK_LOST_USTACK_COLLISION, BLK_LOST_USTACK_FULL));
#else
	key.ustack = -EFAULT;
#endif
	u64 zero = 0, *n;
	n = g ? stack_counts_1.lookup_or_try_init(&key, &zero)
	      : stack_counts_0.lookup_or_try_init(&key, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		count_lost(BLK_LOST_STACK_COUNTS_FULL);
}

/* A request (or bio) made by the current task: remember who, and count where from. */
static __always_inline struct blk_inflight *track_submission(void *ctx, u64 address, u32 dev,
							     u32 rw, u32 flags)
{
	struct blk_inflight req = {};
	u64 now = bpf_ktime_get_ns();
	req.start_ns = now;
	req.issue_ns = (flags & BLK_FLAG_BIO) ? now : 0;
	req.pid = bpf_get_current_pid_tgid() >> 32;
	req.dev = dev;
	req.rw = rw;
	req.flags = flags;
	req.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(&req.comm, sizeof(req.comm));
	/* Still here: the last request at this address completed unseen (or merged unseen). */
	if (inflight.lookup(&address))
		count_lost(BLK_LOST_COMPLETE_MISSED);
	if (inflight.update(&address, &req)) {
		count_lost(BLK_LOST_INFLIGHT_FULL);
		return 0;
	}
	count_submission(ctx, &req);
	return inflight.lookup(&address);
}

/* Insert (or issue) of a request whose submission was not seen. Outside a kworker the
 * current task is the submitter; in a kworker (requeue, kblockd) it is not, and the
 * request is left to complete unpaired rather than be misattributed. */
static __always_inline struct blk_inflight *late_request(void *ctx, const void *rq)
{
	char comm[KTOP_COMM_LEN];
	bpf_get_current_comm(&comm, sizeof(comm));
	u32 rw = rw_of(read_u32(rq, RQ_CMD_FLAGS), read_u32(rq, RQ_DATA_LEN));
	if (rw == BLK_RW_OTHER || is_kworker(comm))
		return 0;
	return track_submission(ctx, (u64)rq, request_dev(rq), rw, BLK_FLAG_LATE);
}

static __always_inline void count_completion(struct blk_inflight *req, u64 bytes)
{
	u64 now = bpf_ktime_get_ns();
	u64 since = req->issue_ns ? req->issue_ns : req->start_ns;
	u64 latency_ns = now > since ? now - since : 0;
	u64 queue_ns = 0;
	if (req->insert_ns && req->issue_ns > req->insert_ns)
		queue_ns = req->issue_ns - req->insert_ns;
	u32 g = current_generation();

	struct blk_io_key key = {};
	key.pid = req->pid;
	key.dev = req->dev;
	key.rw = req->rw;
	key.cgroup = req->cgroup;
	__builtin_memcpy(key.comm, req->comm, sizeof(key.comm));
	struct blk_io_totals zero = {}, *totals;
	totals = g ? totals_1.lookup_or_try_init(&key, &zero)
		   : totals_0.lookup_or_try_init(&key, &zero);
	if (totals) {
		__sync_fetch_and_add(&totals->requests, 1);
		__sync_fetch_and_add(&totals->bytes, bytes);
		__sync_fetch_and_add(&totals->latency_ns, latency_ns);
		__sync_fetch_and_add(&totals->queue_ns, queue_ns);
	} else {
		count_lost(BLK_LOST_TOTALS_FULL);
	}

	struct blk_hist_key hkey = {};
	hkey.pid = req->pid;
	hkey.dev = req->dev;
	hkey.rw = req->rw;
	hkey.cgroup = req->cgroup;
	hkey.slot = bpf_log2l((latency_ns / 1000) | 1);
	if (hkey.slot > MAX_SLOT)
		hkey.slot = MAX_SLOT;
	__builtin_memcpy(hkey.comm, req->comm, sizeof(hkey.comm));
	u64 none = 0, *count;
	count = g ? latency_hist_1.lookup_or_try_init(&hkey, &none)
		  : latency_hist_0.lookup_or_try_init(&hkey, &none);
	if (count)
		__sync_fetch_and_add(count, 1);
	else
		count_lost(BLK_LOST_HIST_FULL);

	struct blk_event *event = completions.ringbuf_reserve(sizeof(struct blk_event));
	if (!event) {
		count_lost(BLK_LOST_RINGBUF_FULL);
		return;
	}
	event->ts_ns = now;
	event->sector = req->sector;
	event->latency_ns = latency_ns;
	event->queue_ns = queue_ns;
	event->pid = req->pid;
	event->dev = req->dev;
	event->bytes = bytes;
	event->rw = req->rw;
	event->cgroup = req->cgroup;
	__builtin_memcpy(event->comm, req->comm, sizeof(event->comm));
	completions.ringbuf_submit(event, 0);
}

/* ---- request-based devices ----------------------------------------------------------- */

#ifdef HAVE_IO_START
RAW_TRACEPOINT_PROBE(block_io_start)
{
	const void *rq = (const void *)ctx->args[0];
	u32 rw = rw_of(read_u32(rq, RQ_CMD_FLAGS), read_u32(rq, RQ_DATA_LEN));
	if (rw != BLK_RW_OTHER)
		track_submission(ctx, (u64)rq, request_dev(rq), rw, 0);
	return 0;
}
#endif

RAW_TRACEPOINT_PROBE(block_rq_insert)
{
	const void *rq = (const void *)ctx->args[RQ_INSERT_ARG];
	u64 address = (u64)rq;
	struct blk_inflight *req = inflight.lookup(&address);
	if (!req)
		req = late_request(ctx, rq);
	if (req)
		req->insert_ns = bpf_ktime_get_ns();
	return 0;
}

RAW_TRACEPOINT_PROBE(block_rq_issue)
{
	const void *rq = (const void *)ctx->args[RQ_ISSUE_ARG];
	u64 address = (u64)rq;
	struct blk_inflight *req = inflight.lookup(&address);
#ifndef HAVE_IO_START
	if (!req)
		req = late_request(ctx, rq);	/* a direct issue has no insert */
#endif
	if (req) {
		req->issue_ns = bpf_ktime_get_ns();
		req->sector = read_u64(rq, RQ_SECTOR);	/* moved by front merges since */
		req->bytes = read_u32(rq, RQ_DATA_LEN);	/* grown by merges since */
	}
	return 0;
}

RAW_TRACEPOINT_PROBE(block_rq_complete)
{
	/* (rq, error, nr_bytes) since 4.x; nr_bytes is always last. */
	const void *rq = (const void *)ctx->args[RQ_COMPLETE_ARG];
	u32 nr_bytes = (u32)ctx->args[RQ_COMPLETE_ARG + 2];
	u64 address = (u64)rq;
	struct blk_inflight *found = inflight.lookup(&address);
	if (!found) {
		if (rw_of(read_u32(rq, RQ_CMD_FLAGS), read_u32(rq, RQ_DATA_LEN)) != BLK_RW_OTHER)
			count_lost(BLK_LOST_UNPAIRED_COMPLETE);
		return 0;
	}
	/* Fired before the request is updated: less than what remains is a partial completion,
	 * and /proc/diskstats counts the request once, at its end. */
	if (nr_bytes < read_u32(rq, RQ_DATA_LEN)) {
		__sync_fetch_and_add(&found->done_bytes, nr_bytes);
		return 0;
	}
	struct blk_inflight req = *found;
	if (inflight.delete(&address))
		return 0;
	count_completion(&req, req.done_bytes + nr_bytes);
	return 0;
}

/* A queued request absorbed into the one before it never completes on its own. */
RAW_TRACEPOINT_PROBE(block_rq_merge)
{
	u64 address = ctx->args[RQ_MERGE_ARG];
	inflight.delete(&address);
	return 0;
}

/* ---- bio-based devices --------------------------------------------------------------- */

RAW_TRACEPOINT_PROBE(block_bio_queue)
{
	const void *bio = (const void *)ctx->args[BIO_QUEUE_ARG];
	u32 dev = bio_dev(bio);
	if (!bio_devices.lookup(&dev))
		return 0;
	u32 rw = rw_of(read_u32(bio, BIO_OPF), read_u32(bio, BIO_SIZE));
	if (rw == BLK_RW_OTHER)
		return 0;
	struct blk_inflight *req = track_submission(ctx, (u64)bio, dev, rw, BLK_FLAG_BIO);
	if (req) {
		req->sector = read_u64(bio, BIO_SECTOR);
		/* A driver may advance the bio's iterator before completing it: size it now. */
		req->bytes = read_u32(bio, BIO_SIZE);
	}
	return 0;
}

RAW_TRACEPOINT_PROBE(block_bio_complete)
{
	const void *bio = (const void *)ctx->args[BIO_COMPLETE_ARG];
	u64 address = (u64)bio;
	struct blk_inflight *found = inflight.lookup(&address);
	if (!found) {
		u32 dev = bio_dev(bio);
		if (bio_devices.lookup(&dev) && rw_of(read_u32(bio, BIO_OPF), read_u32(bio, BIO_SIZE)) != BLK_RW_OTHER)
			count_lost(BLK_LOST_UNPAIRED_COMPLETE);
		return 0;
	}
	struct blk_inflight req = *found;
	if (inflight.delete(&address))
		return 0;
	count_completion(&req, req.bytes);
	return 0;
}
