"""Compiling a BPF program in a child process, which hands the kernel objects back.

bcc links clang and LLVM: loading them costs a process 12 MiB of relocated data it can never
give back, compiling leaves 20 MiB more behind, and a compile running in a thread holds
the interpreter's lock away from the screen. So ktop runs `python -m ktop.collectors.loader`
once per program: the child compiles and loads it with bcc, sends the descriptors of its
maps, programs and any attachments bcc made (raw tracepoints) over a Unix socket with
SCM_RIGHTS, and exits. The kernel objects live on in ktop's process, which reads and
attaches them with plain system calls (bpfsys). Killing the child mid-compile leaves
nothing loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ktop.collectors.bpfsys import BpfMap

MAX_REPLY = 1 << 20  # bytes of JSON; a program's map descriptions take a few KiB
MAX_FDS = 250  # SCM_MAX_FD is 253


class CompileFailed(Exception):
    """The child could not compile or load the program; str() is the one-line reason."""


@dataclass
class LoadedProgram:
    """A program's kernel objects, held by descriptor in this process."""

    maps: dict[str, BpfMap]
    programs: dict[str, int]  # function name -> program descriptor
    links: list[int] = field(default_factory=list)  # attachments: closing one detaches
    closed: bool = False
    # From the compiler: what progcache keeps to load it again (JSON), or why it cannot.
    description: bytes | None = None
    not_kept: str = ""

    def keep(self, *fds: int) -> None:
        """Hold attachments made here (perf events) until close()."""
        self.links.extend(fds)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in [*self.links, *self.programs.values(), *(m.fd for m in self.maps.values())]:
            try:
                os.close(fd)
            except OSError:
                pass


class Compiler:
    """One child process that compiles programs on request, one after the other (starting
    Python and loading bcc takes 0.17 s: paid once for all of ktop's programs)."""

    def __init__(self, nice: int = 0) -> None:
        self._lock = threading.Lock()
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._errors = tempfile.TemporaryFile()
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        with theirs:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "ktop.collectors.loader", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._errors, env=env,
            )
        if nice:
            self._set_nice(nice)
        with _registry_lock:
            _running.add(self)

    def _set_nice(self, nice: int) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, self._child.pid, nice)
        except OSError:  # gone, or no CAP_SYS_NICE to raise it again: it compiles anyway
            pass

    def hurry(self) -> None:
        """Back to normal priority (it was started niced, behind the screen's first frame)."""
        self._set_nice(0)

    def load(self, filename: str, source_dir: str, cflags: list[str],
             functions: dict[str, str], environment: dict[str, str],
             describe: bool = False) -> LoadedProgram:
        """Compile source_dir/filename and load `functions` ({name: "PERF_EVENT"|...}), with
        `environment` set for bcc; CompileFailed with the reason if it cannot. describe:
        the result's description says how to load it again without bcc (progcache)."""
        request = {"filename": filename, "source_dir": source_dir, "cflags": cflags,
                   "functions": functions, "environment": environment, "describe": describe}
        with self._lock:
            try:
                self._socket.sendall(json.dumps(request).encode())
                message, fds, _flags, _addr = socket.recv_fds(self._socket, MAX_REPLY, MAX_FDS)
            except (BrokenPipeError, ConnectionResetError):  # it died before this request
                raise CompileFailed(f"the BPF compiler process {self._death()}") from None
            except OSError as e:
                raise CompileFailed(f"cannot talk to the BPF compiler process: {e}") from None
            if not message:  # the child is gone
                raise CompileFailed(f"the BPF compiler process {self._death()}")
        return _unpack(json.loads(message), fds)

    def _death(self) -> str:
        self._child.wait()
        self._errors.seek(0)
        last = (self._errors.read().decode(errors="replace").strip().splitlines() or [""])[-1]
        code = self._child.returncode
        if code == -signal.SIGKILL:  # what the out-of-memory killer sends
            return ("was killed by signal 9 (out of memory, or killed): free memory, then "
                    "start ktop again")
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        how = f"{how}: {last}" if last else how
        return f"{how}; start ktop again"

    @property
    def pid(self) -> int:
        return self._child.pid

    def alive(self) -> bool:
        return self._child.poll() is None

    def kill(self) -> None:
        """Stop a compile in progress (ktop is quitting); its load() raises CompileFailed."""
        self._child.kill()

    def close(self) -> None:
        with _registry_lock:
            _running.discard(self)
        self._socket.close()  # the child sees the end of its requests and exits
        try:
            self._child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        self._errors.close()

    def __enter__(self) -> Compiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_registry_lock = threading.Lock()
_running: set[Compiler] = set()
_shared: CompilerPool | None = None
started = 0  # compiler processes started by this process, ever (tests count them)


