"""A dead sender's own frames named from its executable: a process killed by its own fault
is gone before the drain reads /proc/PID/maps, but the program recorded its executable's
path, inode and where its text was mapped (mm->start_code: the lowest executable
segment's address plus the load bias, as load_elf_binary sets it)."""

from __future__ import annotations

import os
from bisect import bisect_right

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ktop.safefs import open_regular

MAX_FILE_BYTES = 256 << 20
MAX_SYMBOLS = 500_000
KEPT = 32  # executables' tables kept

_Table = tuple[int, list[int], list[tuple[int, str]]]  # (lowest exec vaddr, starts, (end, name))
_tables: dict[tuple[str, int], _Table | None] = {}


def _load(path: str, inode: int) -> _Table | None:
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_ino != inode or info.st_size > MAX_FILE_BYTES:
            return None
        elf = ELFFile(f)
        lowest = min((seg["p_vaddr"] for seg in elf.iter_segments()
                      if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1), default=None)
        if lowest is None:
            return None
        functions: list[tuple[int, int, str]] = []
        for name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(name)
            if section is None or not hasattr(section, "iter_symbols"):
                continue
            for i, symbol in enumerate(section.iter_symbols()):
                if i >= MAX_SYMBOLS:
                    break
                if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_value"]:
                    start = symbol["st_value"]
                    functions.append((start, start + max(1, symbol["st_size"]), symbol.name))
            if functions:
                break
        functions.sort()
        return lowest, [s for s, _, _ in functions], [(e, n) for _, e, n in functions]


def name_in_executable(path: str, inode: int, start_code: int, address: int) -> str | None:
    """"main+0x1a" for an address in the executable's text, None when not named."""
    key = (path, inode)
    if key not in _tables:
        if len(_tables) >= KEPT:
            _tables.clear()
        try:
            _tables[key] = _load(path, inode)
        except (OSError, ELFError, ValueError, KeyError):
            _tables[key] = None
    table = _tables[key]
    if table is None:
        return None
    lowest, starts, rest = table
    vaddr = address - (start_code - lowest)
    at = bisect_right(starts, vaddr) - 1
    if at < 0 or vaddr >= rest[at][0]:
        return None
    return f"{rest[at][1]}+{vaddr - starts[at]:#x}"
