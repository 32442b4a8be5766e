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
