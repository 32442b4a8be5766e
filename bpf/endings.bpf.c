/* Endings: every signal sent and every process that ended, from the raw tracepoints
 * signal_generate (in the sender's context), sched_process_exit and oom:mark_victim.
 *
 * Signals are rare next to the scheduler's events, so each one is a record with its
 * sender's stacks, streamed through a bounded ring buffer (losses counted); and each is
 * counted in the kernel per (sender, target, signal, result) too, so the counts stay exact
 * when the stream drops records. The frequent kinds (SIGCHLD at every exit, SIGURG from Go's
 * preemption, timers, RT signals) get records only within a per-CPU budget a second: a
 * storm of them cannot push a SIGKILL's record out. Each process's end is one small
 * record of its own ring buffer (its last thread's exit): how it ended, its life and CPU.
 *
 * The sender's executable (its path's last names and where its text is mapped) goes with
 * each signal: a process killed by its own fault is gone before user space reads /proc,
 * and its faulting function is named from the file. */
#include <uapi/linux/ptrace.h>
#include "endings.h"

#ifndef SIGNAL_ENTRIES
#define SIGNAL_ENTRIES 4096
#endif
#ifndef SIGNAL_RING_PAGES
#define SIGNAL_RING_PAGES 128
#endif
#ifndef EXIT_RING_PAGES
#define EXIT_RING_PAGES 128
#endif
#ifndef FREQUENT_RECORDS
#define FREQUENT_RECORDS 32		/* records of frequent signals a CPU a second */
#endif
/* Offsets from the kernel's BTF (collector.py). */
#ifndef TASK_TGID
#error "TASK_TGID: the offset of task_struct.tgid, from BTF"
#endif

#define SIGNAL_GROUP_EXIT 0x00000004	/* signal_struct.flags: a group exit (include/linux/sched/signal.h) */
#define SI_USER 0
#define SI_KERNEL 0x80

BPF_ARRAY(generation, u64, 1);
BPF_HASH(signals_0, struct signal_key, u64, SIGNAL_ENTRIES);
BPF_HASH(signals_1, struct signal_key, u64, SIGNAL_ENTRIES);
BPF_RINGBUF_OUTPUT(signal_events, SIGNAL_RING_PAGES);
BPF_RINGBUF_OUTPUT(exit_events, EXIT_RING_PAGES);
BPF_PERCPU_ARRAY(lost, u64, ENDING_LOST_NR);
struct budget {
	u64 second;
	u64 used;
};
BPF_PERCPU_ARRAY(budgets, struct budget, 1);

static __always_inline void count_lost(int reason)
{
	u64 *counter = lost.lookup(&reason);

	if (counter)
		(*counter)++;
}

static __always_inline u64 read_u64(const void *base, u64 offset)
{
	u64 value = 0;

	bpf_probe_read_kernel(&value, sizeof(value), (const char *)base + offset);
	return value;
}

static __always_inline u32 read_u32(const void *base, u64 offset)
{
	u32 value = 0;

	bpf_probe_read_kernel(&value, sizeof(value), (const char *)base + offset);
	return value;
}

static __always_inline int frequent(int sig)
{
	/* SIGALRM 14, SIGCHLD 17, SIGURG 23, SIGVTALRM 26, SIGPROF 27, SIGWINCH 28, SIGIO 29,
	 * and the real-time signals */
	return sig == 14 || sig == 17 || sig == 23 || (sig >= 26 && sig <= 29) || sig >= 32;
}

static __always_inline int within_budget(u64 now)
{
	int zero = 0;
	struct budget *b = budgets.lookup(&zero);

	if (!b)
		return 0;
	if (b->second != now >> 30) {
		b->second = now >> 30;
		b->used = 0;
	}
	if (b->used >= FREQUENT_RECORDS)
		return 0;
	b->used++;
	return 1;
}

