"""Naming what the kernel and processes hand over as addresses: kernel symbols (kallsyms), user
symbols (ELF), file:line (DWARF), whole kernel stacks and lock callers."""
