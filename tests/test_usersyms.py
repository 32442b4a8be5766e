"""User-space symbolization against small gcc-built programs and fake /proc trees."""

from __future__ import annotations

import ctypes
import os
import random
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from ktop.model import UserFrame
from ktop.symbolize import user as usersyms
from ktop.symbolize.user import UserSymbolizer, _cxa_demangle

C_SOURCE = r"""
#include <unistd.h>

__attribute__((noinline)) int ktop_test_leaf(int x) {
    int y = x * 3;
    y ^= 5;
    return y + 1;
}

__attribute__((noinline)) int ktop_test_caller(int x) {
    return ktop_test_leaf(x) + 2;
}

/* A C++-mangled name, to see demangling without needing g++. */
__attribute__((noinline)) int ktop_mangled(int x) __asm__("_ZN4ktop4leafEi");
__attribute__((noinline)) int ktop_mangled(int x) { return x + 7; }

/* A function symbol without .size, as hand-written assembly often has. */
__asm__(".text\n.globl ktop_asm_nosize\n.type ktop_asm_nosize,@function\n"
        "ktop_asm_nosize:\n nop\n nop\n nop\n nop\n ret\n");

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1)
        for (;;)
            pause();
    return ktop_test_caller(argc) & 1;
}
"""

PIE_BASE = 0x555555554000
PAGE = 0x1000


def _gcc(out: Path, src: Path, *flags: str) -> None:
    subprocess.run(["gcc", "-O0", *flags, "-o", str(out), str(src)], check=True)


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bins")
    src = d / "ktop_test.c"
    src.write_text(C_SOURCE)
    out = {"pie": d / "prog_pie", "nopie": d / "prog_nopie", "stripped": d / "prog_stripped"}
    _gcc(out["pie"], src, "-pie", "-fPIE")
    _gcc(out["nopie"], src, "-no-pie", "-fno-pie")
    subprocess.run(["strip", "-o", str(out["stripped"]), str(out["pie"])], check=True)
    return out


def _symbols(path: Path) -> dict[str, tuple[int, int]]:
    with open(path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: (s["st_value"], s["st_size"]) for s in symtab.iter_symbols()}


