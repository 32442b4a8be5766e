"""A binary any user can run, forged so that reading its symbols would cost ktop (root, in
its collect thread) minutes of CPU and hundreds of MB: a million section headers, a symbol
table of 128 MiB. It runs fine; ktop reads no more of it than its bounds, names its frames
[unknown] and counts it in the CPU pane's losses. The files are sparse: a few KB on disk."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from test_usersyms import C_SOURCE, _gcc, _symbols, _wait_for_mapping

from ktop.model import CpuProfile, Snapshot
from ktop.symbolize import user as usersyms
from ktop.symbolize.user import UserSymbolizer
from ktop.ui.widgets.header import loss_lines


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    src = d / "ktop_test.c"
    src.write_text(C_SOURCE)
    _gcc(d / "prog", src, "-pie", "-fPIE")
    return d / "prog"


def million_sections(program: Path, out: Path, count: int = 1_000_000) -> Path:
    """The program with a section header table of `count` entries (ELF's extended numbering:
    e_shnum 0, the count in section 0's sh_size); the headers past the first are a hole."""
    shutil.copy(program, out)
    with open(out, "r+b") as f:
        table = (os.fstat(f.fileno()).st_size + 4095) // 4096 * 4096
        f.seek(table)
        f.write(struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, count, 0, 0, 0, 0))
        f.truncate(table + count * 64)
        f.seek(0x28)
        f.write(struct.pack("<Q", table))  # e_shoff
        f.seek(0x3C)
        f.write(struct.pack("<HH", 0, 0))  # e_shnum (extended), e_shstrndx
    return out


def huge_symtab(program: Path, out: Path, size: int = 128 << 20) -> Path:
    """The program with its .symtab said to be `size` bytes, at the end of the file (a hole)."""
    shutil.copy(program, out)
    with open(out, "rb") as f:
        elf = ELFFile(f)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".symtab")
        header_at = elf["e_shoff"] + index * elf["e_shentsize"]
    with open(out, "r+b") as f:
        end = (os.fstat(f.fileno()).st_size + 4095) // 4096 * 4096
        f.truncate(end + size)
        f.seek(header_at + 24)  # sh_offset, sh_size
        f.write(struct.pack("<QQ", end, size))
    return out


def resolve_running(path: Path, program: Path) -> tuple[str, float, UserSymbolizer]:
    """The name ktop gives main (where it is in `program`) while `path` runs, and the CPU
    seconds it took."""
    syms = _symbols(program)
    process = subprocess.Popen([str(path), "wait"])
    try:
        lines = _wait_for_mapping(process.pid, path)
        base = min(int(ln.split("-")[0], 16) for ln in lines if ln.split()[2] == "00000000")
        symbolizer = UserSymbolizer()
        started = time.thread_time()
        frames = symbolizer.resolve(process.pid, [base + syms["main"][0] + 4])
        spent = time.thread_time() - started
    finally:
        process.kill()
        process.wait()
    assert frames[0].module == str(path)
    return frames[0].symbol, spent, symbolizer


def test_the_program_is_named_when_it_is_not_forged(program):
    symbol, _spent, symbolizer = resolve_running(program, program)
    assert symbol == "main+0x4" and symbolizer.unread == 0


def test_a_million_section_headers_cost_no_minutes(program, tmp_path):
    """It cost 35 s of CPU and 348 MB (74 s wall at load 7) before the bound."""
    path = million_sections(program, tmp_path / "prog")
    assert os.stat(path).st_blocks * 512 < 1 << 20  # sparse
    symbol, spent, symbolizer = resolve_running(path, program)
    assert symbol == "[unknown]"
    assert spent < 1.0, f"{spent:.1f} s of CPU"
    assert symbolizer.unread == 1


def test_a_symbol_table_bigger_than_any_is_not_read(program, tmp_path):
    path = huge_symtab(program, tmp_path / "prog")
    symbol, spent, symbolizer = resolve_running(path, program)
    assert symbol == "[unknown]" and spent < 1.0 and symbolizer.unread == 1


def test_a_binary_that_takes_too_long_is_given_up(program, tmp_path, monkeypatch):
    """The CPU budget holds whatever the sizes: with none left, even a small binary stops."""
    monkeypatch.setattr(usersyms, "MAX_LOAD_CPU_S", -1.0, raising=False)
    symbol, _spent, symbolizer = resolve_running(program, program)
    assert symbol == "[unknown]" and symbolizer.unread == 1


def test_an_unread_binary_is_a_loss_that_costs_no_count():
    cpu = CpuProfile(sample_hz=99, cpus=2, window_s=5.0, cumulative=False, total_samples=10,
                     idle_samples=0, kernel_samples=10, user_samples=0,
                     lost={"binary_unread": 1}, functions=(), stacks=())
    snapshot = Snapshot(ktop_version="0", kernel="6", hostname="h", taken_at=1.0,
                        duration_s=5.0, headers="", processes=(), cpu=cpu)
    [(_pane, name, count, why, intact)] = loss_lines(snapshot)
    assert (name, count, intact) == ("binary_unread", 1, True)
    assert "[unknown]" in why
