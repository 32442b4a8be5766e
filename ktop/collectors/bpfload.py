"""Everything needed before a BPF program runs: privileges, tracefs, headers, then loading.

Each failure becomes `Unavailable` with a one-line reason that names the fix; the pane that
needed the program shows it, and the other panes go on.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import threading
from collections.abc import Callable
from importlib import resources

from ktop.collectors import progcache
from ktop.collectors.headers import HeadersUnavailable, KernelHeaders, find_kernel_headers
from ktop.collectors.loader import CompileFailed, LoadedProgram, load_in_child

TRACEFS = "/sys/kernel/tracing"
_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39

_headers: KernelHeaders | None = None
_headers_error: str | None = None
_headers_lock = threading.Lock()  # panes load in threads of their own


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
    """Found once per process, and handed to every compile."""
    global _headers, _headers_error
    with _headers_lock:
        if _headers is None and _headers_error is None:
            try:
                _headers = find_kernel_headers()
            except HeadersUnavailable as e:
                _headers_error = str(e)
    if _headers is None:
        raise Unavailable(_headers_error)
    return _headers


def headers_looked_for() -> bool:
    """Whether a compile has looked for the headers yet (headers_description() is then cheap)."""
    return _headers is not None or _headers_error is not None


def headers_description() -> str:
    try:
        return kernel_headers().description
    except Unavailable as e:
        return f"none ({e})"


def bpf_source_dir() -> str:
    return str(resources.files("ktop.bpf"))


def load_program(
    filename: str, cflags: list[str] | None = None, functions: dict[str, str] | None = None
) -> LoadedProgram:
    """Load bpf/<filename> with `functions` ({name: "PERF_EVENT"|"TRACEPOINT"}): from the
    cache of compiled programs (progcache) when it holds a sound entry for this kernel,
    source and options; compiled in a child process (see loader) otherwise, and kept."""
    check_privileges()
    ensure_tracefs()
    source = kernel_headers().source
    environment = {"BCC_KERNEL_SOURCE": source} if source else {}
    request = progcache.Request(filename, bpf_source_dir(), tuple(cflags or ()),
                                dict(functions or {}), environment)
    cache = progcache.ProgramCache.open()
    try:
        return _load_cached(request, source, cache)
    finally:
        if cache is not None:
            cache.close()


def _load_cached(request: progcache.Request, source: str | None,
                 cache: progcache.ProgramCache | None) -> LoadedProgram:
    problem = key = ""
    if cache is not None:
        say("loading its BPF program from the cache")
        key = progcache.entry_key(request, source)
        description, problem = cache.lookup(request, key)
        if description is not None:
            try:
                return progcache.load(description)
            except progcache.LoadFailed as e:
                problem = f"did not load: {e}"
    say("compiling its BPF program")
    try:
        loaded = load_in_child(request.filename, request.source_dir, list(request.cflags),
                               request.functions, request.environment,
                               describe=cache is not None,
                               on_wait=_waiting)
    except CompileFailed as e:
        raise Unavailable(str(e)) from None
    if cache is not None and loaded.description is not None:
        try:
            cache.store(request, key, json.loads(loaded.description))
        except ValueError:
            problem = problem or "the compiler's description was not JSON"
    if problem:
        note(f"{request.filename}: the cached compile was {problem}; compiled again and "
             "replaced")
    return loaded


def _waiting(waiting: bool) -> None:
    say("waiting for a BPF compiler (the others are busy)" if waiting
        else "compiling its BPF program")


# What the loading thread is doing and what it found, told to whoever started it.
_thread = threading.local()


def on_status(callback: Callable[[str], None] | None) -> None:
    """callback(what) each time this thread's loading moves on ("compiling its BPF
    program"); None: nobody listens."""
    _thread.status = callback


def say(what: str) -> None:
    callback = getattr(_thread, "status", None)
    if callback is not None:
        callback(what)


def note(text: str) -> None:
    """A line for the pane's status (L): a cache entry replaced."""
    _thread.notes = [*getattr(_thread, "notes", []), text]


def take_notes() -> list[str]:
    """The notes this thread made since it last took them."""
    notes, _thread.notes = getattr(_thread, "notes", []), []
    return notes


# glibc serves an allocation this big or bigger from a mapping of its own, returned whole when
# freed. glibc's default starts here but rises after each such free (up to 32 MiB), after
# which a refresh's big lists and tables came from the arenas and left them full of holes.
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def pin_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold where it starts (once, before threads start); False where
    the C library has no mallopt or refuses it."""
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


def trim_heap() -> None:
    """Return to the kernel the free memory glibc holds in every thread's arena."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # a libc without malloc_trim: nothing to give back
        pass
