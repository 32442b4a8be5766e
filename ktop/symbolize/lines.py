"""Kernel address -> "file:line" from a debug vmlinux, decoding DWARF line programs per CU."""

from __future__ import annotations

import io
import mmap
import os
import posixpath
import struct
from array import array
from bisect import bisect_right
from typing import Any

from elftools.common.exceptions import DWARFError, ELFError
from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DwarfConfig, DWARFInfo
from elftools.elf.elffile import ELFFile

from ktop.safefs import open_regular
from ktop.symbolize.user import ELF_ERRORS

_KALLSYMS = "/proc/kallsyms"
# Symbols present in both vmlinux and kallsyms whose difference is the KASLR slide.
_KASLR_ANCHORS = ("_text", "_stext")
_DEBUG_PATHS = (
    "/usr/lib/debug/boot/vmlinux-{release}",
    "/usr/lib/debug/lib/modules/{release}/vmlinux",
)

# Malformed DWARF can make pyelftools raise what a malformed ELF can, and DWARFError.
_ERRORS: tuple[type[BaseException], ...] = (*ELF_ERRORS, DWARFError)

_SHF_COMPRESSED = 0x800
_SHF_EXECINSTR = 0x4
_LOOKUP_CACHE_MAX = 65536

# Only what line lookup needs; pyelftools' get_dwarf_info() would read every debug
# section (a gigabyte for vmlinux) into memory.
_LEAN_SECTIONS = {
    "debug_info_sec": ".debug_info",
    "debug_aranges_sec": ".debug_aranges",
    "debug_abbrev_sec": ".debug_abbrev",
    "debug_str_sec": ".debug_str",
    "debug_line_sec": ".debug_line",
    "debug_ranges_sec": ".debug_ranges",
    "debug_addr_sec": ".debug_addr",
    "debug_str_offsets_sec": ".debug_str_offsets",
    "debug_line_str_sec": ".debug_line_str",
    "debug_rnglists_sec": ".debug_rnglists",
}
_UNUSED_SECTIONS = (
    "debug_frame_sec",
    "eh_frame_sec",
    "debug_loc_sec",
    "debug_pubtypes_sec",
    "debug_pubnames_sec",
    "debug_loclists_sec",
    "debug_sup_sec",
    "gnu_debugaltlink_sec",
    "debug_types_sec",
)


class _SectionView(io.RawIOBase):
    """A seekable read-only window on an mmap: section bytes without copying them."""

    def __init__(self, mm: mmap.mmap, base: int, size: int) -> None:
        super().__init__()
        self._mm = mm
        self._base = base
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            offset += self._size
        if offset < 0:
            raise ValueError("negative seek position")
        self._pos = offset
        return offset

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        start = min(self._pos, self._size)
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        self._pos = end
        return self._mm[self._base + start : self._base + end]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _lean_dwarfinfo(elf: ELFFile, mm: mmap.mmap) -> DWARFInfo | None:
    """DWARFInfo over mmap'ed sections, or None when the plain reader must be used."""
    if elf["e_type"] == "ET_REL" or elf.has_section(".zdebug_info"):
        return None  # needs relocation or decompression
    kwargs: dict[str, DebugSectionDescriptor | None] = dict.fromkeys(_UNUSED_SECTIONS)
    for arg, name in _LEAN_SECTIONS.items():
        sec = elf.get_section_by_name(name)
        if sec is None:
            kwargs[arg] = None
            continue
        off, size = sec["sh_offset"], sec["sh_size"]
        if sec["sh_type"] == "SHT_NOBITS" or sec["sh_flags"] & _SHF_COMPRESSED:
            return None
        if off < 0 or off + size > len(mm):
            raise ELFError(f"section {name} lies outside the file")
        kwargs[arg] = DebugSectionDescriptor(
            stream=_SectionView(mm, off, size),
            name=name,
            global_offset=off,
            size=size,
            address=sec["sh_addr"],
        )
    if kwargs["debug_info_sec"] is None:
        return None
    config = DwarfConfig(
        little_endian=elf.little_endian,
        default_address_size=elf.elfclass // 8,
        machine_arch=elf.get_machine_arch(),
    )
    return DWARFInfo(config=config, **kwargs)  # type: ignore[arg-type]


