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
             functions: dict[str, str], environment: dict[str, str]) -> LoadedProgram:
        """Compile source_dir/filename and load `functions` ({name: "PERF_EVENT"|...}), with
        `environment` set for bcc; CompileFailed with the reason if it cannot."""
        request = {"filename": filename, "source_dir": source_dir, "cflags": cflags,
                   "functions": functions, "environment": environment}
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
_shared: Compiler | None = None


_on_shared_exit: list[Callable[[], None]] = []  # told once the shared compiler has exited


@contextlib.contextmanager
def shared_compiler(nice: int = 0) -> Iterator[None]:
    """Programs loaded inside the block share one compiler process (niced, if asked)."""
    global _shared
    try:
        with Compiler(nice) as compiler:
            _shared = compiler
            try:
                yield
            finally:
                _shared = None
    finally:  # the child has been waited for: its pid may name another process from now
        with _registry_lock:
            told, _on_shared_exit[:] = list(_on_shared_exit), []
        for callback in told:
            callback()


def when_compiler_exits(callback: Callable[[], None]) -> None:
    """callback() once the shared compiler process has exited (at once if none runs)."""
    with _registry_lock:
        if _shared is not None:
            _on_shared_exit.append(callback)
            return
    callback()


def compiler_pid() -> int:
    """The shared compiler process's pid (0: none): ktop's own, as the CPU sampler sees it."""
    compiler = _shared
    return compiler.pid if compiler is not None else 0


def load_in_child(filename: str, source_dir: str, cflags: list[str],
                  functions: dict[str, str], environment: dict[str, str]) -> LoadedProgram:
    """Compile and load a program in the shared compiler process, or in one of its own."""
    if _shared is not None:
        return _shared.load(filename, source_dir, cflags, functions, environment)
    with Compiler() as compiler:
        return compiler.load(filename, source_dir, cflags, functions, environment)


def hurry() -> None:
    """Every compiler process back to normal priority."""
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
    fds = iter(fds)
    maps = {m["name"]: BpfMap(m["name"], next(fds), m["type"], m["key"], m["value"],
                              m["key_size"], m["value_size"], m["max_entries"])
            for m in reply["maps"]}
    programs = {name: next(fds) for name in reply["programs"]}
    return LoadedProgram(maps, programs, list(fds))


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
    from ktop.collectors.compiler import CompileError, compile_program  # noqa: PLC0415

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
    reply = {
        "maps": [{k: v for k, v in t.items() if k != "fd"} for t in tables],
        "programs": list(functions),
    }
    fds = [t["fd"] for t in tables] + list(functions.values()) + links
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
