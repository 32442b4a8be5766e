"""Kernel stacks named: each address "symbol+0xoff", innermost first, without the frames of
the tracing machinery that took the stack; and for lock waits, the caller as `perf lock
contention` means it (the first frame outside the lock and scheduler internals, judged by
the kernel's own `__lock_text` and `__sched_text` ranges rather than by skipping a fixed
number of frames) and the global a lock lives in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ktop.symbolize.kernel import KERNEL_MODULE, Kallsyms

# Frames of the tracing machinery itself (and, above them, the BPF program: named "[bpf]"
# with bpf_jit_kallsyms, hex without), innermost in every stack a tracepoint takes; they say
# nothing about who waited or made the I/O.
TRACING_PREFIXES = (
    "bpf_prog_",
    "bpf_trampoline_",
    "bpf_trace_run",
    "__bpf_trace_",
    "__traceiter_",
    "trace_contention_",
    "trace_call_bpf",
    "perf_trace_",
)
TRACING_DEPTH = 6  # they are all within the innermost few frames
# Addresses named lately, each with whether it is a tracing frame: a busy machine's wakers are
# new stacks interval after interval (an interrupt lands on a new instruction each time), but
# made of the same few hundred return addresses. Emptied whole when full.
FRAMES_KEPT = 2048


class KernelFrames:
    """Kernel addresses to frames, the tracing machinery's left out."""

    def __init__(self, symbols: Kallsyms | Callable[[int], str] | None = None) -> None:
        """symbols: a Kallsyms, or any address -> "symbol+0xoff" (default: bare hex)."""
        self._kallsyms = symbols if isinstance(symbols, Kallsyms) else None
        if isinstance(symbols, Kallsyms):
            symbols = symbols.format
        self._format: Callable[[int], str] = symbols or (lambda address: f"{address:#x}")
        self._named: dict[int, tuple[str, bool]] = {}

    def format(self, address: int) -> str:
        return self._frame(address)[0]

    def _frame(self, address: int) -> tuple[str, bool]:
        """(the frame's name, whether it is the tracing machinery's), cached."""
        named = self._named.get(address)
        if named is None:
            if len(self._named) >= FRAMES_KEPT:
                self._named.clear()
            frame = self._format(address)
            named = self._named[address] = (frame, self._is_tracing(address, frame))
        return named

    def _is_tracing(self, address: int, frame: str) -> bool:
        if frame.startswith(TRACING_PREFIXES):
            return True
        resolved = self._kallsyms.lookup(address) if self._kallsyms else None
        return resolved is not None and resolved.module == "[bpf]"

    def without_tracing(self, addresses: Sequence[int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """(addresses, frames) from past the outermost tracing frame among the innermost
        TRACING_DEPTH (an unnamed BPF frame may sit between two of them)."""
        frames = [self.format(a) for a in addresses]
        start = self._past_tracing(addresses)
        return tuple(addresses[start:]), tuple(frames[start:])

    def named_until(self, addresses: Sequence[int],
                    last: Callable[[str], bool]) -> tuple[tuple[str, ...], int]:
        """The frames of without_tracing, down to the first that is `last` only: the rest
        are not named at all (a waker in an interrupt: what it interrupted, ~half of its
        frames); and how many addresses that read (the rest do not change its frames)."""
        frames: list[str] = []
        end = len(addresses)
        for i in range(self._past_tracing(addresses), len(addresses)):
            frame = self.format(addresses[i])
            frames.append(frame)
            if last(frame):
                end = i + 1
                break
        return tuple(frames), max(end, min(TRACING_DEPTH, len(addresses)))

    def _past_tracing(self, addresses: Sequence[int]) -> int:
        """The index past the outermost tracing frame among the innermost TRACING_DEPTH."""
        tracing = [i for i in range(min(TRACING_DEPTH, len(addresses)))
                   if self._frame(addresses[i])[1]]
        return tracing[-1] + 1 if tracing else 0


# Section markers in kallsyms: a lock past one of these is not "inside" it.
_SECTION_MARKER = re.compile(r"^(__start_|__stop_|__end_|__init_|__bss_|__per_cpu_)|^_[se][a-z]*$")

# Lock stacks named lately, kept for the next interval: bounded, as process churn brings
# new stacks without end (bench/RESULTS.md: Memory).
SYMBOLIZED_KEPT = 1024


class StackSymbolizer:
    """Kernel stacks to frames and caller, judged by the kernel's lock/sched text ranges."""

    def __init__(self, kallsyms: Kallsyms) -> None:
        self._kallsyms = kallsyms
        self._frames = KernelFrames(kallsyms)
        ranges = (
            kallsyms.range_of("__lock_text_start", "__lock_text_end"),
            kallsyms.range_of("__sched_text_start", "__sched_text_end"),
        )
        self._internal = tuple(r for r in ranges if r)
        self._text = kallsyms.range_of("_stext", "_etext")
        self._cache: dict[tuple[int, ...], tuple[tuple[str, ...], str]] = {}

    def is_internal(self, address: int) -> bool:
        """Inside the spinlock (__lock_text) or mutex/rwsem/scheduler (__sched_text) code."""
        return any(lo <= address < hi for lo, hi in self._internal)


    def resolve(self, addresses: tuple[int, ...]) -> tuple[tuple[str, ...], str]:
        """(frames "symbol+0xoff" innermost first without the tracing frames, caller)."""
        cached = self._cache.get(addresses)
        if cached is None:
            cached = self._resolve(addresses)
            if len(self._cache) > SYMBOLIZED_KEPT:
                self._cache.clear()
            self._cache[addresses] = cached
        return cached

    def _resolve(self, addresses: tuple[int, ...]) -> tuple[tuple[str, ...], str]:
        kept, frames = self._frames.without_tracing(addresses)
        if not frames:  # all tracing: better than nothing
            kept, frames = addresses, tuple(map(self._kallsyms.format, addresses))
        if not frames:
            return (), "[no kernel stack]"
        for address, frame in zip(kept, frames):
            if not self.is_internal(address):
                return frames, frame
        return frames, frames[0]  # all internal: the innermost lock function says the most

    def lock_symbol(self, address: int) -> str:
        """The global variable a lock lives in: an exact kallsyms match, or symbol+0xoff inside
        a kernel data symbol (as perf's -l names it); "" for locks in allocated memory."""
        exact = self._kallsyms.exact(address)
        if exact and not _SECTION_MARKER.match(exact):
            return exact
        if self._text and self._text[0] <= address < self._text[1]:
            return ""  # no lock lives in code: the nearest symbol would be a function
        resolved = self._kallsyms.lookup(address)
        if resolved is None or resolved.module != KERNEL_MODULE:
            return ""
        if _SECTION_MARKER.match(resolved.name) or resolved.name.startswith("__pfx_"):
            return ""  # without CONFIG_KALLSYMS_ALL only markers precede data: not a name
        return str(resolved)