class CompilerPool:
    """Compiler processes shared by the programs loaded meanwhile, started when a program
    needs one (none at all when every program comes from the cache), up to `size` at once:
    as many compiles run side by side as the machine has CPUs to spare."""

    def __init__(self, nice: int = 0, size: int = 1) -> None:
        self.nice = nice
        self.size = max(1, size)
        self._idle: list[Compiler] = []
        self._all: list[Compiler] = []
        self._changed = threading.Condition()
        self._closed = False

    def load(self, *args: Any, on_wait: Callable[[bool], None] | None = None,
             **kwargs: Any) -> LoadedProgram:
        compiler = self._take(on_wait)
        try:
            return compiler.load(*args, **kwargs)
        finally:
            self._give(compiler)

    def _take(self, on_wait: Callable[[bool], None] | None) -> Compiler:
        global started
        with self._changed:
            told = False
            while not self._idle and len(self._all) >= self.size and not self._closed:
                if on_wait is not None and not told:
                    on_wait(True)
                    told = True
                self._changed.wait()
            if told and on_wait is not None:
                on_wait(False)
            if self._closed:
                raise CompileFailed("ktop is quitting")
            if self._idle:
                return self._idle.pop()
            compiler = Compiler(self.nice)
            started += 1
            self._all.append(compiler)
        with _registry_lock:
            told, _on_shared_start[:] = list(_on_shared_start), []
        for callback in told:  # before it is asked to compile
            callback(compiler.pid)
        return compiler

    def _give(self, compiler: Compiler) -> None:
        with self._changed:
            if compiler.alive() and not self._closed:
                self._idle.append(compiler)
            else:  # killed (out of memory?): the next program starts another
                self._all.remove(compiler)
                compiler.close()
            self._changed.notify()

    def hurry(self) -> None:
        self.nice = 0

    def pids(self) -> list[int]:
        with self._changed:
            return [c.pid for c in self._all]

    def close(self) -> None:
        with self._changed:
            self._closed = True
            compilers, self._all, self._idle = list(self._all), [], []
            self._changed.notify_all()
        for compiler in compilers:  # a busy one's load() fails: its socket is closed
            compiler.close()


def spare_cpus() -> int:
    """CPUs not running anything now (/proc/loadavg's runnable tasks, this one aside)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 1
    return max(1, cpus - max(0, running - 1))


_on_shared_exit: list[Callable[[], None]] = []  # told once the shared compilers have exited
_on_shared_start: list[Callable[[int], None]] = []  # told the first shared compiler's pid


@contextlib.contextmanager
def shared_compiler(nice: int = 0, size: int | None = None) -> Iterator[None]:
    """Programs loaded inside the block share compiler processes (niced, if asked): as
    many as spare_cpus() at most, or `size`."""
    global _shared
    pool = CompilerPool(nice, spare_cpus() if size is None else size)
    try:
        _shared = pool
        try:
            yield
        finally:
            _shared = None
            pool.close()
    finally:  # the children have been waited for: their pids may name others from now
        with _registry_lock:
            told, _on_shared_exit[:] = list(_on_shared_exit), []
            _on_shared_start.clear()
        for callback in told:
            callback()


def when_compiler_starts(callback: Callable[[int], None]) -> None:
    """callback(pid) once a shared compiler process runs: at once if one does, when the
    first starts otherwise (never if no program needs compiling)."""
    pool = _shared
    pids = pool.pids() if pool is not None else []
    if pids:
        callback(pids[0])
        return
    with _registry_lock:
        if _shared is not None:
            _on_shared_start.append(callback)


def when_compiler_exits(callback: Callable[[], None]) -> None:
    """callback() once the shared compiler processes have exited (at once if none run)."""
    with _registry_lock:
        if _shared is not None:
            _on_shared_exit.append(callback)
            return
    callback()


def compiler_pid() -> int:
    """A shared compiler process's pid (0: none runs now): ktop's own, as the CPU sampler
    sees it."""
    pool = _shared
    pids = pool.pids() if pool is not None else []
    return pids[0] if pids else 0


def load_in_child(filename: str, source_dir: str, cflags: list[str],
                  functions: dict[str, str], environment: dict[str, str],
                  describe: bool = False,
                  on_wait: Callable[[bool], None] | None = None) -> LoadedProgram:
    """Compile and load a program in a shared compiler process, or in one of its own.
    on_wait(True): every shared compiler is busy, this one waits its turn; on_wait(False):
    its turn came."""
    global started
    pool = _shared
    if pool is not None:
        return pool.load(filename, source_dir, cflags, functions, environment,
                         describe=describe, on_wait=on_wait)
    started += 1
    with Compiler() as compiler:
        return compiler.load(filename, source_dir, cflags, functions, environment,
                             describe=describe)


def hurry() -> None:
    """Every compiler process back to normal priority."""
    pool = _shared
    if pool is not None:
        pool.hurry()
    with _registry_lock:
        for compiler in _running:
            compiler.hurry()


def cancel() -> None:
    """Stop every compile in progress (ktop is quitting during start-up)."""
    with _registry_lock:
        for compiler in _running:
            compiler.kill()


def _unpack(reply: dict, fds: list[int]) -> LoadedProgram:
    if "error" in reply:
        for fd in fds:
            os.close(fd)
        raise CompileFailed(reply["error"])
    description = None
    if reply.get("description"):  # the last descriptor: a memfd holding it
        memory = fds.pop()
        try:
            description = _read_all(memory)
        finally:
            os.close(memory)
    fds = iter(fds)
    maps = {m["name"]: BpfMap(m["name"], next(fds), m["type"], m["key"], m["value"],
                              m["key_size"], m["value_size"], m["max_entries"])
            for m in reply["maps"]}
    programs = {name: next(fds) for name in reply["programs"]}
    loaded = LoadedProgram(maps, programs, list(fds))
    loaded.description, loaded.not_kept = description, reply.get("not_kept", "")
    return loaded


def _read_all(fd: int) -> bytes:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


# --- the child's side --------------------------------------------------------------------

def _bcc_tables(program: Any) -> list[dict]:
    """Every map of a compiled bcc program, described from bcc's own tables."""
    import ctypes as ct  # noqa: PLC0415

    from bcc.libbcc import lib  # noqa: PLC0415

    for name, restype in (
        ("bpf_num_tables", ct.c_size_t), ("bpf_table_name", ct.c_char_p),
        ("bpf_table_fd_id", ct.c_int), ("bpf_table_type_id", ct.c_int),
        ("bpf_table_key_desc_id", ct.c_char_p), ("bpf_table_leaf_desc_id", ct.c_char_p),
        ("bpf_table_key_size_id", ct.c_size_t), ("bpf_table_leaf_size_id", ct.c_size_t),
        ("bpf_table_max_entries_id", ct.c_ulonglong),
    ):
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = [ct.c_void_p] + ([] if name == "bpf_num_tables" else [ct.c_size_t])
    module = program.module
    return [
        {
            "name": lib.bpf_table_name(module, i).decode(),
            "fd": lib.bpf_table_fd_id(module, i),
            "type": lib.bpf_table_type_id(module, i),
            "key": json.loads(lib.bpf_table_key_desc_id(module, i) or b'"int"'),
            "value": json.loads(lib.bpf_table_leaf_desc_id(module, i) or b'"int"'),
            "key_size": lib.bpf_table_key_size_id(module, i),
            "value_size": lib.bpf_table_leaf_size_id(module, i),
            "max_entries": lib.bpf_table_max_entries_id(module, i),
        }
        for i in range(lib.bpf_num_tables(module))
    ]


