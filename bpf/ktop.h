/* Structs and constants shared by ktop's BPF programs and ktop/collectors/ (which mirror them
 * with ctypes). Keep the two in step: the Python side asserts the sizes. */
#ifndef KTOP_H
#define KTOP_H

#define KTOP_COMM_LEN 16

/* ---- cpu.bpf.c: perf_event sampling ------------------------------------------------- */

/* One counter per (process, kernel stack, user stack). */
struct cpu_key {
	u32 pid;			/* tgid; 0 is the idle task */
	s32 kstack;			/* kernel stack id, or -errno (-EFAULT: sampled in user mode) */
	s32 ustack;			/* user stack id, or -errno (kernel threads have none) */
	u32 pad;
	char comm[KTOP_COMM_LEN];
};

/* Index into the `lost` per-CPU array: every sample that could not be counted whole. */
enum cpu_lost {
	CPU_LOST_KSTACK_COLLISION,	/* stack map bucket held another stack (-EEXIST) */
	CPU_LOST_KSTACK_FULL,		/* stack map out of room (-ENOMEM) */
	CPU_LOST_USTACK_COLLISION,
	CPU_LOST_USTACK_FULL,
	CPU_LOST_COUNTS_FULL,		/* counts map full: the sample is not counted at all */
	CPU_LOST_NR,
};

#endif
