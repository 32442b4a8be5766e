/* Structs shared by bpf/endings.bpf.c and ktop/panes/endings/collector.py (which mirrors
 * them with ctypes and asserts the sizes). */
#ifndef KTOP_ENDINGS_H
#define KTOP_ENDINGS_H

#include "ktop.h"

#define ENDING_KSTACK_DEPTH 40		/* a kill(2) is ~15 frames deep, tracing's own included */
#define ENDING_USTACK_DEPTH 32
#define ENDING_EXE_DEPTH 6		/* path components of the sender's executable kept */
#define ENDING_EXE_NAME 32		/* bytes of each */

/* What a record in a ring buffer is (its first u32). */
enum ending_kind {
	ENDING_SIGNAL = 1,		/* struct signal_event, in `signal_events` */
	ENDING_EXIT = 2,		/* struct exit_event, in `exit_events` */
	ENDING_OOM = 3,			/* struct oom_event, in `signal_events` */
};

/* Signals per (sender, target, signal, result), counted in the kernel: exact whatever the
 * stream of records below drops. */
struct signal_key {
	u32 sender_pid;			/* tgid of the task that sent it (current) */
	u32 target_pid;			/* tgid of the task it was sent to */
	s32 sig;
	s32 result;			/* enum trace_signal_result: delivered, ignored, ... */
	u64 cgroup;			/* the sender's cgroup v2 id */
	char sender_comm[KTOP_COMM_LEN];
	char target_comm[KTOP_COMM_LEN];
};

/* One signal sent, with the sender's stacks, through the `signal_events` ring buffer. */
struct signal_event {
	u32 kind;			/* ENDING_SIGNAL */
	s32 sig;
	s32 code;			/* si_code: SI_USER (kill), SI_KERNEL, SEGV_MAPERR... */
	s32 result;
	s32 group;			/* sent to the whole process */
	u32 sender_pid;
	u32 sender_tid;
	u32 target_pid;
	u32 target_tid;
	s32 kstack_bytes;		/* what bpf_get_stack returned (bytes, or -errno) */
	s32 ustack_bytes;
	u32 exe_depth;			/* names in exe[], innermost (the file's own) first */
	u64 ts_ns;			/* bpf_ktime_get_ns() */
	u64 cgroup;			/* the sender's */
	u64 start_code;			/* the sender's executable's text, as mapped (mm->start_code) */
	u64 end_code;
	u64 exe_ino;			/* its inode number: the file at the path is the same */
	char sender_comm[KTOP_COMM_LEN];
	char target_comm[KTOP_COMM_LEN];
	char exe[ENDING_EXE_DEPTH * ENDING_EXE_NAME];
	u64 kstack[ENDING_KSTACK_DEPTH];
	u64 ustack[ENDING_USTACK_DEPTH];
};

/* One process ended (its last thread's exit), through the `exit_events` ring buffer. */
struct exit_event {
	u32 kind;			/* ENDING_EXIT */
	u32 pid;			/* tgid */
	u32 tid;			/* the last thread to exit */
	u32 ppid;			/* tgid of its parent */
	s32 status;			/* wait(2)'s status: exit code << 8, or the signal (| 0x80 core) */
	u32 pad;
	u64 ts_ns;
	u64 start_ns;			/* its leader's start, bpf_ktime_get_ns()'s clock */
	u64 cpu_ns;			/* every thread's time on a CPU */
	u64 cgroup;
	char comm[KTOP_COMM_LEN];
};

/* The OOM killer chose a victim (oom:mark_victim), in the context of the task whose
 * allocation invoked it: the SIGKILL's record that follows names it and its stacks. */
struct oom_event {
	u32 kind;			/* ENDING_OOM */
	u32 victim_pid;			/* tgid */
	u32 victim_tid;
	u32 invoker_pid;
	u64 ts_ns;
	u64 cgroup;			/* the invoker's */
	char victim_comm[KTOP_COMM_LEN];
	char invoker_comm[KTOP_COMM_LEN];
};

/* Index into the `lost` per-CPU array. */
enum ending_lost {
	ENDING_LOST_SIGNALS_FULL,	/* the per-(sender, target, signal) map was full: not counted there */
	ENDING_LOST_SIGNAL_RING_FULL,	/* the signal stream had no room: a signal without its record */
	ENDING_LOST_SIGNAL_SAMPLED,	/* a frequent signal (SIGCHLD, SIGURG, timers...) past its
					   per-CPU budget of records a second: counted, no record */
	ENDING_LOST_EXIT_RING_FULL,	/* the exit stream had no room: a process's end unrecorded */
	ENDING_LOST_OOM_RING_FULL,	/* an OOM kill's mark not recorded (its SIGKILL may be) */
	ENDING_LOST_NR,
};

#endif
