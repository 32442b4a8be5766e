"""User-space stack symbolization: /proc/PID/maps + ELF symbol tables (pyelftools)."""

from __future__ import annotations

import ctypes
import functools
import io
import lzma
import math
import os
import stat
import struct
import time
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile

from ktop.model import NOT_CODE, UserFrame
from ktop.safefs import open_regular

UNKNOWN = "[unknown]"
# A "frame" whose address no code can be at: 0 or a small number, an address in the kernel's
# half, or in no executable mapping (data, heap, stack): a frame-pointer walk through code
# built without frame pointers reads such values. It ends the stack as one marker: whatever
# the walk found after it is garbage too.
MIN_CODE_ADDRESS = 0x10000  # vm.mmap_min_addr's default: nothing is mapped below
USER_ADDRESS_END = 1 << 47  # x86-64 user space ends here (4-level page tables)
DEBUG_ROOT = "/usr/lib/debug"  # separate debug files: .build-id/xx/yyyy.debug, debuglink
MAX_DEBUGDATA = 64 << 20  # MiniDebugInfo decompressed: a few MiB for the largest binaries
KEEP_TABLES = 64  # symbol tables of files kept before those no live process maps are dropped
# A table no sample has needed for this many refreshes is dropped, even if its file is still
# mapped: ktop's own start-up names LLVM and clang frames once, then never.
IDLE_REFRESHES = 60
# A table a sample needed this lately stays when no live process maps it: a binary run again
# and again with gaps between (a compile loop, a cron job) is not read again each time
# (libLLVM's table is read in ~0.5 s, with a ~3 MiB transient).
RECENT_REFRESHES = 10
MAX_STACKS_PER_PROCESS = 4096  # named stacks kept per process (a JIT makes new ones forever)
MAX_FRAMES_PER_PROCESS = 4096  # named addresses kept per process, for the same reason
# Distinct named frames shared by every process, in two generations of half this each: a
# frame named again meanwhile moves up with its object, the others go with the older one.
FRAMES_SHARED = 8192
FILE_RECHECK_S = 2.0  # how long a file's table is trusted without a stat() of the file
# What is read of one binary (any user's: it runs as root, in the collect thread). Linked
# executables and libraries have tens of sections and headers; pyelftools parses each in
# ~0.1 ms, and a forged file can claim millions. Past these its frames are [unknown].
MAX_SECTIONS = 4096
MAX_SEGMENTS = 1024
MAX_NOTES_BYTES = 1 << 16  # a note segment: a build-id note is 36 bytes
MAX_TABLE_BYTES = 64 << 20  # a symbol or string table (~2.8 million 64-bit symbols)
MAX_LOAD_CPU_S = 2.0  # CPU time spent on one binary's tables, its debug files included
UNREADABLE_KEPT = 4096  # binaries remembered as not worth reading again
NAMES_PER_BLOCK = 32  # function names compressed together (a name asked for: ~10 us)

_STT_FUNC = 2
_NAME_MASK = (1 << 56) - 1
_STT_GNU_IFUNC = 10
_STB_GLOBAL = 1
_STB_WEAK = 2
_SHN_UNDEF = 0
_SHN_LORESERVE = 0xFF00

# A malformed ELF can make pyelftools raise almost anything; a profiler must
# not die because one mapped file is odd, so all of these mean "no symbols".
ELF_ERRORS: tuple[type[BaseException], ...] = (
    ELFError,
    ConstructError,
    OSError,
    ValueError,
    struct.error,
    EOFError,
    IndexError,
    KeyError,
    TypeError,
    AttributeError,
    AssertionError,
    OverflowError,
)



class BinaryTooBig(Exception):
    """A binary whose symbols are not read: str() says what was past the bounds."""


def _check_deadline(deadline: float) -> None:
    if time.thread_time() > deadline:
        raise BinaryTooBig(f"reading its symbols took more than {MAX_LOAD_CPU_S:g} s of CPU")


# How far back to look for an enclosing symbol when the nearest one does not
# cover the address (nested/aliased symbols).
_WALK_BACK = 8


