"""Kernel symbolization from /proc/kallsyms: parsed once, looked up by binary search."""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
import os
import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

KERNEL_MODULE = "[kernel.kallsyms]"  # perf's name for the core kernel image

# A kernel function is never this long: an address this far past the nearest symbol lies in
# a gap (or past the end of text), and naming it after that symbol would be a lie.
MAX_SYMBOL_SPAN = 256 * 1024
# Addresses named lately, kept for the next lookup: every refresh names the same hot ones.
# Bounded so that days of new stacks do not grow it (bench/RESULTS.md: Memory): both generations.
RESOLVED_KEPT = 8192

KPTR_RESTRICT = "/proc/sys/kernel/kptr_restrict"
_UNNAMED = object()  # not in the older generation of names
_JOINED = 4096  # names joined into one string at a time while parsing
NAMES_PER_BLOCK = 32  # names compressed together (one named: ~5 us)
_first = operator.itemgetter(0)

# kallsyms markers that end a region rather than start a function. Exact names: real
# functions such as __stop_tty or __end_swap_bio_read start with the same letters.
_END_MARKERS = frozenset({"_etext", "_einittext", "_end", "_edata", "__bss_stop", "__end_rodata"})

# Idle functions outside .cpuidle.text on some kernels, as perf's symbol__is_idle() lists them.
IDLE_FUNCTIONS = frozenset(
    {
        "acpi_idle_do_entry", "acpi_processor_ffh_cstate_enter", "arch_cpu_idle",
        "cpu_idle", "cpu_startup_entry", "default_idle", "do_idle", "idle_cpu",
        "intel_idle", "intel_idle_ibrs", "mwait_idle", "native_safe_halt", "poll_idle",
        "pv_native_safe_halt", "psw_idle", "ppc64_runlatch_off", "default_idle_call",
        "cpuidle_enter_state", "cpuidle_idle_call", "arch_cpu_idle_enter", "halt",
    }
)
# The region markers ktop looks up by name (the lock, scheduler, idle and text ranges):
# with the idle functions, the names found by name, kept as read (the names are compressed).
MARKERS = frozenset({"__lock_text_start", "__lock_text_end", "__sched_text_start",
                     "__sched_text_end", "__cpuidle_text_start", "__cpuidle_text_end",
                     "_stext", "_etext"})


def hidden_reason(path: str | None = None) -> str:
    """Why /proc/kallsyms shows every address as 0 to this process, and the fix: at
    kptr_restrict=2 the kernel hides them even from root (kallsyms_show_value())."""
    try:
        with open(path or KPTR_RESTRICT) as f:
            restrict = int(f.read().strip())
    except (OSError, ValueError):
        restrict = -1
    if restrict >= 2:
        return ("kernel addresses are hidden even from root (kernel.kptr_restrict=2): "
                "`sysctl kernel.kptr_restrict=1` shows them to root")
    if os.geteuid() != 0:
        return ("kernel addresses are hidden (kptr_restrict): run as root, "
                "or `sysctl kernel.kptr_restrict=0`")
    return ("kernel addresses are hidden from this process (no CAP_SYSLOG): run ktop with "
            "CAP_SYSLOG, or `sysctl kernel.kptr_restrict=0`")


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    offset: int
    module: str  # KERNEL_MODULE or "[ext4]", "[bpf]"
    _text: str | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        """'symbol+0xoff', made once: every stack that passes here shares the one string
        (Kallsyms.lookup memoizes this object), so totals kept for hours hold no copies.
        (Slots, not a cached_property's __dict__: thousands are kept.)"""
        text = self._text
        if text is None:
            text = f"{self.name}+{self.offset:#x}"
            object.__setattr__(self, "_text", text)
        return text


