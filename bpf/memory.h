/* Structs shared by bpf/memory.bpf.c and ktop/panes/memory/collector.py (which mirrors them
 * with struct formats and checks the key's size). */
#ifndef KTOP_MEMORY_H
#define KTOP_MEMORY_H

#include "ktop.h"

#define MEM_HIST_SLOTS 32		/* log2 slots of stall in ns: slot k holds [2^k, 2^(k+1)) ns,
					   the last one everything longer */

/* What stalled. */
enum mem_kind {
	MEM_DIRECT_RECLAIM,		/* vmscan:mm_vmscan_direct_reclaim_begin/end */
	MEM_MEMCG_RECLAIM,		/* vmscan:mm_vmscan_memcg_reclaim_begin/end (a cgroup's limit) */
	MEM_COMPACTION,			/* compaction:mm_compaction_begin/end */
	MEM_KSWAPD,			/* kswapd awake: mm_vmscan_kswapd_wake to _sleep (nobody's stall) */
	MEM_KIND_NR,
};

#define MEM_FLAG_KTHREAD 1		/* a kernel thread's (kcompactd, kswapd): nobody's stall */

/* Stalls per (thread, kind, cgroup, stacks, command), added to at each end event. */
struct mem_key {
	u32 tgid;
	u32 tid;
	u16 kind;			/* enum mem_kind */
	u16 flags;			/* MEM_FLAG_* */
	u32 pad;
	u64 cgroup;
	s64 kstack;			/* the stalled task's kernel stack: a key in `stacks`, or -errno */
	s64 ustack;			/* its user stack: a key in `user_stacks`, or -errno */
	char comm[KTOP_COMM_LEN];
};

struct mem_stat {
	u64 count;
	u64 total_ns;
	u64 max_ns;
	u64 reclaimed;			/* pages (nr_reclaimed of the end event; 0 for compaction) */
	u64 hist[MEM_HIST_SLOTS];
};

/* Index into the `lost` per-CPU array. */
enum memory_lost {
	MEM_LOST_STARTS_FULL,		/* no room to keep a stall's start: the stall is not counted */
	MEM_LOST_UNPAIRED_END,		/* an end whose begin was not seen (begun before ktop) */
	MEM_LOST_COUNTS_FULL,		/* counts map full: the stall is not counted */
	MEM_LOST_KSTACK_FULL,
	MEM_LOST_USTACK_FULL,
	MEM_LOST_NR,
};

#endif