/* The sender's executable: its path's names, innermost first, and its text's mapping. */
static __always_inline void read_exe(struct signal_event *event, void *task)
{
	void *mm = (void *)read_u64(task, TASK_MM);
	void *file, *dentry, *parent;
	u32 depth = 0;

	if (!mm)
		return;
	event->start_code = read_u64(mm, MM_START_CODE);
	event->end_code = read_u64(mm, MM_END_CODE);
	file = (void *)read_u64(mm, MM_EXE_FILE);
	if (!file)
		return;
	dentry = (void *)read_u64(file, FILE_DENTRY);
	void *inode = (void *)read_u64(file, FILE_INODE);
	if (inode)
		event->exe_ino = read_u64(inode, INODE_INO);
#pragma unroll
	for (int i = 0; i < ENDING_EXE_DEPTH; i++) {
		if (!dentry)
			break;
		const char *name = (const char *)read_u64(dentry, DENTRY_NAME);
		bpf_probe_read_kernel_str(&event->exe[i * ENDING_EXE_NAME], ENDING_EXE_NAME, name);
		depth = i + 1;
		parent = (void *)read_u64(dentry, DENTRY_PARENT);
		if (parent == dentry)	/* the root of its mount */
			break;
		dentry = parent;
	}
	event->exe_depth = depth;
}

RAW_TRACEPOINT_PROBE(signal_generate)
{
	/* (int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	 * int result) */
	int sig = (int)ctx->args[0];
	u64 info = ctx->args[1];
	void *target = (void *)ctx->args[2];
	u64 now = bpf_ktime_get_ns();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct signal_key key = {};
	u64 one = 1, *count;
	void *task = (void *)bpf_get_current_task();

	key.sender_pid = pid_tgid >> 32;
	key.target_pid = read_u32(target, TASK_TGID);
	key.sig = sig;
	key.result = (int)ctx->args[4];
	key.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(key.sender_comm, sizeof(key.sender_comm));
	bpf_probe_read_kernel(key.target_comm, sizeof(key.target_comm),
			      (const char *)target + TASK_COMM);

	u64 gen = 0;
	int zero = 0;
	u64 *g = generation.lookup(&zero);
	if (g)
		gen = *g & 1;
	if (gen)
		count = signals_1.lookup(&key);
	else
		count = signals_0.lookup(&key);
	if (count) {
		__sync_fetch_and_add(count, 1);
	} else {
		int err = gen ? signals_1.insert(&key, &one) : signals_0.insert(&key, &one);
		if (err == -EEXIST) {
			count = gen ? signals_1.lookup(&key) : signals_0.lookup(&key);
			if (count)
				__sync_fetch_and_add(count, 1);
		} else if (err) {
			count_lost(ENDING_LOST_SIGNALS_FULL);
		}
	}

	if (frequent(sig) && !within_budget(now)) {
		count_lost(ENDING_LOST_SIGNAL_SAMPLED);
		return 0;
	}
	struct signal_event *event = signal_events.ringbuf_reserve(sizeof(struct signal_event));
	if (!event) {
		count_lost(ENDING_LOST_SIGNAL_RING_FULL);
		return 0;
	}
	event->kind = ENDING_SIGNAL;
	event->sig = sig;
	if (info == 0)			/* SEND_SIG_NOINFO: kill(2) and the like */
		event->code = SI_USER;
	else if (info == 1)		/* SEND_SIG_PRIV: the kernel's own (the OOM killer's) */
		event->code = SI_KERNEL;
	else
		event->code = (s32)read_u32((void *)info, 8);	/* kernel_siginfo.si_code */
	event->result = key.result;
	event->group = (int)ctx->args[3];
	event->sender_pid = key.sender_pid;
	event->sender_tid = (u32)pid_tgid;
	event->target_pid = key.target_pid;
	event->target_tid = read_u32(target, TASK_PID);
	event->ts_ns = now;
	event->cgroup = key.cgroup;
	event->start_code = 0;
	event->end_code = 0;
	event->exe_depth = 0;
	event->exe_ino = 0;
	__builtin_memcpy(event->sender_comm, key.sender_comm, sizeof(key.sender_comm));
	__builtin_memcpy(event->target_comm, key.target_comm, sizeof(key.target_comm));
	read_exe(event, task);
	event->kstack_bytes = bpf_get_stack(ctx, event->kstack, sizeof(event->kstack), 0);
	event->ustack_bytes = bpf_get_stack(ctx, event->ustack, sizeof(event->ustack),
					    BPF_F_USER_STACK);
	signal_events.ringbuf_submit(event, 0);
	return 0;
}