class Kallsyms:
    """A sorted table of kernel symbols with lookups both ways."""

    def __init__(self, entries: list[tuple[int, str, str, str]]) -> None:
        """entries: (address, type letter, name, module) in any order."""
        entries = sorted((e for e in entries if e[0]), key=operator.itemgetter(0))
        module_ids: dict[str, int] = {}
        self._set(array("Q", (e[0] for e in entries)),
                  _PackedStrings(_Strings([e[2] for e in entries])),
                  array("H", (module_ids.setdefault(e[3], len(module_ids)) for e in entries)),
                  list(module_ids))

    def _set(self, addresses: array, names: _PackedStrings, module_ids: array,
             module_names: list[str]) -> None:
        # The kernel's symbols stay as long as ktop runs: kept compact, as addresses in machine
        # words, names compressed, a small number per module (bench/RESULTS.md: Memory).
        self._addresses = addresses
        self._names = names
        self._module_ids = module_ids
        self._module_names = module_names
        self.hidden = not addresses  # kptr_restrict shows every address as 0
        # Every collector resolves the same hot addresses each interval: remember them here,
        # once for all, bounded over days of running.
        self._resolved: dict[int, Resolved | None] = {}
        self._resolved_before: dict[int, Resolved | None] = {}

    @classmethod
    def from_text(cls, text: str) -> Kallsyms:
        return cls.from_lines(text.splitlines())

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> Kallsyms:
        """Parsed into columns as read, then put in address order: a tuple and three strings
        per symbol made ~39 MiB of small objects at start-up to keep 4.6 (122,000 symbols),
        and the arenas they took stayed. Ties keep the order read, as a stable sort does."""
        addresses, module_ids, ends = array("Q"), array("H"), array("I")
        modules: dict[str, int] = {}
        chunks: list[str] = []  # the names, joined a few thousand at a time
        pending: list[str] = []
        length = 0
        for parts in map(str.split, lines):
            if len(parts) < 3:
                continue
            try:
                address = int(parts[0], 16)
            except ValueError:
                continue
            if not address:
                continue
            module = parts[3] if len(parts) > 3 else KERNEL_MODULE
            if module != KERNEL_MODULE:
                module = module if module.startswith("[") else f"[{module}]"
            addresses.append(address)
            module_ids.append(modules.setdefault(module, len(modules)))
            pending.append(parts[2])
            length += len(parts[2])
            ends.append(length)
            if len(pending) >= _JOINED:
                chunks.append("".join(pending))
                pending.clear()
        chunks.append("".join(pending))
        names = _Strings.joined("".join(chunks), ends)
        del chunks, pending
        # /proc/kallsyms is in address order but for a few runs (modules, BPF programs):
        # merge the runs, entry by entry.
        starts = [0] + [i for i in range(1, len(addresses)) if addresses[i] < addresses[i - 1]]
        if len(starts) > 1:
            runs = [zip(addresses[a:b], range(a, b))
                    for a, b in zip(starts, [*starts[1:], len(addresses)])]
            order = array("I", (i for _address, i in heapq.merge(*runs, key=_first)))
            addresses = array("Q", (addresses[i] for i in order))
            module_ids = array("H", (module_ids[i] for i in order))
            names = names.reordered(order)
        kallsyms = cls.__new__(cls)
        kallsyms._set(addresses, _PackedStrings(names), module_ids, list(modules))
        return kallsyms

    @classmethod
    def load(cls, path: str = "/proc/kallsyms") -> Kallsyms:
        with open(path, encoding="ascii", errors="replace") as f:
            return cls.from_lines(f)

    def __len__(self) -> int:
        return len(self._addresses)

    def lookup(self, address: int) -> Resolved | None:
        try:
            return self._resolved[address]
        except KeyError:
            pass
        # Two generations: when the newer fills, the older goes, and an address asked for
        # meanwhile moves up with its object. Emptying all at once named the hot addresses
        # again, as new objects and strings beside the old ones the kept stacks still held.
        resolved = self._resolved_before.get(address, _UNNAMED)
        if resolved is _UNNAMED:
            resolved = self._lookup(address)
        if len(self._resolved) >= RESOLVED_KEPT // 2:
            self._resolved_before, self._resolved = self._resolved, {}
        self._resolved[address] = resolved
        return resolved

    def _lookup(self, address: int) -> Resolved | None:
        i = bisect.bisect_right(self._addresses, address) - 1
        if i < 0:
            return None
        name = self._names[i]
        offset = address - self._addresses[i]
        if offset > MAX_SYMBOL_SPAN or name in _END_MARKERS:
            return None
        return Resolved(name, offset, self._module_names[self._module_ids[i]])

    def format(self, address: int) -> str:
        """'symbol+0xoff', or the bare hex address when nothing covers it."""
        resolved = self.lookup(address)
        return str(resolved) if resolved else f"{address:#x}"

    def address_of(self, name: str) -> int | None:
        """The lowest address of `name` (only a few marker symbols are ever asked for)."""
        i = self._names.index(name)
        return None if i is None else self._addresses[i]

    def range_of(self, start: str, end: str) -> tuple[int, int] | None:
        """The [start, end) range between two marker symbols, e.g. __lock_text_start/end."""
        lo, hi = self.address_of(start), self.address_of(end)
        if lo is None or hi is None or hi <= lo:
            return None
        return lo, hi

    def extent(self, name: str) -> tuple[int, int] | None:
        """[start, end) of the function `name` (its lowest address, up to the next symbol)."""
        i = self._names.index(name)
        if i is None:
            return None
        start = self._addresses[i]
        j = bisect.bisect_right(self._addresses, start)
        end = self._addresses[j] if j < len(self._addresses) else start + 1
        return start, min(end, start + MAX_SYMBOL_SPAN)

    def exact(self, address: int) -> str | None:
        """The symbol at exactly this address (global locks are named by their variable)."""
        i = bisect.bisect_left(self._addresses, address)
        if i < len(self._addresses) and self._addresses[i] == address:
            return self._names[i]
        return None


