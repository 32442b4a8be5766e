/* Block I/O: every request from submission to completion, counted in the kernel.
 *
 * A request is known by (dev, start sector): the tracepoints expose no request pointer.
 * Its submitter (pid, comm, stacks) is taken at block_io_start (or block_getrq on kernels
 * before 6.5), which fires where the request is made, in the submitting task: insert and
 * issue often run in a kworker (plug flush, requeue, kblockd).
 *
 * Bio-based devices (zram, device-mapper, md) make no requests; their bios are timed from
 * block_bio_queue to block_bio_complete, but only for the devices user space lists in
 * `bio_devices`: request-based devices fire block_bio_queue too, and counting those bios
 * as well would count their I/O twice.
 *
 * Counters live in two generations of maps; user space drains the one the program just
 * left, so nothing is lost between its lookup and its delete, and the stack map it clears
 * is one no in-flight update refers to. Submissions (and their stacks) are counted in the
 * generation current at submission, completions in the one current at completion. */
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>
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

BPF_ARRAY(generation, u32, 1);
BPF_HASH(inflight, struct blk_req_key, struct blk_inflight, INFLIGHT_ENTRIES);
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

/* rwbs is "[F]<op><flags>": a leading F is a preflush when another op letter follows. */
static __always_inline u32 rw_of(const char *rwbs)
{
	char op = rwbs[0], next = rwbs[1];
	if (op == 'F' && (next == 'W' || next == 'R' || next == 'D' || next == 'F' || next == 'N'))
		op = next;
	if (op == 'R')
		return BLK_RW_READ;
	if (op == 'W')
		return BLK_RW_WRITE;
	return BLK_RW_OTHER;
}

static __always_inline bool is_kworker(const char *comm)
{
	return comm[0] == 'k' && comm[1] == 'w' && comm[2] == 'o' && comm[3] == 'r' &&
	       comm[4] == 'k' && comm[5] == 'e' && comm[6] == 'r';
}

static __always_inline void count_stack_error(int err, int collision, int full)
{
	if (err == -EEXIST)
		count_lost(collision);
	else if (err == -ENOMEM)
		count_lost(full);
}

