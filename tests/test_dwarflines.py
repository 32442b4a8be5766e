"""DWARF line lookup, exercised on small gcc -g programs (the same code reads vmlinux)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from ktop.symbolize import lines as dwarflines
from ktop.symbolize.lines import KernelLineTable

MAIN_C = """\
#include <stdio.h>

int ktop_dw_other(int x);

int ktop_test_leaf(int x) {
    int y = x * 3;
    y ^= 5;
    return y + 1;
}

int ktop_test_caller(int x)
{
    return ktop_test_leaf(x) + ktop_dw_other(x);
}

int main(int argc, char **argv) {
    (void)argv;
    return ktop_test_caller(argc) & 1;
}
"""

OTHER_C = """\
/* second compilation unit */

int ktop_dw_other(int x) {
    return x - 1;
}
"""


def _line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


LEAF_LINE = _line_of(MAIN_C, "int ktop_test_leaf(int x) {")
LEAF_BODY_LINE = _line_of(MAIN_C, "int y = x * 3;")
# gcc puts a function's entry row on its opening brace, which here has a line of its own.
CALLER_BRACE_LINE = _line_of(MAIN_C, "int ktop_test_caller(int x)") + 1
OTHER_LINE = _line_of(OTHER_C, "int ktop_dw_other(int x) {")


def _build(d: Path, name: str, *flags: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "ktop_dw.c").write_text(MAIN_C)
    (d / "ktop_dw_other.c").write_text(OTHER_C)
    out = d / name
    subprocess.run(
        ["gcc", "-O0", *flags, "-o", name, "ktop_dw.c", "ktop_dw_other.c"], cwd=d, check=True
    )
    return out


def _sym(path: Path, name: str) -> int:
    with open(path, "rb") as f:
        (sym,) = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name(name)
        return sym["st_value"]


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("dw"), "prog", "-g")


def _check_known_lines(table: KernelLineTable, path: Path) -> None:
    assert table.lookup(_sym(path, "ktop_test_leaf")) == f"ktop_dw.c:{LEAF_LINE}"
    assert table.lookup(_sym(path, "ktop_test_caller")) == f"ktop_dw.c:{CALLER_BRACE_LINE}"
    assert table.lookup(_sym(path, "ktop_dw_other")) == f"ktop_dw_other.c:{OTHER_LINE}"


def test_function_definition_lines(prog: Path) -> None:
    table = KernelLineTable.from_elf(str(prog))
    assert table is not None
    _check_known_lines(table, prog)
    leaf = _sym(prog, "ktop_test_leaf")
    body = {table.lookup(a) for a in range(leaf, leaf + 24)}
    assert f"ktop_dw.c:{LEAF_BODY_LINE}" in body
    table.close()


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(("-gdwarf-4",), id="dwarf4"),
        pytest.param(("-gdwarf-5",), id="dwarf5"),
        pytest.param(("-g", "-no-pie", "-fno-pie"), id="no-pie"),
        pytest.param(("-g", "-ffunction-sections"), id="function-sections"),
        pytest.param(("-g", "-gz=zlib"), id="compressed-sections"),
    ],
)
def test_dwarf_variants(tmp_path: Path, flags: tuple[str, ...]) -> None:
    path = _build(tmp_path, "prog", *flags)
    table = KernelLineTable.from_elf(str(path))
    assert table is not None
    _check_known_lines(table, path)


@pytest.mark.parametrize("flags", [("-gdwarf-4",), ("-gdwarf-5", "-ffunction-sections")])
def test_without_debug_aranges(tmp_path: Path, flags: tuple[str, ...]) -> None:
    # clang emits no .debug_aranges by default; CU ranges then come from the top DIEs.
    path = _build(tmp_path, "prog", *flags)
    subprocess.run(["objcopy", "--remove-section=.debug_aranges", str(path)], check=True)
    with open(path, "rb") as f:
        assert ELFFile(f).get_section_by_name(".debug_aranges") is None
    table = KernelLineTable.from_elf(str(path))
    assert table is not None
    _check_known_lines(table, path)


def test_absolute_source_paths_are_made_relative_to_comp_dir(tmp_path: Path) -> None:
    (tmp_path / "ktop_dw.c").write_text(MAIN_C)
    (tmp_path / "ktop_dw_other.c").write_text(OTHER_C)
    out = tmp_path / "prog"
    sources = [str(tmp_path / "ktop_dw.c"), str(tmp_path / "ktop_dw_other.c")]
    subprocess.run(["gcc", "-g", "-o", str(out), *sources], cwd=tmp_path, check=True)
    table = KernelLineTable.from_elf(str(out))
    assert table is not None
    _check_known_lines(table, out)


def test_lean_reader_matches_pyelftools_reader(prog: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lean = KernelLineTable.from_elf(str(prog))
    monkeypatch.setattr(dwarflines, "_lean_dwarfinfo", lambda elf, mm: None)
    plain = KernelLineTable.from_elf(str(prog))
    assert lean is not None and plain is not None
    with open(prog, "rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        lo, hi = text["sh_addr"], text["sh_addr"] + text["sh_size"]
    answers = [(lean.lookup(a), plain.lookup(a)) for a in range(lo, hi)]
    assert all(a == b for a, b in answers)
    assert sum(1 for a, _ in answers if a) > 20


def test_matches_addr2line(prog: Path) -> None:
    table = KernelLineTable.from_elf(str(prog))
    assert table is not None
    start = _sym(prog, "ktop_test_leaf")
    addrs = list(range(start, _sym(prog, "main") + 8))
    out = subprocess.run(
        ["addr2line", "-e", str(prog), *(hex(a) for a in addrs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    for addr, expected in zip(addrs, out, strict=True):
        expected = expected.split(" (discriminator")[0]
        got = table.lookup(addr)
        assert got is not None and expected.endswith("/" + got), (hex(addr), got, expected)


def test_addresses_outside_the_image(prog: Path) -> None:
    table = KernelLineTable.from_elf(str(prog))
    assert table is not None
    for addr in (0, 1, 0xFFFFFFFFC0001234, 2**64 - 1):
        assert table.lookup(addr) is None
        assert table.lookup(addr) is None  # cached answer


def test_no_dwarf_or_not_elf(tmp_path: Path, prog: Path) -> None:
    stripped = tmp_path / "stripped"
    subprocess.run(["strip", "-o", str(stripped), str(prog)], check=True)
    text = tmp_path / "vmlinux.txt"
    text.write_text("not an ELF\n")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated"
    truncated.write_bytes(prog.read_bytes()[:3000])
    for path in (stripped, text, empty, truncated, tmp_path, tmp_path / "missing"):
        assert KernelLineTable.from_elf(str(path)) is None


def test_a_vmlinux_swapped_for_a_fifo_after_its_check_is_refused_not_waited_on(
    tmp_path: Path, prog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "vmlinux"
    os.mkfifo(fifo)
    real_stat = os.stat
    # Any stat() finds the regular file that stood there a moment before.
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: real_stat(
        prog if str(path) == str(fifo) else path, *a, **k))
    found: list[object] = []
    thread = threading.Thread(target=lambda: found.append(KernelLineTable.from_elf(str(fifo))),
                              daemon=True)
    thread.start()
    thread.join(timeout=5)
    monkeypatch.undo()
    hung = thread.is_alive()
    if hung:  # be its writer, so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=5)
    assert not hung and found == [None]
    # A link named on purpose (--vmlinux) is followed to its regular file.
    (tmp_path / "link").symlink_to(prog)
    table = KernelLineTable.from_elf(str(tmp_path / "link"))
    assert table is not None
    table.close()


def test_truncated_dwarf_does_not_raise(tmp_path: Path, prog: Path) -> None:
    data = prog.read_bytes()
    with open(prog, "rb") as f:
        info = ELFFile(f).get_section_by_name(".debug_line")
        cut = info["sh_offset"] + info["sh_size"] // 2
    bad = tmp_path / "bad"
    # Same size as before, but the second half of .debug_line onwards is zeroed.
    bad.write_bytes(data[:cut] + bytes(len(data) - cut))
    table = KernelLineTable.from_elf(str(bad))
    if table is not None:
        for name in ("ktop_test_leaf", "ktop_test_caller", "ktop_dw_other", "main"):
            table.lookup(_sym(prog, name))


def test_open_missing() -> None:
    assert KernelLineTable.open(path="/nonexistent") is None
    assert KernelLineTable.open(kernel_release="0.0.0-ktop-no-such-release") is None


def test_open_applies_kaslr_offset(
    prog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaf = _sym(prog, "ktop_test_leaf")
    slide = 0x2A00000
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_text(f"{0x1000:016x} T something_else\n{leaf + slide:016x} T ktop_test_leaf\n")
    monkeypatch.setattr(dwarflines, "_KALLSYMS", str(kallsyms))
    monkeypatch.setattr(dwarflines, "_KASLR_ANCHORS", ("ktop_test_leaf",))
    table = KernelLineTable.open(path=str(prog))
    assert table is not None
    assert table.lookup(leaf + slide) == f"ktop_dw.c:{LEAF_LINE}"
    # A vmlinux for another release is not the running kernel: no slide applied.
    other = KernelLineTable.open(path=str(prog), kernel_release="0.0.0-other")
    assert other is not None
    assert other.lookup(leaf) == f"ktop_dw.c:{LEAF_LINE}"
    # kptr_restrict hides addresses as zeros: no slide can be known.
    kallsyms.write_text(f"{0:016x} T ktop_test_leaf\n")
    hidden = KernelLineTable.open(path=str(prog))
    assert hidden is not None
    assert hidden.lookup(leaf) == f"ktop_dw.c:{LEAF_LINE}"