def not_code(address: int) -> UserFrame:
    """The marker that stands for an address no code can be at (and the rest of the walk)."""
    return UserFrame(f"[not code {address:#x}]", NOT_CODE)


def _plausible(address: int) -> bool:
    """Whether code could be at this address in any process, maps unseen."""
    return MIN_CODE_ADDRESS <= address < USER_ADDRESS_END


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> Callable[[str], str | None] | None:
    # libstdc++ is already loaded wherever bcc is, so this adds no dependency.
    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        fn = getattr(lib, "__cxa_demangle")
        free = ctypes.CDLL(None).free
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free.restype = None
    free.argtypes = [ctypes.c_void_p]

    def demangle(name: str) -> str | None:
        status = ctypes.c_int(-1)
        ptr = fn(name.encode("utf-8", "surrogateescape"), None, None, ctypes.byref(status))
        if not ptr:
            return None
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace") if status.value == 0 else None
        finally:
            free(ptr)

    return demangle


@functools.lru_cache(maxsize=65536)
def _demangle(name: str) -> str:
    if not name.startswith("_Z"):
        return name
    fn = _cxa_demangle()
    return (fn(name) if fn else None) or name


class _SymTable:
    """Function symbols of one ELF file, as parallel sorted arrays for bisect."""

    __slots__ = ("_block_ends", "_ends", "_name_offs", "_names", "_packed", "_segs", "_sized",
                 "_starts")

    def __init__(
        self,
        segments: list[tuple[int, int, int]],
        starts: array,
        ends: array,
        sized: bytes,
        names: Iterable[int],
        strtabs: list[bytes],
    ) -> None:
        # segments: (p_offset, p_filesz, p_vaddr); starts, ends, sized: one per symbol, by
        # start; names: each symbol's name offset | its string table's index << 56
        self._segs = segments
        self._starts, self._ends, self._sized = starts, ends, sized
        # Only these functions' names are kept: a string table also names every object,
        # section and import, and tables stay loaded as long as their binary runs.
        text, offsets = bytearray(), array("I")
        for packed in names:
            table = strtabs[packed >> 56]
            name_off = packed & _NAME_MASK
            end = table.find(b"\0", name_off)
            offsets.append(len(text))
            text += memoryview(table)[name_off : end if end >= 0 else len(table)]
            text.append(0)
        # Kept compressed, NAMES_PER_BLOCK names a block: most are never asked for, and a
        # C++ library's mangled names take megabytes (libLLVM's 2.4 MB, 0.6 compressed).
        packed, self._block_ends = [], array("I")
        for first in range(0, len(offsets), NAMES_PER_BLOCK):
            end = first + NAMES_PER_BLOCK
            block = memoryview(text)[offsets[first]:offsets[end] if end < len(offsets) else None]
            packed.append(zlib.compress(block))
            self._block_ends.append((self._block_ends[-1] if self._block_ends else 0)
                                    + len(packed[-1]))
        self._packed, self._name_offs = b"".join(packed), offsets
        self._names: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._starts)

    def vaddr_for_offset(self, file_offset: int) -> int | None:
        # Few PT_LOADs per file; a linear scan also copes with overlapping ones.
        for p_offset, p_filesz, p_vaddr in self._segs:
            if p_offset <= file_offset < p_offset + p_filesz:
                return file_offset - p_offset + p_vaddr
        return None

    def _name(self, idx: int) -> str:
        name = self._names.get(idx)
        if name is None:
            block = idx // NAMES_PER_BLOCK
            text = zlib.decompress(self._packed[self._block_ends[block - 1] if block else 0 :
                                                self._block_ends[block]])
            off = self._name_offs[idx] - self._name_offs[block * NAMES_PER_BLOCK]
            raw = text[off : text.index(b"\0", off)]
            name = _demangle(raw.decode("utf-8", "replace")) or UNKNOWN
            self._names[idx] = name
        return name

    def lookup(self, file_offset: int) -> str | None:
        vaddr = self.vaddr_for_offset(file_offset)
        if vaddr is None:
            return None
        i = bisect_right(self._starts, vaddr) - 1
        fallback = -1
        # Sized symbols win; a zero-size one only covers what nothing else does.
        for j in range(i, max(i - _WALK_BACK, -1), -1):
            if vaddr < self._ends[j]:
                if self._sized[j]:
                    fallback = j
                    break
                if fallback < 0:
                    fallback = j
        if fallback < 0:
            return None
        return f"{self._name(fallback)}+0x{vaddr - self._starts[fallback]:x}"


