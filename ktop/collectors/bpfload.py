"""Everything needed before a BPF program runs: privileges, tracefs, headers, compilation.

Each failure becomes `Unavailable` with a one-line reason that names the fix; the pane that
needed the program shows it, and the other panes go on.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import threading
from importlib import resources
from typing import Any

from ktop.collectors.headers import HeadersUnavailable, KernelHeaders, find_kernel_headers

TRACEFS = "/sys/kernel/tracing"
_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39

# clang inside bcc is not known to be thread-safe, and fd 2 is process-wide while we capture it.
_compile_lock = threading.Lock()
_headers: KernelHeaders | None = None
_headers_error: str | None = None


class Unavailable(Exception):
    """A collector cannot run here; str() is the one-line reason and fix shown in its pane."""


def _effective_caps() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def check_privileges() -> None:
    if os.geteuid() == 0:
        return
    caps = _effective_caps()
    if caps >> _CAP_SYS_ADMIN & 1 or (caps >> _CAP_BPF & 1 and caps >> _CAP_PERFMON & 1):
        return
    raise Unavailable("needs root (or CAP_BPF and CAP_PERFMON): run `sudo ktop`")


def ensure_tracefs(root: str = TRACEFS) -> str:
    """tracefs holds the tracepoint formats bcc compiles against; mount it if nobody has."""
    if os.path.isdir(os.path.join(root, "events")):
        return root
    result = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", root], capture_output=True, text=True, check=False
    )
    if result.returncode != 0 or not os.path.isdir(os.path.join(root, "events")):
        raise Unavailable(f"tracefs is not mounted at {root}: run `mount -t tracefs nodev {root}`")
    return root


def tracepoint_exists(category: str, event: str, root: str = TRACEFS) -> bool:
    return os.path.isdir(os.path.join(root, "events", category, event))


def require_tracepoints(names: list[str], needs: str, root: str = TRACEFS) -> None:
    """names like "lock:contention_begin"; needs says which kernel has them."""
    missing = [n for n in names if not tracepoint_exists(*n.split(":", 1), root=root)]
    if missing:
        raise Unavailable(f"kernel lacks tracepoint {', '.join(missing)} ({needs})")


def kernel_headers() -> KernelHeaders:
    """Found once per process; BCC_KERNEL_SOURCE is set for every later compile."""
    global _headers, _headers_error
    if _headers is None and _headers_error is None:
        try:
            _headers = find_kernel_headers()
            if _headers.source:
                os.environ["BCC_KERNEL_SOURCE"] = _headers.source
        except HeadersUnavailable as e:
            _headers_error = str(e)
    if _headers is None:
        raise Unavailable(_headers_error)
    return _headers


def headers_description() -> str:
    try:
        return kernel_headers().description
    except Unavailable as e:
        return f"none ({e})"


def bpf_source_dir() -> str:
    return str(resources.files("ktop.bpf"))


def import_bcc() -> Any:
    try:
        import bcc
    except ImportError:
        raise Unavailable("bcc is not installed: apt install python3-bpfcc") from None
    return bcc


class _CapturedStderr:
    """Points fd 2 at a temporary file: libbcc and the verifier print there, not on our tty."""

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


def compile_program(
    filename: str, cflags: list[str] | None = None, functions: dict[str, str] | None = None
) -> Any:
    """Compile bpf/<filename> with bcc and load `functions` ({name: "PERF_EVENT"|"TRACEPOINT"}).

    Loading happens here rather than lazily at attach time so that a verifier rejection is
    caught with its log, not printed over the screen.
    """
    check_privileges()
    ensure_tracefs()
    kernel_headers()
    bcc = import_bcc()
    src_dir = bpf_source_dir()
    flags = [f"-I{src_dir}", *(cflags or [])]
    with _compile_lock, _CapturedStderr() as captured:
        try:
            program = bcc.BPF(src_file=os.path.join(src_dir, filename).encode(), cflags=flags)
        except Exception as e:
            raise Unavailable(_compile_error(filename, captured.text(), e)) from None
        try:
            for name, prog_type in (functions or {}).items():
                program.load_func(name.encode(), getattr(bcc.BPF, prog_type))
        except Exception as e:
            program.cleanup()
            raise Unavailable(_load_error(filename, captured.text(), e)) from None
    return program


_MADV_PAGEOUT = 21  # Linux 5.4+
_COMPILER_LIBRARIES = ("libLLVM", "libclang")


def release_compiler_memory(maps_path: str = "/proc/self/maps") -> None:
    """Hand back what compiling cost, once every program is loaded (ktop compiles only at
    start): the heap clang and LLVM freed (about 60 MiB: glibc keeps freed memory for
    reuse), and the compiler libraries' pages, which compiling touched (about 75 MiB of
    RSS). Paged out, they stay in the page cache, and return only if touched again."""
    trim_heap()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, end in compiler_mappings(maps_path):
        # Private pages the loader wrote (relocations) cannot be paged out without swap
        # and stay; EINVAL on kernels before 5.4 leaves everything as it was.
        libc.madvise(start, end - start, _MADV_PAGEOUT)


def trim_heap() -> None:
    """Return to the kernel the free memory glibc holds in every thread's arena."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # a libc without malloc_trim: nothing to give back
        pass


def compiler_mappings(maps_path: str = "/proc/self/maps") -> list[tuple[int, int]]:
    """(start, end) of every mapping of the compiler libraries bcc links."""
    ranges = []
    try:
        with open(maps_path) as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and any(n in fields[5] for n in _COMPILER_LIBRARIES):
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        pass
    return ranges


def _load_error(filename: str, stderr: str, error: Exception) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    # The verifier's verdict is the last line before its statistics.
    verdict = next((line for line in reversed(lines) if not line.startswith("processed")), "")
    if "Permission denied" in str(error) and not verdict:
        return f"loading {filename} was refused: run as root"
    return f"the kernel rejected {filename}: {(verdict or str(error)).strip()[:160]}"


def _compile_error(filename: str, stderr: str, error: Exception) -> str:
    first_error = next((line for line in stderr.splitlines() if "error:" in line), "")
    detail = first_error.strip() or str(error).strip().splitlines()[0]
    if "permission" in detail.lower() or "Operation not permitted" in detail:
        return f"loading {filename} was refused ({detail}): run as root"
    return f"{filename} failed to compile: {detail[:160]}"
