/* Interrupts: time no process owns, counted in the kernel from the raw tracepoints
 * irq_handler_entry/exit (per hard-IRQ handler) and softirq_raise/entry/exit (per softirq
 * vector, with the raise-to-run delay: perf kwork's latency), per CPU.
 *
 * These fire 10^4-10^5 times a second: each run is one per-CPU array write at its entry and
 * one per-CPU hash update at its exit; no stack is walked. Hard IRQs do not nest on one CPU,
 * nor do softirqs, so the start of the one running is a per-CPU slot; a hard IRQ that lands
 * inside a softirq is counted in both, as bcc's softirqs and hardirqs count it. */
#include <linux/interrupt.h>
#include "irqs.h"

#ifndef COUNT_ENTRIES
#define COUNT_ENTRIES 1024
#endif
#define SOFTIRQ_VECTORS 16		/* NR_SOFTIRQS is 10; a power of two for the mask */

struct irq_cpu {
	u64 hard_start_ns;		/* 0: no hard IRQ seen entered */
	u64 soft_start_ns;
	u64 raised_ns[SOFTIRQ_VECTORS];	/* first raise of a vector not yet run, or 0 */
};

BPF_ARRAY(generation, u32, 1);
BPF_PERCPU_ARRAY(cpu_state, struct irq_cpu, 1);
BPF_PERCPU_HASH(counts_0, struct irq_key, struct irq_stat, COUNT_ENTRIES);
BPF_PERCPU_HASH(counts_1, struct irq_key, struct irq_stat, COUNT_ENTRIES);
BPF_HASH(names, u32, struct irq_name, COUNT_ENTRIES);
BPF_PERCPU_ARRAY(lost, u64, IRQ_LOST_NR);
BPF_PERCPU_ARRAY(zero_stat, struct irq_stat, 1);

static __always_inline void count_lost(int reason)
{
	u64 *n = lost.lookup(&reason);
	if (n)
		*n += 1;
}

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

static __always_inline struct irq_stat *stat_of(u32 kind, u32 number)
{
	u32 zero = 0, *g = generation.lookup(&zero);
	struct irq_key key = {.kind = kind, .number = number};
	struct irq_stat *stat, *empty;
	int err;

	stat = (g && *g) ? counts_1.lookup(&key) : counts_0.lookup(&key);
	if (stat)
		return stat;
	empty = zero_stat.lookup(&zero);
	if (!empty)
		return 0;
	err = (g && *g) ? counts_1.insert(&key, empty) : counts_0.insert(&key, empty);
	if (err == -E2BIG) {
		count_lost(IRQ_LOST_COUNTS_FULL);
		return 0;
	}
	return (g && *g) ? counts_1.lookup(&key) : counts_0.lookup(&key);
}

static __always_inline void add_time(struct irq_stat *stat, u64 ns)
{
	stat->count += 1;
	stat->total_ns += ns;
	if (ns > stat->max_ns)
		stat->max_ns = ns;
}

/* irq_handler_entry(int irq, struct irqaction *action) */
int on_irq_entry(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0, irq = ctx->args[0];
	struct irq_cpu *cpu = cpu_state.lookup(&zero);

	if (!cpu)
		return 0;
	cpu->hard_start_ns = bpf_ktime_get_ns();
	if (!names.lookup(&irq)) {
		struct irqaction *action = (struct irqaction *)ctx->args[1];
		struct irq_name name = {};
		const char *p = 0;

		bpf_probe_read_kernel(&p, sizeof(p), &action->name);
		if (p)
			bpf_probe_read_kernel_str(name.name, sizeof(name.name), p);
		names.update(&irq, &name);
	}
	return 0;
}

/* irq_handler_exit(int irq, struct irqaction *action, int ret) */
int on_irq_exit(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0;
	struct irq_cpu *cpu = cpu_state.lookup(&zero);
	struct irq_stat *stat;
	u64 start;

	if (!cpu)
		return 0;
	start = cpu->hard_start_ns;
	if (!start) {
		count_lost(IRQ_LOST_UNPAIRED_EXIT);
		return 0;
	}
	cpu->hard_start_ns = 0;
	stat = stat_of(IRQ_KIND_HARD, (u32)ctx->args[0]);
	if (stat)
		add_time(stat, bpf_ktime_get_ns() - start);
	return 0;
}

/* softirq_raise(unsigned int vec_nr) */
int on_softirq_raise(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0, vec = ctx->args[0];
	struct irq_cpu *cpu = cpu_state.lookup(&zero);

	if (!cpu)
		return 0;
	vec &= SOFTIRQ_VECTORS - 1;
	if (!cpu->raised_ns[vec])	/* already pending: the first raise is what waits */
		cpu->raised_ns[vec] = bpf_ktime_get_ns();
	return 0;
}

/* softirq_entry(unsigned int vec_nr) */
int on_softirq_entry(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0;
	struct irq_cpu *cpu = cpu_state.lookup(&zero);

	if (cpu)
		cpu->soft_start_ns = bpf_ktime_get_ns();
	return 0;
}

/* softirq_exit(unsigned int vec_nr) */
int on_softirq_exit(struct bpf_raw_tracepoint_args *ctx)
{
	u32 zero = 0, vec = ctx->args[0], slot;
	struct irq_cpu *cpu = cpu_state.lookup(&zero);
	struct irq_stat *stat;
	u64 start, now, raised, delay;

	if (!cpu)
		return 0;
	vec &= SOFTIRQ_VECTORS - 1;
	start = cpu->soft_start_ns;
	raised = cpu->raised_ns[vec];
	cpu->raised_ns[vec] = 0;
	if (!start) {
		count_lost(IRQ_LOST_UNPAIRED_EXIT);
		return 0;
	}
	cpu->soft_start_ns = 0;
	now = bpf_ktime_get_ns();
	stat = stat_of(IRQ_KIND_SOFT, vec);
	if (!stat)
		return 0;
	add_time(stat, now - start);
	if (raised && raised <= start) {
		delay = start - raised;
		stat->raised += 1;
		stat->delay_ns += delay;
		if (delay > stat->delay_max_ns)
			stat->delay_max_ns = delay;
		slot = log2_floor(delay);
		slot = slot < IRQ_HIST_SLOTS ? slot : IRQ_HIST_SLOTS - 1;
		asm volatile("" : "+r"(slot));
		stat->delay_hist[slot & (IRQ_HIST_SLOTS - 1)] += 1;
	}
	return 0;
}
