"""Interrupts: hard-IRQ handlers and softirq vectors, the CPU time no process owns."""