/* Counts one submission under the submitter's stacks; ctx is the tracepoint's. */
static __always_inline void count_submission(void *ctx, struct blk_inflight *req, u32 dev)
{
	u32 g = current_generation();
	struct blk_stack_key key = {};
	key.pid = req->pid;
	key.dev = dev;
	key.rw = req->rw;
	__builtin_memcpy(key.comm, req->comm, sizeof(key.comm));
	key.kstack = g ? stacks_1.get_stackid(ctx, 0) : stacks_0.get_stackid(ctx, 0);
#ifdef USER_STACKS
	key.ustack = g ? stacks_1.get_stackid(ctx, BPF_F_USER_STACK)
		       : stacks_0.get_stackid(ctx, BPF_F_USER_STACK);
	count_stack_error(key.ustack, BLK_LOST_USTACK_COLLISION, BLK_LOST_USTACK_FULL);
#else
	key.ustack = -EFAULT;
#endif
	count_stack_error(key.kstack, BLK_LOST_KSTACK_COLLISION, BLK_LOST_KSTACK_FULL);
	u64 zero = 0, *n;
	n = g ? stack_counts_1.lookup_or_try_init(&key, &zero)
	      : stack_counts_0.lookup_or_try_init(&key, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		count_lost(BLK_LOST_STACK_COUNTS_FULL);
}

/* Stores a new in-flight request under the first free nth at its (dev, sector). */
static __always_inline int store_request(struct blk_req_key *key, struct blk_inflight *req)
{
#pragma unroll
	for (u32 nth = 0; nth < BLK_SAME_SECTOR_MAX; nth++) {
		key->nth = nth;
		int err = inflight.insert(key, req);
		if (!err)
			return 0;
		if (err != -EEXIST) {
			count_lost(BLK_LOST_INFLIGHT_FULL);
			return -1;
		}
	}
	count_lost(BLK_LOST_INFLIGHT_COLLISION);
	return -1;
}

/* The in-flight request at (dev, sector) that has not yet reached a stage (its timestamp
 * there is 0); failing that, the first one there. Sets key->nth to it. */
static __always_inline struct blk_inflight *find_request(struct blk_req_key *key, bool issue)
{
	struct blk_inflight *first = 0;
	u32 first_nth = 0;
#pragma unroll
	for (u32 nth = 0; nth < BLK_SAME_SECTOR_MAX; nth++) {
		key->nth = nth;
		struct blk_inflight *req = inflight.lookup(key);
		if (!req)
			continue;
		if (!(issue ? req->issue_ns : req->insert_ns))
			return req;
		if (!first) {
			first = req;
			first_nth = nth;
		}
	}
	key->nth = first_nth;
	return first;
}

/* Takes the in-flight request a completion at (dev, sector) belongs to out of the map:
 * of several there, the one issued first. Deleting is the claim: of two CPUs completing at
 * the same sector, only one delete succeeds. */
static __always_inline bool claim_request(u32 dev, u64 sector, struct blk_inflight *out)
{
	struct blk_req_key key = {.sector = sector, .dev = dev};
	u64 best_rank = ~0ULL;
	s32 best = -1;
#pragma unroll
	for (u32 nth = 0; nth < BLK_SAME_SECTOR_MAX; nth++) {
		key.nth = nth;
		struct blk_inflight *req = inflight.lookup(&key);
		if (!req)
			continue;
		/* Issued ones by issue time, then never-issued ones (flush sequences). */
		u64 rank = req->issue_ns ? req->issue_ns : req->start_ns | (1ULL << 63);
		if (rank < best_rank) {
			best_rank = rank;
			best = nth;
		}
	}
	if (best < 0)
		return false;
	key.nth = best;
	struct blk_inflight *req = inflight.lookup(&key);
	if (!req)
		return false;
	*out = *req;
	return inflight.delete(&key) == 0;
}

/* A request (or bio) made by the current task: remember who, and count where from. */
static __always_inline void track_submission(void *ctx, u32 dev, u64 sector, u32 rw, u32 bytes,
					     u32 flags)
{
	struct blk_req_key key = {.sector = sector, .dev = dev};
	struct blk_inflight req = {};
	u64 now = bpf_ktime_get_ns();
	req.start_ns = now;
	req.issue_ns = (flags & BLK_FLAG_BIO) ? now : 0;
	req.pid = bpf_get_current_pid_tgid() >> 32;
	req.rw = rw;
	req.bytes = bytes;
	req.flags = flags;
	bpf_get_current_comm(&req.comm, sizeof(req.comm));
	store_request(&key, &req);
	count_submission(ctx, &req, dev);
}

/* Insert or issue of a request whose submission was not seen (ktop started mid-flight).
 * Outside a kworker the current task is the submitter (a direct issue); in a kworker it is
 * not, and the request is left to complete unpaired rather than be misattributed. */
static __always_inline struct blk_inflight *late_request(struct blk_req_key *key, u32 rw,
							 u32 bytes)
{
	struct blk_inflight req = {};
	bpf_get_current_comm(&req.comm, sizeof(req.comm));
	if (is_kworker(req.comm))
		return 0;
	req.start_ns = bpf_ktime_get_ns();
	req.pid = bpf_get_current_pid_tgid() >> 32;
	req.rw = rw;
	req.bytes = bytes;
	req.flags = BLK_FLAG_LATE;
	if (store_request(key, &req))
		return 0;
	return inflight.lookup(key);
}

static __always_inline void count_completion(struct blk_inflight *req, u32 dev, u64 sector,
					     u32 bytes)
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
	key.dev = dev;
	key.rw = req->rw;
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
	hkey.dev = dev;
	hkey.rw = req->rw;
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
	event->sector = sector;
	event->latency_ns = latency_ns;
	event->queue_ns = queue_ns;
	event->pid = req->pid;
	event->dev = dev;
	event->bytes = bytes;
	event->rw = req->rw;
	__builtin_memcpy(event->comm, req->comm, sizeof(event->comm));
	completions.ringbuf_submit(event, 0);
}

/* ---- request-based devices ----------------------------------------------------------- */