def _symbol_value(elf: ELFFile, mm: mmap.mmap, names: tuple[str, ...]) -> dict[str, int]:
    """Values of a few named symbols, scanning .symtab with struct (pyelftools is slow here)."""
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        return {}
    strhdr = elf.get_section(symtab["sh_link"]).header
    fmt = ("<" if elf.little_endian else ">") + ("IBBHQQ" if elf.elfclass == 64 else "IIIBBH")
    entsize = struct.calcsize(fmt)
    off, size = symtab["sh_offset"], symtab["sh_size"]
    soff, ssize = strhdr["sh_offset"], strhdr["sh_size"]
    if off + size > len(mm) or soff + ssize > len(mm):
        return {}
    wanted = {n.encode() + b"\0": n for n in names}
    found: dict[str, int] = {}
    data = mm[off : off + size - size % entsize]
    for ent in struct.iter_unpack(fmt, data):
        name_off, value = (ent[0], ent[4]) if elf.elfclass == 64 else (ent[0], ent[1])
        if name_off >= ssize:
            continue
        for raw, name in wanted.items():
            if name not in found and mm[soff + name_off : soff + name_off + len(raw)] == raw:
                found[name] = value
    return found


def _kallsyms_values(path: str, names: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in names and parts[2] not in found:
                    value = int(parts[0], 16)
                    if value:  # zeros mean kptr_restrict hides addresses
                        found[parts[2]] = value
                    if len(found) == len(names):
                        break
    except (OSError, ValueError):
        return {}
    return found


class _CULines:
    """Sorted line rows of one CU; end-of-sequence rows carry line 0."""

    __slots__ = ("addrs", "files", "lines", "names")

    def __init__(self, rows: list[tuple[int, bool, int, int]], names: dict[int, str]) -> None:
        # End rows sort before a sequence starting at the same address, so the start wins.
        rows.sort(key=lambda r: (r[0], not r[1]))
        self.addrs = array("Q", (r[0] for r in rows))
        self.files = array("l", (-1 if r[1] else r[2] for r in rows))
        self.lines = array("l", (r[3] for r in rows))
        self.names = names

    def lookup(self, address: int) -> str | None:
        i = bisect_right(self.addrs, address) - 1
        if i < 0 or self.files[i] < 0:
            return None
        name = self.names.get(self.files[i])
        if name is None or self.lines[i] <= 0:
            return None
        return f"{name}:{self.lines[i]}"


_NO_LINES = _CULines([], {})


def _decode(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value) if value is not None else ""


class KernelLineTable:
    """Address -> "file:line", decoding only the CU that covers each looked-up address."""

    def __init__(
        self, stream: io.BufferedReader, mm: mmap.mmap, elf: ELFFile, dwarf: DWARFInfo
    ) -> None:
        self._stream = stream
        self._mm = mm
        self._elf = elf
        self._dwarf = dwarf
        self._bias = 0  # runtime - link-time address (KASLR)
        self._text: list[tuple[int, int]] = sorted(
            (s["sh_addr"], s["sh_addr"] + s["sh_size"])
            for s in elf.iter_sections()
            if s["sh_flags"] & _SHF_EXECINSTR and s["sh_size"]
        )
        self._text_starts = [t[0] for t in self._text]
        self._aranges: Any = None
        self._aranges_loaded = False
        self._die_index: tuple[list[int], list[tuple[int, int, int]]] | None = None
        self._cus: dict[int, _CULines] = {}
        self._cache: dict[int, str | None] = {}

    @classmethod
    def open(
        cls, path: str | None = None, kernel_release: str | None = None
    ) -> KernelLineTable | None:
        """path given (--vmlinux) or /usr/lib/debug/boot/vmlinux-<release>; None if absent or
        unreadable/has no DWARF."""
        running = os.uname().release
        release = kernel_release or running
        candidates = [path] if path else [p.format(release=release) for p in _DEBUG_PATHS]
        for candidate in candidates:
            table = cls.from_elf(candidate)
            if table is None:
                continue
            if release == running:
                table._bias = table._kaslr_bias()
            return table
        return None

    @classmethod
    def from_elf(cls, path: str) -> KernelLineTable | None:
        """Any ELF with DWARF line info (vmlinux or userland); addresses are link-time ones."""
        try:
            # Regular files only, checked on what is opened: a FIFO or device given as
            # --vmlinux (or swapped in for it) could block or act on open.
            f = open(open_regular(path, follow_links=True), "rb")
        except (OSError, ValueError):
            return None
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            f.close()
            return None
        try:
            elf = ELFFile(f)
            if not elf.has_dwarf_info(strict=True):
                raise ELFError("no DWARF")
            dwarf = _lean_dwarfinfo(elf, mm) or elf.get_dwarf_info(follow_links=False)
            if dwarf.debug_info_sec is None or dwarf.debug_line_sec is None:
                raise ELFError("no line info")
            return cls(f, mm, elf, dwarf)
        except _ERRORS:
            mm.close()
            f.close()
            return None

    def close(self) -> None:
        self._mm.close()
        self._stream.close()

    def lookup(self, address: int) -> str | None:
        if address in self._cache:
            return self._cache[address]
        try:
            result = self._lookup(address - self._bias)
        except _ERRORS:
            result = None
        if len(self._cache) >= _LOOKUP_CACHE_MAX:
            self._cache.clear()
        self._cache[address] = result
        return result

    def _lookup(self, addr: int) -> str | None:
        # Cheap reject for addresses outside this image (e.g. module code) before
        # anything might scan all CUs.
        i = bisect_right(self._text_starts, addr) - 1
        if i < 0 or addr >= self._text[i][1]:
            return None
        cu_offset = self._cu_offset_for(addr)
        if cu_offset is None:
            return None
        lines = self._cus.get(cu_offset)
        if lines is None:
            try:
                lines = self._decode_cu(cu_offset)
            except _ERRORS:
                lines = _NO_LINES  # a broken CU is not worth decoding again
            self._cus[cu_offset] = lines
        return lines.lookup(addr)

    def _cu_offset_for(self, addr: int) -> int | None:
        if not self._aranges_loaded:
            self._aranges_loaded = True
            aranges = self._dwarf.get_aranges()
            self._aranges = aranges if aranges is not None and aranges.entries else None
        if self._aranges is not None:
            off = self._aranges.cu_offset_at_addr(addr)
            if off is not None:
                return int(off)
        # No .debug_aranges (clang's default) or it misses this CU: use top-DIE ranges.
        if self._die_index is None:
            self._die_index = self._build_die_index()
        starts, ranges = self._die_index
        i = bisect_right(starts, addr) - 1
        # CU ranges rarely overlap, so an enclosing one is at most a few entries back.
        for j in range(i, max(i - 16, -1), -1):
            lo, hi, off = ranges[j]
            if lo <= addr < hi:
                return off
        return None

    def _build_die_index(self) -> tuple[list[int], list[tuple[int, int, int]]]:
        ranges: list[tuple[int, int, int]] = []
        range_lists = None
        # Parsing a top DIE means parsing its abbrev table (slow in pyelftools), so only do
        # it for the CUs .debug_aranges does not already describe.
        covered = {e.info_offset for e in self._aranges.entries} if self._aranges else set()
        for cu in self._dwarf.iter_CUs():
            if cu.cu_offset in covered:
                continue
            try:
                top = cu.get_top_DIE()
                attrs = top.attributes
                low_attr = attrs.get("DW_AT_low_pc")
                low = int(low_attr.value) if low_attr is not None else 0
                if low_attr is not None and "DW_AT_high_pc" in attrs:
                    high_attr = attrs["DW_AT_high_pc"]
                    high = int(high_attr.value)
                    if high_attr.form != "DW_FORM_addr" and not high_attr.form.startswith(
                        "DW_FORM_addrx"
                    ):
                        high += low  # DWARF 4+: high_pc as a length
                    ranges.append((low, high, cu.cu_offset))
                elif "DW_AT_ranges" in attrs:
                    if range_lists is None:
                        range_lists = self._dwarf.range_lists()
                    if range_lists is None:
                        continue
                    base = low
                    for entry in range_lists.get_range_list_at_offset(
                        attrs["DW_AT_ranges"].value, cu=cu
                    ):
                        if hasattr(entry, "base_address"):
                            base = entry.base_address
                            continue
                        add = 0 if entry.is_absolute else base
                        begin, end = entry.begin_offset + add, entry.end_offset + add
                        if begin < end:
                            ranges.append((begin, end, cu.cu_offset))
            except _ERRORS:
                continue
        ranges.sort()
        return [r[0] for r in ranges], ranges

    def _decode_cu(self, cu_offset: int) -> _CULines:
        cu = self._dwarf.get_CU_at(cu_offset)
        lineprog = self._dwarf.line_program_for_CU(cu)
        if lineprog is None:
            return _NO_LINES
        comp_attr = cu.get_top_DIE().attributes.get("DW_AT_comp_dir")
        version = lineprog["version"]
        files = lineprog["file_entry"]
        dirs = [_decode(d) for d in lineprog["include_directory"]]
        comp_dir = _decode(comp_attr.value) if comp_attr is not None else ""
        if not comp_dir and version >= 5 and dirs:
            comp_dir = dirs[0]
        names: dict[int, str] = {}
        rows: list[tuple[int, bool, int, int]] = []
        for entry in lineprog.get_entries():
            state = entry.state
            if state is None:
                continue
            if state.file not in names and not state.end_sequence:
                names[state.file] = _file_name(version, files, dirs, comp_dir, state.file)
            rows.append((state.address, state.end_sequence, state.file, state.line))
        return _CULines(rows, {k: v for k, v in names.items() if v})

    def _kaslr_bias(self) -> int:
        try:
            linked = _symbol_value(self._elf, self._mm, _KASLR_ANCHORS)
        except _ERRORS:
            return 0
        running = _kallsyms_values(_KALLSYMS, _KASLR_ANCHORS)
        for name in _KASLR_ANCHORS:
            if name in linked and name in running:
                return running[name] - linked[name]
        return 0


def _file_name(version: int, files: Any, dirs: list[str], comp_dir: str, index: int) -> str:
    """Source path for a line-table file index, relative to the build directory if inside it."""
    # DWARF 5 numbers files and directories from 0 (0 = the CU itself); earlier
    # versions from 1, with directory 0 meaning the compilation directory.
    idx = index if version >= 5 else index - 1
    if not 0 <= idx < len(files):
        return ""
    entry = files[idx]
    name = _decode(entry.name)
    dir_index = entry.dir_index
    if dir_index == 0:
        directory = comp_dir or (dirs[0] if version >= 5 and dirs else "")
    else:
        i = dir_index if version >= 5 else dir_index - 1
        directory = dirs[i] if 0 <= i < len(dirs) else ""
        # Other directories are relative to the compilation directory.
        if directory and not posixpath.isabs(directory) and comp_dir:
            directory = posixpath.join(comp_dir, directory)
    path = posixpath.normpath(posixpath.join(directory, name)) if directory else name
    base = posixpath.normpath(comp_dir) if comp_dir else ""
    if base not in ("", ".", "/") and path.startswith(base + "/"):
        path = path[len(base) + 1 :]
    return path