_kept: list[Any] = []


def _serve(sock: socket.socket) -> None:
    """Answer requests until ktop closes its end."""
    while request := sock.recv(MAX_REPLY):
        _answer(sock, json.loads(request))


def _answer(sock: socket.socket, request: dict) -> None:
    from ktop.collectors.compiler import (  # noqa: PLC0415
        CompileError,
        NotKeepable,
        compile_program,
        describe,
    )

    os.environ.update(request["environment"])
    try:
        program = compile_program(request["filename"], request["source_dir"],
                                   request["cflags"], request["functions"])
    except CompileError as e:
        sock.sendall(json.dumps({"error": str(e)}).encode())
        return
    _kept.append(program)  # until exit: bcc's clean-up must not run under ktop's programs
    tables = _bcc_tables(program)
    functions = {name.decode(): fn.fd for name, fn in program.funcs.items()}
    links = list(program.raw_tracepoint_fds.values())
    reply: dict[str, Any] = {
        "maps": [{k: v for k, v in t.items() if k != "fd"} for t in tables],
        "programs": list(functions),
    }
    fds = [t["fd"] for t in tables] + list(functions.values()) + links
    if request.get("describe"):  # for the cache: in a file of its own, whatever its size
        try:
            description = json.dumps(describe(program, tables)).encode()
        except NotKeepable as e:
            reply["not_kept"] = str(e)
        else:
            memory = os.memfd_create("ktop-program", os.MFD_CLOEXEC)
            view = memoryview(description)
            while view:
                view = view[os.write(memory, view):]
            reply["description"] = True
            fds.append(memory)
    if len(fds) > MAX_FDS:
        reply = {"error": f"{request['filename']} has {len(fds)} maps and programs, "
                          f"more than ktop can take at once ({MAX_FDS})"}
        fds = []
    socket.send_fds(sock, [json.dumps(reply).encode()], fds)


if __name__ == "__main__":
    status = 0
    try:
        _serve(socket.socket(fileno=int(sys.argv[1])))
    except BaseException:  # noqa: BLE001 - said on stderr, which ktop reads back
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        status = 1
    # No interpreter shutdown: bcc's exit handlers would detach what was just handed over,
    # and the descriptors in flight keep every object alive until ktop takes them.
    sys.stderr.flush()
    os._exit(status)
