"""Compiling and loading a BPF program with bcc; runs only in the compiler child process
(ktop.collectors.loader), never in ktop's own."""

from __future__ import annotations

import os
import tempfile
from typing import Any


class CompileError(Exception):
    """str() is the one-line reason, naming the fix where there is one."""


class _CapturedStderr:
    """Points fd 2 at a temporary file: clang and the verifier print there."""

    def __enter__(self) -> _CapturedStderr:
        self._file = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def text(self) -> str:
        self._file.seek(0)
        return self._file.read().decode(errors="replace")

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.close()


def compile_program(filename: str, source_dir: str, cflags: list[str],
                    functions: dict[str, str]) -> Any:
    """A bcc BPF object for source_dir/filename with `functions` ({name: "PERF_EVENT"|...})
    loaded. Loading happens here rather than at attach time so that a verifier rejection is
    caught with its log."""
    try:
        import bcc  # noqa: PLC0415
    except ImportError:
        raise CompileError("bcc is not installed: apt install python3-bpfcc") from None
    flags = [f"-I{source_dir}", *cflags]
    with _CapturedStderr() as captured:
        try:
            program = bcc.BPF(src_file=os.path.join(source_dir, filename).encode(), cflags=flags)
        except Exception as e:
            raise CompileError(compile_error(filename, captured.text(), e)) from None
        try:
            for name, prog_type in functions.items():
                program.load_func(name.encode(), getattr(bcc.BPF, prog_type))
        except Exception as e:
            raise CompileError(load_error(filename, captured.text(), e)) from None
    return program


def load_error(filename: str, stderr: str, error: Exception) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    # The verifier's verdict is the last line before its statistics.
    verdict = next((line for line in reversed(lines) if not line.startswith("processed")), "")
    if "Permission denied" in str(error) and not verdict:
        return f"loading {filename} was refused: run as root"
    return f"the kernel rejected {filename}: {(verdict or str(error)).strip()[:160]}"


def compile_error(filename: str, stderr: str, error: Exception) -> str:
    first_error = next((line for line in stderr.splitlines() if "error:" in line), "")
    detail = first_error.strip() or str(error).strip().splitlines()[0]
    if "permission" in detail.lower() or "Operation not permitted" in detail:
        return f"loading {filename} was refused ({detail}): run as root"
    return f"{filename} failed to compile: {detail[:160]}"


# --- what a later start needs to load the program again without bcc (ktop.collectors.progcache)

_LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW: two instruction slots
_CALL = 0x85  # BPF_JMP | BPF_CALL
_PSEUDO_MAP_FD = 1
_AUTOLOADED = (b"kprobe__", b"kretprobe__", b"tracepoint__", b"kfunc__", b"kretfunc__", b"lsm__")
RAW_TRACEPOINT_PREFIX = "raw_tracepoint__"


class NotKeepable(Exception):
    """The program needs more than its instructions and maps to load again (say which)."""


def relocations(insns: bytes, map_names: dict[int, str]) -> tuple[bytes, list[tuple[int, str]]]:
    """The instructions with each map reference's descriptor zeroed, and (instruction index,
    map name) for each, so a later load patches in its own maps' descriptors."""
    code = bytearray(insns)
    found = []
    i = 0
    count = len(code) // 8
    while i < count:
        op, regs = code[i * 8], code[i * 8 + 1]
        source = regs >> 4
        if op == _LD_IMM64:
            if source == _PSEUDO_MAP_FD:
                fd = int.from_bytes(code[i * 8 + 4:i * 8 + 8], "little", signed=True)
                if fd not in map_names:
                    raise NotKeepable(f"instruction {i} refers to descriptor {fd}, no map of its")
                found.append((i, map_names[fd]))
                code[i * 8 + 4:i * 8 + 8] = bytes(4)
            elif source:
                raise NotKeepable(f"instruction {i} loads a pseudo value of kind {source}")
            i += 2
            continue
        if op == _CALL and source:
            raise NotKeepable(f"instruction {i} calls a BPF function or a kernel function")
        i += 1
    return bytes(code), found


def describe(program: Any, tables: list[dict]) -> dict:
    """A compiled and loaded bcc program as ktop.collectors.progcache keeps it: every map's
    definition, every loaded function's instructions with their map references, type, name
    and attachment; the maps' BTF as bcc made them (programs load without func_info and
    line_info: a verifier log then has no source lines). NotKeepable if the
    program needs what this leaves out."""
    from bcc.libbcc import lib  # noqa: PLC0415

    from ktop.collectors.bpfsys import btf_blob, map_info, program_info  # noqa: PLC0415

    maps = []
    names = {}
    btf_ids = set()
    for table in tables:
        info = map_info(table["fd"])
        names[table["fd"]] = table["name"]
        typed = info.btf_id and info.btf_value_type_id
        if typed:
            btf_ids.add(info.btf_id)
        maps.append({
            "name": table["name"], "kernel_name": info.name.decode(errors="replace"),
            "type": info.type, "key_size": info.key_size, "value_size": info.value_size,
            "max_entries": info.max_entries, "flags": info.map_flags,
            "key": table["key"], "value": table["value"],
            "btf_key": info.btf_key_type_id if typed else 0,
            "btf_value": info.btf_value_type_id if typed else 0,
        })
    if len(btf_ids) > 1:
        raise NotKeepable("its maps are typed by more than one BTF object")
    programs = []
    for name, function in program.funcs.items():
        if name.startswith(_AUTOLOADED):
            raise NotKeepable(f"{name.decode()} is attached by bcc in a way ktop does not repeat")
        info = program_info(function.fd)
        if info is None:
            raise NotKeepable(f"cannot read {name.decode()}'s program information")
        insns, relocated = relocations(program.dump_func(name), names)
        text = name.decode()
        programs.append({
            "name": text, "kernel_name": info.name.decode(errors="replace"), "type": info.type,
            "insns": insns.hex(), "maps": relocated,
            "raw_tracepoint": (text[len(RAW_TRACEPOINT_PREFIX):]
                               if text.startswith(RAW_TRACEPOINT_PREFIX) else ""),
        })
    return {
        # The program's types, as bcc made its maps with them (task storage needs them).
        "btf": btf_blob(btf_ids.pop()).hex() if btf_ids else "",
        "license": (lib.bpf_module_license(program.module) or b"GPL").decode(),
        "kern_version": int(lib.bpf_module_kern_version(program.module)),
        "maps": maps, "programs": programs,
    }
