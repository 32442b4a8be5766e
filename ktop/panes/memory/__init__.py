"""The memory pane: reclaim and compaction stalls (bpf/memory.bpf.c), kswapd apart."""
