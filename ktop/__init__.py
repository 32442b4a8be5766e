"""ktop: a live view of what the Linux kernel is doing, in the terminal."""

__version__ = "0.1.0"