_EMPTY = _SymTable([], array("Q"), array("Q"), b"", (), [])


def _read_exact(f: BinaryIO, offset: int, size: int, file_size: int) -> bytes | None:
    # Bound by the real file size so crafted headers cannot ask for gigabytes.
    if offset < 0 or size <= 0 or offset + size > file_size:
        return None
    if size > MAX_TABLE_BYTES:  # a sparse file can be as big as it claims
        raise BinaryTooBig(f"a table of {size >> 20} MiB")
    f.seek(offset)
    data = f.read(size)
    return data if len(data) == size else None


def _build_id(elf: ELFFile) -> str | None:
    # The note segments first: finding a section by name makes pyelftools build every
    # section, and its hash sections parse whole, for each new binary.
    sources: list = [seg for seg in elf.iter_segments()
                     if seg["p_type"] == "PT_NOTE" and seg["p_filesz"] <= MAX_NOTES_BYTES]
    if not sources:
        sec = elf.get_section_by_name(".note.gnu.build-id")
        if sec is not None and sec["sh_type"] == "SHT_NOTE":
            sources.append(sec)
    for src in sources:
        for note in src.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID" and isinstance(note["n_desc"], str):
                return note["n_desc"]
    return None


class _ElfProbe:
    """Cheap first look at an ELF: enough to form the cache key."""

    def __init__(self, f: BinaryIO, file_size: int, deadline: float = math.inf) -> None:
        self.f = f
        self.file_size = file_size
        self.deadline = deadline  # time.thread_time() past which reading stops
        elf = ELFFile(f)
        try:
            sections, segments = elf.num_sections(), elf.num_segments()
            if sections > MAX_SECTIONS or segments > MAX_SEGMENTS:
                raise BinaryTooBig(f"{sections} sections and {segments} segments")
            self.build_id = _build_id(elf)
            # Headers only (pyelftools' iter_sections would parse every section's contents).
            self.sections = [elf._get_section_header(i) for i in range(sections)]
            self.segments = [
                (seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
                for seg in elf.iter_segments()
                if seg["p_type"] == "PT_LOAD"
            ]
            self.is64, self.little_endian = elf.elfclass == 64, elf.little_endian
            self.names_index = elf["e_shstrndx"]  # the section of section names
        finally:
            # pyelftools' ELFFile, its structures and the sections it parsed refer to each
            # other: each file read left ~440 objects in reference cycles for the collector.
            for parsed in (getattr(elf, "structs", None), elf):
                if parsed is not None:
                    parsed.__dict__.clear()
        self.symtabs = [
            (i, h)
            for i, h in enumerate(self.sections)
            if h["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM")
        ]
        self.has_symtab = any(h["sh_type"] == "SHT_SYMTAB" for _, h in self.symtabs)

    def section_data(self, name: bytes) -> bytes | None:
        """The contents of the section named `name` (.gnu_debugdata, .gnu_debuglink)."""
        index = self.names_index
        if not 0 < index < len(self.sections):
            return None
        names = self.sections[index]
        table = _read_exact(self.f, names["sh_offset"], names["sh_size"], self.file_size)
        if table is None:
            return None
        for header in self.sections:
            offset = header["sh_name"]
            if table[offset : offset + len(name) + 1] == name + b"\0" and header["sh_type"] != "SHT_NOBITS":
                return _read_exact(self.f, header["sh_offset"], header["sh_size"], self.file_size)
        return None

    def cache_key(self) -> tuple[object, ...] | None:
        if self.build_id is None:
            return None
        # Stripped and unstripped copies share a build-id but not their symbols, and
        # prelink-style rewrites keep it while moving segments.
        tables = tuple((h["sh_type"], h["sh_size"]) for _, h in self.symtabs)
        return (self.build_id, tables, tuple(self.segments))

    def load(self, extra: Sequence[_ElfProbe] = ()) -> _SymTable:
        """The function symbols of this file and of `extra` ELFs that describe it (a debug
        file, MiniDebugInfo): their addresses are this file's, their sections their own."""
        segments = self.segments
        if not segments:
            return _EMPTY
        probes = [*extra, self]
        strtabs: list[bytes] = []
        # Every function symbol is a candidate, in columns; a binary's tables hold tens of
        # thousands (libLLVM: 35,000), and a tuple or two per candidate made a transient
        # ~20 MiB of small objects, which stayed as Python's arenas after.
        values, sizes, names = array("Q"), array("Q"), array("Q")
        shndxs, owners = array("I"), array("B")
        # (value, rank, candidate) in one int each: sorted, the first of each value is the
        # symbol kept (sized before unsized, .symtab before .dynsym, global before weak before
        # local, a name without a leading underscore first, then the first read).
        keys: list[int] = []
        # .symtab before .dynsym so the fuller table wins ties.
        tables = [(p, hdr) for p in range(len(probes)) for _, hdr in probes[p].symtabs]
        ordered = sorted(tables, key=lambda t: t[1]["sh_type"] != "SHT_SYMTAB")
        for src_rank, (p, hdr) in enumerate(ordered):
            probe = probes[p]
            is64 = probe.is64
            fmt = ("<" if probe.little_endian else ">") + ("IBBHQQ" if is64 else "IIIBBH")
            entsize = struct.calcsize(fmt)
            link = hdr["sh_link"]
            if not 0 < link < len(probe.sections):
                continue
            strhdr = probe.sections[link]
            strtab = _read_exact(probe.f, strhdr["sh_offset"], strhdr["sh_size"], probe.file_size)
            data = _read_exact(probe.f, hdr["sh_offset"], hdr["sh_size"], probe.file_size)
            if strtab is None or data is None or len(strtabs) >= 255:
                continue
            tab_idx = len(strtabs)
            strtabs.append(strtab)
            data = data[: len(data) - len(data) % entsize]
            for count, ent in enumerate(struct.iter_unpack(fmt, data)):
                if count & 0xFFFF == 0:
                    _check_deadline(self.deadline)
                if is64:
                    name_off, info, _other, shndx, value, size = ent
                else:
                    name_off, value, size, info, _other, shndx = ent
                if (info & 0xF) not in (_STT_FUNC, _STT_GNU_IFUNC):
                    continue
                if shndx == _SHN_UNDEF or value == 0 or name_off >= len(strtab):
                    continue
                bind = info >> 4
                rank = (
                    (0 if size else 1) << 20
                    | src_rank << 4
                    | (0 if bind == _STB_GLOBAL else 1 if bind == _STB_WEAK else 2) << 1
                    | (0 if strtab[name_off : name_off + 1] != b"_" else 1)
                )
                keys.append(value << 64 | rank << 32 | len(values))
                values.append(value)
                sizes.append(size)
                names.append(name_off | (tab_idx << 56))
                shndxs.append(shndx)
                owners.append(p)
        keys.sort()
        chosen, last = array("I"), -1
        for key in keys:
            value = key >> 64
            if value != last:
                chosen.append(key & 0xFFFFFFFF)
                last = value
        del keys
        starts, ends = array("Q", (values[c] for c in chosen)), array("Q")
        for k, c in enumerate(chosen):
            if k & 0xFFFF == 0:
                _check_deadline(self.deadline)
            start, size, shndx = values[c], sizes[c], shndxs[c]
            if size:
                end = start + size
            else:
                nxt = starts[k + 1] if k + 1 < len(starts) else None
                sec_end = None
                sections = probes[owners[c]].sections
                if shndx < _SHN_LORESERVE and shndx < len(sections):
                    sh = sections[shndx]
                    if sh["sh_addr"] <= start < sh["sh_addr"] + sh["sh_size"]:
                        sec_end = sh["sh_addr"] + sh["sh_size"]
                cands = [e for e in (nxt, sec_end) if e is not None]
                end = min(cands) if cands else start + 1
            ends.append(min(end, 2**64 - 1))
        sized = bytes(1 if sizes[c] else 0 for c in chosen)
        return _SymTable(segments, starts, ends, sized, (names[c] for c in chosen), strtabs)


def _minidebuginfo(probe: _ElfProbe) -> _ElfProbe | None:
    """MiniDebugInfo (.gnu_debugdata, as Fedora and others ship): an xz-compressed ELF
    holding the .symtab that stripping removed, static functions included."""
    packed = probe.section_data(b".gnu_debugdata")
    if not packed:
        return None
    try:
        inner = lzma.LZMADecompressor().decompress(packed, max_length=MAX_DEBUGDATA)
    except lzma.LZMAError:
        return None
    return _ElfProbe(io.BytesIO(inner), len(inner), probe.deadline)


def _debug_file_candidates(probe: _ElfProbe, path: str, debug_root: str) -> list[str]:
    """Where a separate debug file may be, as gdb and perf look: by build-id, then by the
    .gnu_debuglink name beside the binary, in .debug/ under it, and under the debug root."""
    paths = []
    if probe.build_id and len(probe.build_id) > 2:
        build_id = probe.build_id
        paths.append(os.path.join(debug_root, ".build-id", build_id[:2], build_id[2:] + ".debug"))
    link = probe.section_data(b".gnu_debuglink")
    if link:
        name = link.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        if name and "/" not in name and path.startswith("/"):
            directory = os.path.dirname(path)
            paths += [os.path.join(directory, name), os.path.join(directory, ".debug", name),
                      debug_root + os.path.join(directory, name)]
    return paths


@dataclass(slots=True)
class _Mapping:
    start: int
    end: int
    offset: int
    dev: str
    inode: int
    path: str
    module: str
    table: _SymTable | None = None  # None = not loaded yet

    @property
    def ident(self) -> tuple[int, int, int, str, int, str]:
        return (self.start, self.end, self.offset, self.dev, self.inode, self.path)


@dataclass(slots=True)
class _ProcMaps:
    starts: list[int]
    maps: list[_Mapping]
    read_at: float
    text_hash: int  # of the maps text: a re-read that finds it unchanged keeps all of this
    # Stacks named with these maps: one user stack comes back under many kernel stacks (a
    # syscall interrupted at each of its instructions). Gone with the maps when re-read.
    # Only stacks whose every address was mapped: an unmapped one may be a dlopen() to come.
    stacks: dict[tuple[int, ...], tuple[list[UserFrame], tuple[_SymTable, ...]]] = field(
        default_factory=dict
    )

    # Each address named once: stacks that differ only in their innermost frame (sampled in
    # user code, or walked through garbage without frame pointers) share all the others.
    frames: dict[int, UserFrame] = field(default_factory=dict)

    def find(self, address: int) -> _Mapping | None:
        i = bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.maps[i].end:
            return self.maps[i]
        return None


def _parse_maps(text: str) -> list[_Mapping]:
    """The executable mappings: an address in any other is no code (data, heap, stack)."""
    out: list[_Mapping] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[1][2:3] != "x":
            continue
        try:
            lo, _, hi = parts[0].partition("-")
            start, end = int(lo, 16), int(hi, 16)
            offset = int(parts[2], 16)
            inode = int(parts[4])
        except ValueError:
            continue
        if end <= start:
            continue
        path = parts[5].strip() if len(parts) == 6 else ""
        if not path:
            module = "[anon]"
        else:
            # Paths may hold undecodable bytes; keep them for open(), clean them for display.
            module = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        out.append(_Mapping(start, end, offset, parts[3], inode, path, module))
    out.sort(key=lambda m: m.start)
    return out


class UserSymbolizer:
    """Resolves user-space addresses of a process to symbol+offset and module."""

    def __init__(self, proc_root: str = "/proc", debug_root: str = DEBUG_ROOT) -> None:
        self._proc_root = proc_root
        self._debug_root = debug_root
        self._procs: dict[int, _ProcMaps] = {}
        self._by_stat: dict[tuple[str, int, int, int], _SymTable] = {}
        # The table of a file as a process's maps name it (path, device, inode), checked
        # against the file's mtime at most every FILE_RECHECK_S: each new process of a
        # binary (a fork loop) finds its tables without a stat() per mapping.
        self._by_file: dict[tuple[str, str, int], tuple[_SymTable, float]] = {}
        self._by_build: dict[tuple[object, ...], _SymTable] = {}
        self._refresh = 0  # retain() calls so far
        self._last_used: dict[int, int] = {}  # id(table) -> the refresh it last named a frame
        # Minimum seconds between maps re-reads triggered by unmapped addresses,
        # so garbage addresses from broken stack walks do not re-read every sample.
        self._maps_retry_interval = 0.25
        # Processes whose maps could not be read since the last retain(): each new stack of
        # an exited process (thousands from ktop's own compilers at 4000 Hz) tried again.
        self._gone: set[int] = set()
        # Binaries past the bounds of what is read (MAX_SECTIONS...), by path and stat: not
        # read again while unchanged. `unread` counts them: the CPU pane's loss binary_unread.
        self._unreadable: set[tuple[str, int, int, int]] = set()
        self.unread = 0
        self._frames: dict[UserFrame, UserFrame] = {}  # see _shared_frame
        self._frames_before: dict[UserFrame, UserFrame] = {}

    def forget(self, pid: int) -> None:
        self._procs.pop(pid, None)

    def retain(self, pids: Iterable[int]) -> None:
        """Keep the maps of these processes only: the others exited (and their pids may come
        back as other programs), so their maps must not be used or kept."""
        alive = set(pids)
        for pid in [p for p in self._procs if p not in alive]:
            del self._procs[pid]
        self._gone.clear()  # a pid may name a new process now
        if len(self._by_stat) > KEEP_TABLES:
            self._drop_unused_tables()
        self._refresh += 1
        if self._refresh % 10 == 0:
            self._drop_idle_tables()

    def _drop_idle_tables(self) -> None:
        """Forget the tables no sample needed for IDLE_REFRESHES refreshes; a mapping that
        needs one again loads it again."""
        oldest = self._refresh - IDLE_REFRESHES
        idle = {id(t) for t in self._by_stat.values() if self._last_used.get(id(t), -1) < oldest}
        if not idle:
            return
        self._by_stat = {k: t for k, t in self._by_stat.items() if id(t) not in idle}
        self._by_build = {k: t for k, t in self._by_build.items() if id(t) not in idle}
        self._by_file = {k: v for k, v in self._by_file.items() if id(v[0]) not in idle}
        for procmaps in self._procs.values():
            procmaps.stacks.clear()  # they hold the dropped tables
            procmaps.frames.clear()
            for m in procmaps.maps:
                if m.table is not None and id(m.table) in idle:
                    m.table = None
        self._last_used = {k: v for k, v in self._last_used.items() if k not in idle}

    def _drop_unused_tables(self) -> None:
        """Forget the symbol tables no live process maps any more (a binary rebuilt and run
        again, a compiler that has exited): each one can hold megabytes."""
        used = {id(m.table) for procmaps in self._procs.values() for m in procmaps.maps if m.table}
        recent = self._refresh - RECENT_REFRESHES
        used.update(table for table, when in self._last_used.items() if when >= recent)
        self._by_stat = {k: t for k, t in self._by_stat.items() if id(t) in used}
        self._by_build = {k: t for k, t in self._by_build.items() if id(t) in used}
        self._by_file = {k: v for k, v in self._by_file.items() if id(v[0]) in used}

    def resolve(self, pid: int, addresses: Sequence[int]) -> list[UserFrame]:
        procmaps = self._procs.get(pid)
        if procmaps is None and pid not in self._gone:
            procmaps = self._read_maps(pid, None)
            if procmaps is None:
                self._gone.add(pid)
        if procmaps is None:  # exited: only what no process could map is known
            frames = []
            for a in addresses:
                if not _plausible(a):
                    frames.append(not_code(a))
                    break
                frames.append(UserFrame(f"0x{a:x}", UNKNOWN))
            return frames
        key = tuple(addresses)
        cached = procmaps.stacks.get(key)
        if cached is not None:
            frames, tables = cached
            for table in tables:  # still in use, though not looked up again
                self._last_used[id(table)] = self._refresh
            return frames
        return self._resolve(pid, procmaps, key)

    def _resolve(self, pid: int, procmaps: _ProcMaps, addresses: tuple[int, ...]) -> list[UserFrame]:
        retried = unmapped = False
        frames: list[UserFrame] = []
        tables: list[_SymTable] = []
        for addr in addresses:
            m = procmaps.find(addr) if _plausible(addr) else None
            if (
                m is None
                and not retried
                and _plausible(addr)
                and time.monotonic() - procmaps.read_at >= self._maps_retry_interval
            ):
                # Not covered: maybe a dlopen() since we last looked.
                retried = True
                fresh = self._read_maps(pid, procmaps)
                if fresh is not None:
                    procmaps = fresh
                    m = procmaps.find(addr)
            if m is None:
                # Not code, unless a mapping comes later (a dlopen): not kept as named.
                unmapped = _plausible(addr)
                frames.append(not_code(addr))
                break
            frame = procmaps.frames.get(addr)
            if frame is None:
                if len(procmaps.frames) >= MAX_FRAMES_PER_PROCESS:
                    procmaps.frames.clear()
                frame = procmaps.frames[addr] = self._frame(pid, m, addr)
            frames.append(frame)
            if m.table is not None:
                tables.append(m.table)
                self._last_used[id(m.table)] = self._refresh
        if not unmapped:
            if len(procmaps.stacks) >= MAX_STACKS_PER_PROCESS:
                procmaps.stacks.clear()
            procmaps.stacks[addresses] = (frames, tuple(set(tables)))
        return frames

    def _read_maps(self, pid: int, previous: _ProcMaps | None) -> _ProcMaps | None:
        path = os.path.join(self._proc_root, str(pid), "maps")
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
        except (OSError, ValueError):
            return None
        text_hash = hash(text)
        if previous is not None and previous.text_hash == text_hash:
            previous.read_at = time.monotonic()  # nothing was mapped since: keep what is named
            return previous
        maps = _parse_maps(text)
        if previous is not None:
            # Keep already-loaded tables for mappings that did not change.
            known = {m.ident: m.table for m in previous.maps}
            for m in maps:
                m.table = known.get(m.ident)
        procmaps = _ProcMaps([m.start for m in maps], maps, time.monotonic(), text_hash)
        self._procs[pid] = procmaps
        return procmaps

    def _frame(self, pid: int, m: _Mapping, addr: int) -> UserFrame:
        if not m.path.startswith("/"):
            return self._shared_frame(UserFrame(UNKNOWN, m.module))
        if m.table is None:
            m.table = self._table_for(pid, m)
        sym = m.table.lookup(addr - m.start + m.offset)
        return self._shared_frame(UserFrame(sym or UNKNOWN, m.module))

    def _shared_frame(self, frame: UserFrame) -> UserFrame:
        """One object for a frame named alike in every process: each process of a binary
        (a fork loop's thousands) named its frames anew, and the stacks kept for the window
        and the totals held a copy per process, its module's path included."""
        shared = self._frames.get(frame)
        if shared is not None:
            return shared
        shared = self._frames_before.get(frame, frame)
        if len(self._frames) >= FRAMES_SHARED // 2:
            # (Emptied whole, the hot frames were made again beside the objects that kept
            # stacks still held.)
            self._frames_before, self._frames = self._frames, {}
        self._frames[shared] = shared
        return shared

    def _candidates(self, pid: int, m: _Mapping) -> list[str]:
        base = os.path.join(self._proc_root, str(pid))
        paths = []
        if m.path.endswith(" (deleted)"):
            # The path may now name a different file; map_files has the real one.
            paths.append(os.path.join(base, "map_files", f"{m.start:x}-{m.end:x}"))
        paths.append(base + "/root" + m.path)
        paths.append(m.path)
        return paths

    def _table_for(self, pid: int, m: _Mapping) -> _SymTable:
        fkey = (m.path, m.dev, m.inode)
        known = self._by_file.get(fkey)
        now = time.monotonic()
        if known is not None and now - known[1] < FILE_RECHECK_S:
            return known[0]
        table = self._table_by_stat(pid, m)
        self._by_file[fkey] = (table, now)
        return table

    def _table_by_stat(self, pid: int, m: _Mapping) -> _SymTable:
        for candidate in self._candidates(pid, m):
            try:
                st = os.stat(candidate)
            except (OSError, ValueError):
                continue
            # Never open FIFOs or devices: that could block or have side effects.
            if not stat.S_ISREG(st.st_mode):
                continue
            skey = (m.path, st.st_dev, st.st_ino, st.st_mtime_ns)
            table = self._by_stat.get(skey)
            if table is not None:
                return table
            if skey in self._unreadable:
                return _EMPTY
            try:
                # map_files/ entries are /proc's links to the very file mapped: followed.
                fd = open_regular(candidate, st, follow_links="/map_files/" in candidate)
                with open(fd, "rb") as f:
                    try:
                        table = self._load(f, st.st_size, m.path)
                    except ELF_ERRORS:
                        table = _EMPTY
                    except BinaryTooBig:
                        if len(self._unreadable) >= UNREADABLE_KEPT:
                            self._unreadable.clear()
                        self._unreadable.add(skey)
                        self.unread += 1
                        return _EMPTY
            except (OSError, ValueError):
                continue  # could not open this candidate; try the next one
            self._by_stat[skey] = table
            return table
        return _EMPTY

    def _load(self, f: BinaryIO, file_size: int, path: str = "") -> _SymTable:
        """The binary's function symbols; BinaryTooBig past the bounds of what is read."""
        probe = _ElfProbe(f, file_size, time.thread_time() + MAX_LOAD_CPU_S)
        bkey = probe.cache_key()
        if bkey is not None:
            table = self._by_build.get(bkey)
            if table is not None:
                return table
        table = self._with_debug_symbols(probe, path)
        if bkey is not None:
            self._by_build[bkey] = table
        return table

    def _with_debug_symbols(self, probe: _ElfProbe, path: str) -> _SymTable:
        """A stripped binary's .dynsym names its exported functions only: its .symtab, from
        a separate debug file or its MiniDebugInfo, names the static ones too."""
        if probe.has_symtab:
            return probe.load()
        for candidate in _debug_file_candidates(probe, path, self._debug_root):
            try:
                st = os.stat(candidate)
                if not stat.S_ISREG(st.st_mode):
                    continue
                # Swapped for a FIFO since the stat, its open would hang the collect thread:
                # only the file looked at is opened; links followed in the debug root only.
                fd = open_regular(candidate, st,
                                  follow_links=candidate.startswith(self._debug_root + "/"))
                with open(fd, "rb") as f:
                    debug = _ElfProbe(f, st.st_size, probe.deadline)
                    # A debuglink names a file by name only: it must be this build's.
                    if debug.has_symtab and debug.build_id == probe.build_id:
                        return probe.load([debug])
            except (*ELF_ERRORS, lzma.LZMAError):
                continue
        try:
            mini = _minidebuginfo(probe)
        except (*ELF_ERRORS, lzma.LZMAError):
            mini = None
        return probe.load([mini] if mini is not None else [])
