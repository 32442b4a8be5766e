"""The block I/O pane: block_rq_* tracepoints counted in the kernel, by process and disk."""
