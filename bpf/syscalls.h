/* Structs shared by bpf/syscalls.bpf.c and ktop/panes/syscalls/collector.py (which mirrors
 * them with ctypes through bcc's map descriptions and checks the sizes). */
#ifndef KTOP_SYSCALLS_H
#define KTOP_SYSCALLS_H

#include "ktop.h"

#define SC_HIST_SLOTS 32		/* log2 slots of latency in ns: slot k holds [2^k, 2^(k+1)) ns,
					   the last one everything longer */

/* Which table a call's number is in. */
enum sc_abi {
	SC_ABI_X64,			/* the 64-bit table (syscall_64.tbl) */
	SC_ABI_IA32,			/* the 32-bit compat table: TS_COMPAT set (int 0x80, sysenter) */
	SC_ABI_X32,			/* the x32 ABI: __X32_SYSCALL_BIT in the number */
};

/* Calls per (thread, number, errno), one update a call's exit: a small key hashed fast.
 * The thread's process, command and cgroup are written into the value when its entry is
 * made (the maps are emptied every interval: a rename or a move shows from the next). */
struct sc_key {
	u32 tid;
	u32 nr;				/* the number in its ABI's table */
	u16 abi;			/* enum sc_abi */
	u16 err;			/* errno of a failed call (-4095 <= ret < 0), 0 for success */
	u32 pad;
};

struct sc_stat {
	u64 count;
	u64 total_ns;
	u64 max_ns;
	u64 hist[SC_HIST_SLOTS];
	u32 tgid;			/* counts_*: the thread's, as of its entry's first call on this CPU */
	u32 pad;
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

/* Slow calls (at least SLOW_NS) per (thread, number, errno, stacks): the drill-down. */
struct sc_slow_key {
	u32 tgid;
	u32 tid;
	u32 nr;
	u16 abi;
	u16 err;
	s64 kstack;			/* where it blocked: a key in `stacks`, or -errno (-ENOENT: not
					   walked, it never blocked or was predicted short) */
	s64 ustack;			/* its caller in user space: a key in `user_stacks`, or -errno */
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

/* One thread's call in progress, in its task storage. */
struct sc_thread {
	u64 start_ns;			/* 0: no call seen entered */
	u64 last_blocked_ns;		/* length of its last call that blocked: predicts the next */
	s64 kstack;			/* where this call first blocked, or -errno */
	u32 nr;
	u16 abi;
	u16 flags;			/* SC_THREAD_* */
};

#define SC_THREAD_BLOCKED	1	/* this call was switched out asleep */
#define SC_THREAD_SEEN_BLOCK	2	/* last_blocked_ns is known */

/* Index into the `lost` per-CPU array: every call not counted whole. */
enum syscalls_lost {
	SC_LOST_NO_STORAGE,		/* no task storage for a thread: its call is not counted */
	SC_LOST_UNPAIRED_EXIT,		/* an exit whose entry was not seen (begun before ktop) */
	SC_LOST_COUNTS_FULL,		/* counts map full: the call is not counted */
	SC_LOST_SLOW_FULL,		/* slow-call map full: missing from the drill-down only */
	SC_LOST_KSTACK_FULL,
	SC_LOST_USTACK_FULL,
	SC_LOST_SLOW_UNWALKED,		/* a slow call that blocked, predicted short: no kernel stack */
	SC_LOST_NR,
};

#endif