RAW_TRACEPOINT_PROBE(sched_process_exit)
{
	/* (struct task_struct *task[, bool group_dead]) */
	void *task = (void *)ctx->args[0];
	u32 tgid = read_u32(task, TASK_TGID);
	u32 tid = read_u32(task, TASK_PID);
#if EXIT_GROUP_DEAD_ARG
	if (!(ctx->args[1] & 0xff))
		return 0;
#else
	if (tgid != tid)	/* (no group_dead here: the leader's exit stands for the process's) */
		return 0;
#endif
	struct exit_event *event = exit_events.ringbuf_reserve(sizeof(struct exit_event));
	if (!event) {
		count_lost(ENDING_LOST_EXIT_RING_FULL);
		return 0;
	}
	void *signal = (void *)read_u64(task, TASK_SIGNAL);
	void *leader = (void *)read_u64(task, TASK_GROUP_LEADER);
	void *parent = (void *)read_u64(task, TASK_REAL_PARENT);
	u32 flags = signal ? read_u32(signal, SIGNAL_FLAGS) : 0;
	u64 cpu = read_u64(task, TASK_SUM_EXEC_RUNTIME);

	if (signal)
		cpu += read_u64(signal, SIGNAL_SUM_SCHED_RUNTIME);
	if (leader && leader != task)	/* exited before, not yet reaped: not in signal's sum */
		cpu += read_u64(leader, TASK_SUM_EXEC_RUNTIME);
	event->kind = ENDING_EXIT;
	event->pid = tgid;
	event->tid = tid;
	event->ppid = parent ? read_u32(parent, TASK_TGID) : 0;
	event->status = (flags & SIGNAL_GROUP_EXIT) && signal
		? (s32)read_u32(signal, SIGNAL_GROUP_EXIT_CODE)
		: (s32)read_u32(task, TASK_EXIT_CODE);
	event->pad = 0;
	event->ts_ns = bpf_ktime_get_ns();
	event->start_ns = read_u64(leader ? leader : task, TASK_START_TIME);
	event->cpu_ns = cpu;
	event->cgroup = bpf_get_current_cgroup_id();
	bpf_probe_read_kernel(event->comm, sizeof(event->comm), (const char *)task + TASK_COMM);
	exit_events.ringbuf_submit(event, 0);
	return 0;
}

#if HAVE_MARK_VICTIM
RAW_TRACEPOINT_PROBE(mark_victim)
{
	/* (struct task_struct *task, uid_t uid) */
	void *victim = (void *)ctx->args[0];
	struct oom_event *event = signal_events.ringbuf_reserve(sizeof(struct oom_event));

	if (!event) {
		count_lost(ENDING_LOST_OOM_RING_FULL);
		return 0;
	}
	event->kind = ENDING_OOM;
	event->victim_pid = read_u32(victim, TASK_TGID);
	event->victim_tid = read_u32(victim, TASK_PID);
	event->invoker_pid = bpf_get_current_pid_tgid() >> 32;
	event->ts_ns = bpf_ktime_get_ns();
	event->cgroup = bpf_get_current_cgroup_id();
	bpf_probe_read_kernel(event->victim_comm, sizeof(event->victim_comm),
			      (const char *)victim + TASK_COMM);
	bpf_get_current_comm(event->invoker_comm, sizeof(event->invoker_comm));
	signal_events.ringbuf_submit(event, 0);
	return 0;
}
#endif