class _Strings:
    """A read-only list of strings stored as one string and the offset where each one ends."""

    def __init__(self, strings: list[str]) -> None:
        self._text = "".join(strings)
        self._ends = array("I", itertools.accumulate(map(len, strings)))

    @classmethod
    def joined(cls, text: str, ends: array) -> _Strings:
        strings = cls.__new__(cls)
        strings._text, strings._ends = text, ends
        return strings

    def reordered(self, order: Iterable[int]) -> _Strings:
        """The same strings, the i-th of the result being self[order[i]]."""
        chunks: list[str] = []
        pending: list[str] = []
        ends, length = array("I"), 0
        for i in order:
            name = self[i]
            pending.append(name)
            length += len(name)
            ends.append(length)
            if len(pending) >= _JOINED:
                chunks.append("".join(pending))
                pending.clear()
        chunks.append("".join(pending))
        return _Strings.joined("".join(chunks), ends)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> str:
        return self._text[self._ends[i - 1] if i else 0 : self._ends[i]]

    def index(self, string: str) -> int | None:
        """The first i with self[i] == string, or None."""
        if not string:
            return None
        start = self._text.find(string)
        while start >= 0:
            i = bisect.bisect_right(self._ends, start)  # the string that holds `start`
            if (self._ends[i - 1] if i else 0) == start and self._ends[i] == start + len(string):
                return i
            start = self._text.find(string, start + 1)
        return None


class _PackedStrings:
    """The same strings, compressed NAMES_PER_BLOCK at a time (122,000 kernel names: 2.97 MB
    as one string, 0.76 compressed); the few looked up by name (MARKERS, IDLE_FUNCTIONS)
    found once as read."""

    def __init__(self, strings: _Strings) -> None:
        self._ends = strings._ends
        packed: list[bytes] = []
        self._block_ends = array("I")
        for first in range(0, len(self._ends), NAMES_PER_BLOCK):
            last = min(first + NAMES_PER_BLOCK, len(self._ends)) - 1
            block = strings._text[self._ends[first - 1] if first else 0 : self._ends[last]]
            packed.append(zlib.compress(block.encode("utf-8", "surrogatepass")))
            self._block_ends.append((self._block_ends[-1] if self._block_ends else 0)
                                    + len(packed[-1]))
        self._packed = b"".join(packed)
        self._known = {name: i for name in MARKERS | IDLE_FUNCTIONS
                       if (i := strings.index(name)) is not None}

    def __len__(self) -> int:
        return len(self._ends)

    def _block(self, block: int) -> str:
        return zlib.decompress(self._packed[self._block_ends[block - 1] if block else 0 :
                                            self._block_ends[block]]).decode("utf-8", "surrogatepass")

    def __getitem__(self, i: int) -> str:
        if i < 0:
            i += len(self._ends)
        first = i - i % NAMES_PER_BLOCK
        base = self._ends[first - 1] if first else 0
        return self._block(i // NAMES_PER_BLOCK)[
            (self._ends[i - 1] if i else 0) - base : self._ends[i] - base]

    def index(self, string: str) -> int | None:
        """The first i with self[i] == string, or None (a name ktop does not look up by name
        costs a pass over every block)."""
        if string in self._known or string in MARKERS or string in IDLE_FUNCTIONS:
            return self._known.get(string)
        for block in range(len(self._block_ends)):
            found = _Strings.joined(self._block(block), self._block_ends_of(block)).index(string)
            if found is not None:
                return block * NAMES_PER_BLOCK + found
        return None

    def _block_ends_of(self, block: int) -> array:
        first = block * NAMES_PER_BLOCK
        base = self._ends[first - 1] if first else 0
        return array("I", (end - base for end in self._ends[first : first + NAMES_PER_BLOCK]))


class IdleClassifier:
    """Tells whether a leaf address is the CPU idling (hidden by default, as perf top can)."""

    def __init__(self, kallsyms: Kallsyms) -> None:
        self._kallsyms = kallsyms
        self._range = kallsyms.range_of("__cpuidle_text_start", "__cpuidle_text_end")

    def code_ranges(self) -> tuple[tuple[int, int], ...]:
        """[start, end) of the idle code only the idle loop runs, merged, lowest first: the
        sampler remembers the idle task's stack by where it was interrupted there. Not
        idle_cpu(): the scheduler calls it from interrupts too."""
        spans = [self._range] if self._range else []
        spans += (span for name in sorted(IDLE_FUNCTIONS - {"idle_cpu"})
                  if (span := self._kallsyms.extent(name)) is not None)
        merged: list[tuple[int, int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return tuple(merged)

    def is_idle(self, address: int) -> bool:
        if self._range and self._range[0] <= address < self._range[1]:
            return True
        resolved = self._kallsyms.lookup(address)
        return bool(resolved and resolved.name in IDLE_FUNCTIONS)