#ifdef SUBMIT_AT_IO_START
TRACEPOINT_PROBE(block, block_io_start)
{
	u32 rw = rw_of(args->rwbs);
	if (rw != BLK_RW_OTHER)
		track_submission(args, args->dev, args->sector, rw, args->bytes, 0);
	return 0;
}
#else
TRACEPOINT_PROBE(block, block_getrq)
{
	u32 rw = rw_of(args->rwbs);
	if (rw != BLK_RW_OTHER)
		track_submission(args, args->dev, args->sector, rw, args->nr_sector << 9, 0);
	return 0;
}
#endif

TRACEPOINT_PROBE(block, block_rq_insert)
{
	u32 rw = rw_of(args->rwbs);
	if (rw == BLK_RW_OTHER)
		return 0;
	struct blk_req_key key = {.sector = args->sector, .dev = args->dev};
	struct blk_inflight *req = find_request(&key, false);
	if (!req)
		req = late_request(&key, rw, args->bytes);
	if (req)
		req->insert_ns = bpf_ktime_get_ns();
	return 0;
}

TRACEPOINT_PROBE(block, block_rq_issue)
{
	u32 rw = rw_of(args->rwbs);
	if (rw == BLK_RW_OTHER)
		return 0;
	struct blk_req_key key = {.sector = args->sector, .dev = args->dev};
	struct blk_inflight *req = find_request(&key, true);
	if (!req)
		req = late_request(&key, rw, args->bytes);
	if (req) {
		req->issue_ns = bpf_ktime_get_ns();
		req->bytes = args->bytes;	/* grown by merges since submission */
	}
	return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete)
{
	/* The flush machinery's own request (rwbs "FF") is not a read or write. */
	if (rw_of(args->rwbs) == BLK_RW_OTHER)
		return 0;
	struct blk_inflight req;
	if (!claim_request(args->dev, args->sector, &req)) {
		count_lost(BLK_LOST_UNPAIRED_COMPLETE);
		return 0;
	}
	/* nr_sector is what this completion finished: the bytes /proc/diskstats counts. */
	count_completion(&req, args->dev, args->sector, args->nr_sector << 9);
	return 0;
}

#ifdef HAVE_RQ_MERGE
/* A queued request absorbed into the one before it never completes on its own. */
TRACEPOINT_PROBE(block, block_rq_merge)
{
	struct blk_req_key key = {.sector = args->sector, .dev = args->dev};
	struct blk_inflight *req = find_request(&key, true);
	if (req && !req->issue_ns)
		inflight.delete(&key);
	return 0;
}
#endif

/* A bio merged in front of a queued request moves the request's start sector, its key. */
TRACEPOINT_PROBE(block, block_bio_frontmerge)
{
	struct blk_req_key key = {.sector = args->sector + args->nr_sector, .dev = args->dev};
	struct blk_inflight *found = find_request(&key, true);
	if (!found || found->issue_ns)
		return 0;
	struct blk_inflight req = *found;
	if (inflight.delete(&key))
		return 0;
	struct blk_req_key moved = {.sector = args->sector, .dev = args->dev};
	store_request(&moved, &req);
	return 0;
}

/* ---- bio-based devices --------------------------------------------------------------- */

TRACEPOINT_PROBE(block, block_bio_queue)
{
	u32 dev = args->dev;
	if (!bio_devices.lookup(&dev))
		return 0;
	u32 rw = rw_of(args->rwbs);
	if (rw != BLK_RW_OTHER)
		track_submission(args, dev, args->sector, rw, args->nr_sector << 9, BLK_FLAG_BIO);
	return 0;
}

TRACEPOINT_PROBE(block, block_bio_complete)
{
	u32 dev = args->dev;
	if (!bio_devices.lookup(&dev) || rw_of(args->rwbs) == BLK_RW_OTHER)
		return 0;
	struct blk_inflight req;
	if (!claim_request(dev, args->sector, &req)) {
		count_lost(BLK_LOST_UNPAIRED_COMPLETE);
		return 0;
	}
	/* A driver may have advanced the bio's iterator by now: take the size at queue time. */
	count_completion(&req, dev, args->sector, req.bytes);
	return 0;
}