def _maps_lines(path: Path, base: int, shown_as: str | None = None) -> list[str]:
    """Lines like the kernel writes for an ELF mapped at load bias `base`."""
    inode = path.stat().st_ino
    lines = []
    with open(path, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            start = (base + seg["p_vaddr"]) & ~(PAGE - 1)
            end = (base + seg["p_vaddr"] + seg["p_filesz"] + PAGE - 1) & ~(PAGE - 1)
            flags = seg["p_flags"]
            perms = (
                ("r" if flags & 4 else "-")
                + ("w" if flags & 2 else "-")
                + ("x" if flags & 1 else "-")
                + "p"
            )
            offset = seg["p_offset"] & ~(PAGE - 1)
            lines.append(
                f"{start:x}-{end:x} {perms} {offset:08x} fe:00 {inode}"
                f"                    {shown_as or path}"
            )
    return lines


def _fake_proc(root: Path, pid: int, lines: list[str]) -> Path:
    piddir = root / str(pid)
    piddir.mkdir(parents=True, exist_ok=True)
    (piddir / "maps").write_text("\n".join(lines) + "\n")
    return root


def _special_lines() -> list[str]:
    return [
        "555555a00000-555555a21000 rw-p 00000000 00:00 0                          [heap]",
        "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 ",
        "7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0                          [vdso]",
        "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]",
    ]


def test_pie_resolves_exact(bins: dict[str, Path], tmp_path: Path) -> None:
    syms = _symbols(bins["pie"])
    root = _fake_proc(tmp_path / "proc", 4242, _maps_lines(bins["pie"], PIE_BASE))
    leaf, leaf_size = syms["ktop_test_leaf"]
    caller, caller_size = syms["ktop_test_caller"]
    addrs = [PIE_BASE + leaf + 4, PIE_BASE + caller, PIE_BASE + caller + caller_size - 1]
    frames = UserSymbolizer(str(root)).resolve(4242, addrs)
    assert [f.symbol for f in frames] == [
        "ktop_test_leaf+0x4",
        "ktop_test_caller+0x0",
        f"ktop_test_caller+{caller_size - 1:#x}",
    ]
    assert all(f.module == str(bins["pie"]) for f in frames)
    assert len(frames) == len(addrs)  # one frame per address, in the order asked
    assert leaf_size > 4


def test_nopie_resolves_exact(bins: dict[str, Path], tmp_path: Path) -> None:
    syms = _symbols(bins["nopie"])
    with open(bins["nopie"], "rb") as f:
        assert ELFFile(f)["e_type"] == "ET_EXEC"
    root = _fake_proc(tmp_path / "proc", 7, _maps_lines(bins["nopie"], 0))
    leaf = syms["ktop_test_leaf"][0]
    caller = syms["ktop_test_caller"][0]
    frames = UserSymbolizer(str(root)).resolve(7, [leaf + 4, caller + 1])
    assert frames == [
        UserFrame("ktop_test_leaf+0x4", str(bins["nopie"])),
        UserFrame("ktop_test_caller+0x1", str(bins["nopie"])),
    ]


def test_stripped_gives_unknown_with_module(bins: dict[str, Path], tmp_path: Path) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = _fake_proc(tmp_path / "proc", 9, _maps_lines(bins["stripped"], PIE_BASE))
    (frame,) = UserSymbolizer(str(root)).resolve(9, [PIE_BASE + leaf + 4])
    assert frame == UserFrame("[unknown]", str(bins["stripped"]))


def test_stripped_and_unstripped_copies_do_not_share_symbols(
    bins: dict[str, Path], tmp_path: Path
) -> None:
    # Same build-id, different symbol tables: the cache must keep them apart either way round.
    addr = PIE_BASE + _symbols(bins["pie"])["ktop_test_leaf"][0] + 4
    root = tmp_path / "proc"
    _fake_proc(root, 1, _maps_lines(bins["pie"], PIE_BASE))
    _fake_proc(root, 2, _maps_lines(bins["stripped"], PIE_BASE))
    for order in ((1, 2), (2, 1)):
        sym = UserSymbolizer(str(root))
        got = {pid: sym.resolve(pid, [addr])[0].symbol for pid in order}
        assert got == {1: "ktop_test_leaf+0x4", 2: "[unknown]"}


def test_same_build_id_parsed_once(bins: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy_of_pie"
    shutil.copy(bins["pie"], copy)
    root = tmp_path / "proc"
    _fake_proc(root, 1, _maps_lines(bins["pie"], PIE_BASE))
    _fake_proc(root, 2, _maps_lines(copy, 0x7F0000000000))
    sym = UserSymbolizer(str(root))
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    assert sym.resolve(1, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    assert sym.resolve(2, [0x7F0000000000 + leaf])[0].symbol == "ktop_test_leaf+0x0"
    assert len(sym._by_build) == 1
    assert len(sym._by_stat) == 2


def test_special_executable_maps_are_frames_and_data_maps_are_not_code(
    bins: dict[str, Path], tmp_path: Path
) -> None:
    lines = _maps_lines(bins["pie"], PIE_BASE) + _special_lines()
    root = _fake_proc(tmp_path / "proc", 11, lines)
    sym = UserSymbolizer(str(root))
    assert sym.resolve(11, [0x7FFFF7FC1100]) == [UserFrame("[unknown]", "[vdso]")]
    # Heap, anonymous data, the stack, a small number: each ends the stack as one marker.
    for garbage in (0x555555A00010, 0x7F0000000010, 0x7FFFFFFFE000, 0x1000, 0):
        assert sym.resolve(11, [0x7FFFF7FC1100, garbage, 0x7FFFF7FC1100]) == [
            UserFrame("[unknown]", "[vdso]"),
            UserFrame(f"[not code {garbage:#x}]", "[not code]"),
        ]


def test_a_frame_pointer_walk_through_data_ends_at_one_not_code_marker(
    bins: dict[str, Path], tmp_path: Path
) -> None:
    """As a Python built without frame pointers gives: the leaf in its text, then a value
    read from its data segment, then garbage."""
    syms = _symbols(bins["pie"])
    lines = _maps_lines(bins["pie"], PIE_BASE)
    data = next(ln for ln in lines if ln.split()[1].startswith("rw"))
    in_data = int(data.split("-")[0], 16) + 0x20
    root = _fake_proc(tmp_path / "proc", 12, lines)
    leaf = PIE_BASE + syms["ktop_test_leaf"][0] + 4
    frames = UserSymbolizer(str(root)).resolve(12, [leaf, in_data, 0x58, 0x5F687361685F5F00])
    assert frames == [
        UserFrame("ktop_test_leaf+0x4", str(bins["pie"])),
        UserFrame(f"[not code {in_data:#x}]", "[not code]"),
    ]


def test_zero_size_function_falls_back_to_next_symbol(
    bins: dict[str, Path], tmp_path: Path
) -> None:
    value, size = _symbols(bins["pie"])["ktop_asm_nosize"]
    assert size == 0
    root = _fake_proc(tmp_path / "proc", 5, _maps_lines(bins["pie"], PIE_BASE))
    (frame,) = UserSymbolizer(str(root)).resolve(5, [PIE_BASE + value + 3])
    assert frame.symbol == "ktop_asm_nosize+0x3"


def test_mangled_names_are_demangled_when_possible(bins: dict[str, Path], tmp_path: Path) -> None:
    value, _ = _symbols(bins["pie"])["_ZN4ktop4leafEi"]
    root = _fake_proc(tmp_path / "proc", 5, _maps_lines(bins["pie"], PIE_BASE))
    (frame,) = UserSymbolizer(str(root)).resolve(5, [PIE_BASE + value + 1])
    expected = "ktop::leaf(int)" if _cxa_demangle() else "_ZN4ktop4leafEi"
    assert frame.symbol == f"{expected}+0x1"


def test_proc_pid_root_preferred_over_host_path(bins: dict[str, Path], tmp_path: Path) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = tmp_path / "proc"
    # A "container" path that does not exist on the host at all.
    _fake_proc(root, 21, _maps_lines(bins["pie"], PIE_BASE, shown_as="/opt/ktopdemo/prog"))
    inside = root / "21" / "root" / "opt" / "ktopdemo"
    inside.mkdir(parents=True)
    shutil.copy(bins["pie"], inside / "prog")
    # Same path as on the host, but the container holds a stripped build of it.
    _fake_proc(root, 22, _maps_lines(bins["pie"], PIE_BASE))
    shadow = root / "22" / "root" / str(bins["pie"]).lstrip("/")
    shadow.parent.mkdir(parents=True)
    shutil.copy(bins["stripped"], shadow)
    sym = UserSymbolizer(str(root))
    assert sym.resolve(21, [PIE_BASE + leaf + 4]) == [
        UserFrame("ktop_test_leaf+0x4", "/opt/ktopdemo/prog")
    ]
    assert sym.resolve(22, [PIE_BASE + leaf + 4])[0].symbol == "[unknown]"


def test_missing_maps_gives_hex_frames(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    assert UserSymbolizer(str(tmp_path / "proc")).resolve(123, [0x7F00DEADBEEF, 0x10]) == [
        UserFrame("0x7f00deadbeef", "[unknown]"),
        UserFrame("[not code 0x10]", "[not code]"),  # no process maps code there
    ]
    # A pid above the largest possible pid_max, through the real /proc.
    frames = UserSymbolizer().resolve(4_194_304 + 17, [0x400000])
    assert frames == [UserFrame("0x400000", "[unknown]")]


def test_an_exited_process_is_looked_for_once_per_refresh(
    bins: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new stack of a process that has exited (ktop's compilers leave thousands at
    4000 Hz) used to open its maps again; until the next refresh it is known gone. After it,
    the pid may name a new process, whose maps are read."""
    root = tmp_path / "proc"
    root.mkdir()
    sym = UserSymbolizer(str(root))
    reads = []
    monkeypatch.setattr(sym, "_read_maps",
                        lambda *a, _read=sym._read_maps: reads.append(a[0]) or _read(*a))
    for stack in range(50):
        assert sym.resolve(91, [0x7F0000001000 + stack])[0].module == "[unknown]"
    assert reads == [91]
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    _fake_proc(root, 91, _maps_lines(bins["pie"], PIE_BASE))  # the pid, reused
    sym.retain([91])
    assert sym.resolve(91, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"


def _garbage_files(bins: dict[str, Path], d: Path) -> list[Path]:
    rng = random.Random(1234)
    blob = bins["pie"].read_bytes()
    files: dict[str, bytes] = {
        "random.so": bytes(rng.randrange(256) for _ in range(8192)),
        "random_with_magic.so": b"\x7fELF" + bytes(rng.randrange(256) for _ in range(8192)),
        "empty.so": b"",
        "text.so": b"this is not an ELF file\n" * 100,
        "trunc16.so": blob[:16],
        "trunc64.so": blob[:64],
        "trunc1000.so": blob[:1000],
        "trunc_half.so": blob[: len(blob) // 2],
        "trunc_minus1.so": blob[:-1],
        "class32.so": blob[:4] + b"\x01" + blob[5:],  # claims ELFCLASS32
        "bigendian.so": blob[:5] + b"\x02" + blob[6:],
    }
    paths = []
    for name, data in files.items():
        p = d / name
        p.write_bytes(data)
        paths.append(p)
    fifo = d / "fifo.so"
    os.mkfifo(fifo)  # must never be opened: that would block
    paths.append(fifo)
    sub = d / "directory.so"
    sub.mkdir()
    paths.append(sub)
    paths.append(d / "does_not_exist.so")
    return paths


def test_garbage_files_never_raise(bins: dict[str, Path], tmp_path: Path) -> None:
    files = _garbage_files(bins, tmp_path)
    lines = []
    addrs = []
    for i, path in enumerate(files):
        start = 0x7E0000000000 + i * 0x100000
        lines.append(f"{start:x}-{start + 0x10000:x} r-xp 00001000 fe:00 {100 + i}   {path}")
        addrs += [start, start + 0x1139, start + 0xFFFF]
    root = _fake_proc(tmp_path / "proc", 31, lines)
    frames = UserSymbolizer(str(root)).resolve(31, addrs)
    assert len(frames) == len(addrs)
    assert {f.symbol for f in frames} == {"[unknown]"}
    assert [f.module for f in frames[::3]] == [str(p) for p in files]


def test_fuzzed_binaries_never_raise(bins: dict[str, Path], tmp_path: Path) -> None:
    rng = random.Random(99)
    blob = bytearray(bins["pie"].read_bytes())
    with open(bins["pie"], "rb") as f:
        elf = ELFFile(f)
        hot = [
            (0, 64),
            (elf["e_phoff"], elf["e_phnum"] * elf["e_phentsize"]),
            (elf["e_shoff"], elf["e_shnum"] * elf["e_shentsize"]),
        ]
        for name in (".symtab", ".dynsym", ".note.gnu.build-id"):
            sec = elf.get_section_by_name(name)
            hot.append((sec["sh_offset"], sec["sh_size"]))
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    lines, addrs = [], []
    for i in range(60):
        data = bytearray(blob)
        for _ in range(rng.randint(1, 12)):
            start, size = rng.choice(hot)
            data[start + rng.randrange(max(size, 1))] = rng.randrange(256)
        if i % 5 == 0:
            del data[rng.randrange(len(data)) :]
        path = tmp_path / f"fuzz{i}.so"
        path.write_bytes(bytes(data))
        base = 0x7D0000000000 + i * 0x100000
        lines += _maps_lines(bins["pie"], base, shown_as=str(path))
        addrs += [base + leaf + 4, base + 0x10, base + 0x2FFF]
    root = _fake_proc(tmp_path / "proc", 41, lines)
    sym = UserSymbolizer(str(root))
    frames = [frame for a in addrs for frame in sym.resolve(41, [a])]
    assert len(frames) == len(addrs)
    assert all(isinstance(f.symbol, str) for f in frames)
    assert all(f.module.startswith(str(tmp_path)) for f in frames if f.module != "[not code]")


def test_new_mapping_is_found_after_maps_reread(bins: dict[str, Path], tmp_path: Path) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = _fake_proc(tmp_path / "proc", 51, _special_lines())
    sym = UserSymbolizer(str(root))
    sym._maps_retry_interval = 0.0
    addr = PIE_BASE + leaf
    assert sym.resolve(51, [addr])[0].module == "[not code]"
    # As if the program had dlopen()ed it since.
    _fake_proc(root, 51, _special_lines() + _maps_lines(bins["pie"], PIE_BASE))
    assert sym.resolve(51, [addr])[0].symbol == "ktop_test_leaf+0x0"


def test_maps_cached_until_forget(bins: dict[str, Path], tmp_path: Path) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = _fake_proc(tmp_path / "proc", 61, _maps_lines(bins["pie"], PIE_BASE))
    sym = UserSymbolizer(str(root))
    assert sym.resolve(61, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    # The pid now has something else at that address (pid reuse); the cache hides it...
    _fake_proc(root, 61, _maps_lines(bins["stripped"], PIE_BASE))
    assert sym.resolve(61, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    # ...until the caller says the old process is gone.
    sym.forget(61)
    sym.forget(61)  # idempotent
    assert sym.resolve(61, [PIE_BASE + leaf])[0].module == str(bins["stripped"])
    assert sym.resolve(61, [PIE_BASE + leaf])[0].symbol == "[unknown]"


def test_retain_drops_the_maps_of_processes_that_exited(bins: dict[str, Path], tmp_path: Path) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = _fake_proc(tmp_path / "proc", 71, _maps_lines(bins["pie"], PIE_BASE))
    _fake_proc(root, 72, _maps_lines(bins["pie"], PIE_BASE))
    sym = UserSymbolizer(str(root))
    for pid in (71, 72):
        assert sym.resolve(pid, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    # Both pids come back as other programs; only 72 was still alive at the last scan.
    _fake_proc(root, 71, _maps_lines(bins["stripped"], PIE_BASE))
    _fake_proc(root, 72, _maps_lines(bins["stripped"], PIE_BASE))
    sym.retain([72])
    assert sym.resolve(71, [PIE_BASE + leaf])[0].symbol == "[unknown]"  # new process's maps
    assert sym.resolve(72, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"  # kept


def test_symbol_tables_no_live_process_maps_are_dropped(
    bins: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usersyms, "KEEP_TABLES", 1)  # beyond one table, sweep
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = _fake_proc(tmp_path / "proc", 81, _maps_lines(bins["pie"], PIE_BASE))
    _fake_proc(root, 82, _maps_lines(bins["stripped"], PIE_BASE))
    sym = UserSymbolizer(str(root))
    for pid in (81, 82):
        sym.resolve(pid, [PIE_BASE + leaf])
    loads = []
    monkeypatch.setattr(sym, "_load", lambda *a, _load=sym._load: loads.append(1) or _load(*a))
    sym.retain([82])  # the pie's only user exited, but lately: its table stays a while
    _fake_proc(root, 83, _maps_lines(bins["pie"], PIE_BASE))  # run again soon: not read again
    assert sym.resolve(83, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    assert loads == []
    for _ in range(usersyms.RECENT_REFRESHES + 2):  # then gone, used by no sample since
        assert sym.resolve(82, [PIE_BASE + leaf])[0].module == str(bins["stripped"])
        sym.retain([82])
    assert len(sym._by_stat) == 1  # the stripped one stays: its process lives
    _fake_proc(root, 84, _maps_lines(bins["pie"], PIE_BASE))  # run again: read again
    assert sym.resolve(84, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    assert loads == [1]


def test_symbol_tables_no_sample_needs_are_dropped_while_still_mapped(
    bins: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ktop maps LLVM for life but names its frames only while compiling at start: those
    names must not be kept for hours."""
    monkeypatch.setattr(usersyms, "IDLE_REFRESHES", 3)
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = _fake_proc(tmp_path / "proc", 91, _maps_lines(bins["pie"], PIE_BASE))
    sym = UserSymbolizer(str(root))
    assert sym.resolve(91, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    loads = []
    monkeypatch.setattr(sym, "_load", lambda *a, _load=sym._load: loads.append(1) or _load(*a))
    sym.retain([91])
    sym.retain([91])
    assert sym.resolve(91, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    assert loads == []  # still in use: kept
    for _ in range(12):
        sym.retain([91])  # mapped, but no sample named a frame in it
    assert sym._by_stat == {} and sym._by_build == {}
    assert sym.resolve(91, [PIE_BASE + leaf])[0].symbol == "ktop_test_leaf+0x0"
    assert loads == [1]  # needed again: read again


def _wait_for_mapping(pid: int, path: Path) -> list[str]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [ln for ln in Path(f"/proc/{pid}/maps").read_text().splitlines() if str(path) in ln]
        if lines:
            return lines
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared in /proc/{pid}/maps")


def test_live_process(bins: dict[str, Path]) -> None:
    syms = _symbols(bins["pie"])
    proc = subprocess.Popen([str(bins["pie"]), "wait"])
    try:
        lines = _wait_for_mapping(proc.pid, bins["pie"])
        base = min(int(ln.split("-")[0], 16) for ln in lines if ln.split()[2] == "00000000")
        assert base != 0  # a PIE is loaded at a randomized base
        leaf = base + syms["ktop_test_leaf"][0] + 4
        caller = base + syms["ktop_test_caller"][0] + 8
        frames = UserSymbolizer().resolve(proc.pid, [leaf, caller, 0x10])
        assert frames == [
            UserFrame("ktop_test_leaf+0x4", str(bins["pie"])),
            UserFrame("ktop_test_caller+0x8", str(bins["pie"])),
            UserFrame("[not code 0x10]", "[not code]"),
        ]
    finally:
        proc.kill()
        proc.wait()


def _self_libc() -> tuple[int, int, str]:
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) == 6 and "x" in parts[1] and re.match(r"libc[.-]", Path(parts[5]).name):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            return lo, hi, parts[5]
    pytest.skip("no libc mapping found in /proc/self/maps")


def test_libc_1000_addresses_cached_is_fast(capsys: pytest.CaptureFixture[str]) -> None:
    lo, hi, path = _self_libc()
    addrs = [lo + (hi - lo) * i // 1000 for i in range(1000)]
    sym = UserSymbolizer()
    t0 = time.perf_counter()
    sym.resolve(os.getpid(), addrs)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    frames = sym.resolve(os.getpid(), addrs)
    warm = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nlibc {path}: 1000 addresses cold {cold * 1e3:.1f} ms, cached {warm * 1e3:.2f} ms")
    assert warm < 0.2, f"cached resolve took {warm:.3f}s"
    assert all(f.module == path for f in frames)
    named = [(a, f) for a, f in zip(addrs, frames) if f.symbol != "[unknown]"]
    assert len(named) > 100
    # Cross-check against pyelftools' own view of the symbol the name refers to.
    maps = [ln.split() for ln in Path("/proc/self/maps").read_text().splitlines()]
    text = next(m for m in maps if m[0].startswith(f"{lo:x}-"))
    with open(path, "rb") as f:
        elf = ELFFile(f)
        load = next(
            s
            for s in elf.iter_segments()
            if s["p_type"] == "PT_LOAD"
            and s["p_offset"] <= int(text[2], 16) < s["p_offset"] + s["p_filesz"]
        )
        tables = [elf.get_section_by_name(n) for n in (".symtab", ".dynsym")]
        values: dict[str, set[int]] = {}
        for t in tables:
            for s in t.iter_symbols() if t else ():
                values.setdefault(s.name, set()).add(s["st_value"])
        build_id = next(n["n_desc"] for seg in elf.iter_segments() if seg["p_type"] == "PT_NOTE"
                        for n in seg.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID")
    # libc6-dbg's .symtab names libc's static functions too, as perf and gdb find it.
    debug = Path(f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug")
    if debug.exists():
        with open(debug, "rb") as f:
            for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
                values.setdefault(s.name, set()).add(s["st_value"])
    for address, frame in named[::25]:
        name, _, off = frame.symbol.rpartition("+0x")
        vaddr = address - lo + int(text[2], 16) - load["p_offset"] + load["p_vaddr"]
        assert vaddr - int(off, 16) in values.get(name, ()), frame


def test_every_function_of_libc_is_named_as_its_symbol_table_names_it() -> None:
    """Names are kept compressed a block at a time: each of libc's thousands of functions,
    on either side of every block's edge, comes back as the symbol at its address."""
    _, _, path = _self_libc()
    with open(path, "rb") as f:
        table = UserSymbolizer()._load(f, os.path.getsize(path), path)
    # libc6-dbg's .symtab names its static functions too (ktop reads it, as perf does).
    debug = Path(f"/usr/lib/debug/.build-id/{_build_id_of(Path(path))[:2]}/"
                 f"{_build_id_of(Path(path))[2:]}.debug")
    at: dict[int, set[str]] = {}
    for elf_path in (path, *([debug] if debug.exists() else [])):
        with open(elf_path, "rb") as f:
            for section in ELFFile(f).iter_sections():
                if section["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                    for symbol in section.iter_symbols():
                        at.setdefault(symbol["st_value"], set()).add(symbol.name)
    assert len(table) > 20 * usersyms.NAMES_PER_BLOCK
    wrong = [(i, table._name(i)) for i in range(len(table))
             if table._name(i) not in at.get(table._starts[i], ())]
    assert wrong == []


def test_reading_a_binarys_symbols_leaves_nothing_for_the_collector() -> None:
    """Each new binary sampled is read once (libc with its debug file: two ELF files); what
    reading it made is freed when done, not left in reference cycles for the collector's
    oldest generation, which ktop runs rarely (pyelftools' parsed files left ~440 objects)."""
    import gc

    _, _, path = _self_libc()
    gc.collect()  # other tests' garbage, freed
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with open(path, "rb") as f:
            assert len(UserSymbolizer()._load(f, os.path.getsize(path), path)) > 1000
        gc.collect()
        left = [type(thing).__name__ for thing in gc.garbage
                if type(thing).__module__.startswith("elftools")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []


# ---- symbols a stripped binary keeps elsewhere: debug files and MiniDebugInfo ----------


def _build_id_of(path: Path) -> str:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        return next(n["n_desc"] for seg in elf.iter_segments() if seg["p_type"] == "PT_NOTE"
                    for n in seg.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID")


@pytest.fixture(scope="module")
def stripped_kinds(bins: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The PIE stripped of every symbol table, then given them back as distributions do."""
    import lzma

    d = tmp_path_factory.mktemp("debug")
    pie = bins["pie"]
    debug = d / "prog.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(pie), str(debug)], check=True)
    out = {"debug_file": debug}
    # MiniDebugInfo: an xz-compressed ELF holding .symtab, in the stripped file's .gnu_debugdata.
    mini = d / "mini"
    subprocess.run(["strip", "--strip-debug", "-o", str(mini), str(pie)], check=True)
    (d / "mini.xz").write_bytes(lzma.compress(mini.read_bytes()))
    out["minidebuginfo"] = d / "prog_minidebuginfo"
    subprocess.run(["strip", "--strip-all", "-o", str(out["minidebuginfo"]), str(pie)], check=True)
    subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={d / 'mini.xz'}",
                    str(out["minidebuginfo"])], check=True)
    # A .gnu_debuglink to prog.debug, found beside the binary.
    linked = d / "linked"
    linked.mkdir()
    shutil.copy(debug, linked / "prog.debug")
    out["debuglink"] = linked / "prog_debuglink"
    subprocess.run(["strip", "--strip-all", "-o", str(out["debuglink"]), str(pie)], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(out["debuglink"])], check=True)
    return out


def _resolve_leaf(binary: Path, root: Path, debug_root: Path, leaf: int) -> UserFrame:
    _fake_proc(root, 77, _maps_lines(binary, PIE_BASE))
    return UserSymbolizer(str(root), debug_root=str(debug_root)).resolve(77, [PIE_BASE + leaf + 4])[0]


def test_minidebuginfo_names_what_the_stripped_binary_lost(
    bins: dict[str, Path], stripped_kinds: dict[str, Path], tmp_path: Path
) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    binary = stripped_kinds["minidebuginfo"]
    with open(binary, "rb") as f:
        names = {s.name for s in ELFFile(f).iter_sections()}
    assert ".gnu_debugdata" in names and ".symtab" not in names
    frame = _resolve_leaf(binary, tmp_path / "proc", tmp_path / "no-debug", leaf)
    assert frame == UserFrame("ktop_test_leaf+0x4", str(binary))
    # Without it, the same stripped binary names nothing.
    frame = _resolve_leaf(bins["stripped"], tmp_path / "proc2", tmp_path / "no-debug", leaf)
    assert frame.symbol == "[unknown]"


def test_debug_file_by_build_id_names_a_stripped_binary(
    bins: dict[str, Path], stripped_kinds: dict[str, Path], tmp_path: Path
) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    build_id = _build_id_of(bins["stripped"])
    where = tmp_path / "debug" / ".build-id" / build_id[:2]
    where.mkdir(parents=True)
    shutil.copy(stripped_kinds["debug_file"], where / f"{build_id[2:]}.debug")
    frame = _resolve_leaf(bins["stripped"], tmp_path / "proc", tmp_path / "debug", leaf)
    assert frame == UserFrame("ktop_test_leaf+0x4", str(bins["stripped"]))


def test_debuglink_beside_the_binary_names_it_only_if_the_build_matches(
    bins: dict[str, Path], stripped_kinds: dict[str, Path], tmp_path: Path
) -> None:
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    binary = stripped_kinds["debuglink"]
    frame = _resolve_leaf(binary, tmp_path / "proc", tmp_path / "no-debug", leaf)
    assert frame == UserFrame("ktop_test_leaf+0x4", str(binary))
    # Another build's debug file under the linked name: its symbols would lie.
    other = tmp_path / "other"
    other.mkdir()
    src = other / "other.c"
    src.write_text(C_SOURCE.replace("y ^= 5;", "y ^= 6; y += x;"))
    _gcc(other / "prog", src, "-pie", "-fPIE")
    subprocess.run(["objcopy", "--only-keep-debug", str(other / "prog"), str(other / "prog.debug")],
                   check=True)
    assert _build_id_of(other / "prog") != _build_id_of(bins["pie"])
    impostor = tmp_path / "impostor"
    impostor.mkdir()
    shutil.copy(binary, impostor / binary.name)
    shutil.copy(other / "prog.debug", impostor / "prog.debug")
    frame = _resolve_leaf(impostor / binary.name, tmp_path / "proc2", tmp_path / "no-debug", leaf)
    assert frame.symbol == "[unknown]"


def _exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): the two names swap files atomically, as an attacker does."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


@pytest.mark.parametrize("swapped", ["debug file", "binary"])
def test_a_file_swapped_for_a_fifo_after_its_stat_never_blocks_the_collect_thread(
    bins: dict[str, Path], stripped_kinds: dict[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, swapped: str,
) -> None:
    """Any user can do it: stat() finds the regular file, then renameat2(RENAME_EXCHANGE)
    puts a FIFO under its name before the open. Opening that FIFO blocks until a writer
    comes: root's collect thread, and the screen with it, would hang for good."""
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    d = tmp_path / "user"
    d.mkdir()
    binary = d / stripped_kinds["debuglink"].name
    shutil.copy(stripped_kinds["debuglink"], binary)
    shutil.copy(stripped_kinds["debug_file"], d / "prog.debug")
    target = d / "prog.debug" if swapped == "debug file" else binary
    fifo = d / "fifo"
    os.mkfifo(fifo)
    real_stat = os.stat
    exchanged = []

    def stat_then_swap(path: object, *args: object, **kwargs: object) -> os.stat_result:
        result = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if str(path) == str(target) and not exchanged:
            _exchange(target, fifo)  # the race, won every time
            exchanged.append(path)
        return result

    _fake_proc(tmp_path / "proc", 77, _maps_lines(binary, PIE_BASE))
    symbolizer = UserSymbolizer(str(tmp_path / "proc"), debug_root=str(tmp_path / "no-debug"))
    frames: list[UserFrame] = []
    monkeypatch.setattr(os, "stat", stat_then_swap)
    thread = threading.Thread(
        target=lambda: frames.extend(symbolizer.resolve(77, [PIE_BASE + leaf + 4])), daemon=True)
    thread.start()
    thread.join(timeout=5)
    monkeypatch.undo()
    hung = thread.is_alive()
    if hung:  # be its writer, so the thread ends and the test run goes on
        os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=5)
    assert exchanged, "the swap was never made: the test tests nothing"
    assert not hung, f"the symbolizer blocked in the open of the FIFO swapped in for the {swapped}"
    # What it could not safely read names nothing, and the frame still says where it is.
    assert frames == [UserFrame("[unknown]", str(binary))]


def test_debian_python_names_its_interpreter_loop() -> None:
    """Debian's /usr/bin/python3.11 is stripped, non-PIE: .dynsym names what it exports."""
    python = Path("/usr/bin/python3.11")
    if not python.exists():
        pytest.skip("no /usr/bin/python3.11 here")
    with open(python, "rb") as f:
        elf = ELFFile(f)
        (symbol,) = elf.get_section_by_name(".dynsym").get_symbol_by_name("_PyEval_EvalFrameDefault")
    proc = subprocess.Popen([str(python), "-c", "import time; time.sleep(30)"])
    try:
        _wait_for_mapping(proc.pid, python)
        frame = UserSymbolizer().resolve(proc.pid, [symbol["st_value"] + 0x10])[0]
        assert frame == UserFrame("_PyEval_EvalFrameDefault+0x10", str(python))
    finally:
        proc.kill()
        proc.wait()


def test_new_processes_of_a_binary_share_its_names_without_a_stat_each(
    bins: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork loop: every process of the same file (device, inode) finds its table at once."""
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    root = tmp_path / "proc"
    for pid in range(100, 110):
        _fake_proc(root, pid, _maps_lines(bins["pie"], PIE_BASE + pid * 0x100000))
    sym = UserSymbolizer(str(root))
    assert sym.resolve(100, [PIE_BASE + 100 * 0x100000 + leaf])[0].symbol == "ktop_test_leaf+0x0"
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(usersyms.os, "stat", lambda p, *a, **k: stats.append(p) or real_stat(p, *a, **k))
    for pid in range(101, 110):
        frame = sym.resolve(pid, [PIE_BASE + pid * 0x100000 + leaf])[0]
        assert frame == UserFrame("ktop_test_leaf+0x0", str(bins["pie"]))
    assert stats == []
    # Later, the file is looked at again: a rebuilt binary is not named by the old table.
    monkeypatch.setattr(usersyms, "FILE_RECHECK_S", 0.0)
    _fake_proc(root, 111, _maps_lines(bins["pie"], PIE_BASE))
    sym.resolve(111, [PIE_BASE + leaf])
    assert stats


def test_processes_of_one_binary_share_their_named_frames(bins: dict[str, Path], tmp_path: Path) -> None:
    """A fork loop's thousands of processes named the same frames anew, each a copy held by
    every stack of the window and the totals: one object per frame named alike."""
    root = tmp_path / "proc"
    for pid in (1, 2, 3):
        _fake_proc(root, pid, _maps_lines(bins["pie"], PIE_BASE))
    sym = UserSymbolizer(str(root))
    leaf = _symbols(bins["pie"])["ktop_test_leaf"][0]
    frames = [sym.resolve(pid, [PIE_BASE + leaf + 4])[0] for pid in (1, 2, 3)]
    assert frames[0].symbol == "ktop_test_leaf+0x4"
    assert frames[1] is frames[0] and frames[2] is frames[0]


def test_frames_shared_across_processes_are_bounded_and_hot_ones_keep_their_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames named alike in every process are one object, kept in two generations within
    FRAMES_SHARED: a frame named again and again (a fork loop's) keeps its object across
    any number of turns, one named once goes."""
    monkeypatch.setattr(usersyms, "FRAMES_SHARED", 64)
    symbolizer = UserSymbolizer()
    hot = symbolizer._shared_frame(UserFrame("main+0x10", "/usr/bin/loop"))
    for i in range(1000):
        symbolizer._shared_frame(UserFrame(f"f{i}+0x1", "/usr/lib/libx.so"))
        kept = [*symbolizer._frames, *getattr(symbolizer, "_frames_before", ())]
        assert len(kept) <= 64
        if i % 16 == 0:
            assert symbolizer._shared_frame(UserFrame("main+0x10", "/usr/bin/loop")) is hot
    assert UserFrame("f0+0x1", "/usr/lib/libx.so") not in kept
