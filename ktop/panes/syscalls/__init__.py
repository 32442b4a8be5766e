"""The syscalls pane: raw_syscalls counted in the kernel, by call, process and errno."""
