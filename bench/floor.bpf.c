/* The floor under the waits pane's cost (bench/waits_cost.py): programs that do nothing,
 * attached where bpf/waits.bpf.c's are. */
int empty(struct bpf_raw_tracepoint_args *ctx)
{
	return 0;
}
