/* Structs shared by bpf/irqs.bpf.c and ktop/panes/irqs/collector.py (which unpacks them with
 * struct and checks the key sizes). */
#ifndef KTOP_IRQS_H
#define KTOP_IRQS_H

#include "ktop.h"

#define IRQ_HIST_SLOTS 32		/* log2 slots in ns: slot k holds [2^k, 2^(k+1)) ns */
#define IRQ_NAME_LEN 32

enum irq_kind {
	IRQ_KIND_HARD,			/* a hard-IRQ handler: number is the IRQ */
	IRQ_KIND_SOFT,			/* a softirq vector: number is the vector (NET_RX_SOFTIRQ...) */
};

/* Time per (kind, number), per CPU (a per-CPU hash: each CPU's value apart). */
struct irq_key {
	u32 kind;			/* enum irq_kind */
	u32 number;
};

struct irq_stat {
	u64 count;			/* handler runs, or softirq vector runs */
	u64 total_ns;
	u64 max_ns;
	u64 raised;			/* softirq: raises that found the vector not yet pending */
	u64 delay_ns;			/* softirq: raise-to-run delay, summed */
	u64 delay_max_ns;
	u64 delay_hist[IRQ_HIST_SLOTS];	/* softirq: raise-to-run delay, log2 ns */
};

struct irq_name {
	char name[IRQ_NAME_LEN];	/* a hard IRQ's action name (its first handler's) */
};

/* Index into the `lost` per-CPU array. */
enum irqs_lost {
	IRQ_LOST_COUNTS_FULL,		/* counts map full: the run is not counted */
	IRQ_LOST_UNPAIRED_EXIT,		/* an exit whose entry was not seen (begun before ktop) */
	IRQ_LOST_NR,
};

#endif
