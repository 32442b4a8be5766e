"""Compiled BPF programs kept per kernel, so that a start loads them without clang.

Compiling a pane's program with bcc costs 0.4-2 s of clang on a quiet machine and tens of
seconds on a busy one. What the kernel needs to load it again is small: each map's
definition, each program's instructions (their map references patched with the new maps'
descriptors), its type, name and license. The compiler child describes that after a
compile (ktop.collectors.compiler.describe); ktop keeps it in /var/cache/ktop beside the
headers tree, under the same rules (root's, 0700, reached without a link, checked), and a
later start makes the maps and loads the programs itself with bpf(2): the verifier checks
every program as it did the compiled one.

An entry is named for the program and its options, then for a hash of everything the
compile depended on: the kernel (release, /proc/version, its BTF), the headers tree,
ktop's BPF sources, bcc. Each file is one header line (magic, checksum and length of the
body) and a JSON body that repeats the full key. An entry that is not root's own regular
file of mode 0600, is truncated, fails its checksum, is for other inputs, or does not load
is compiled again and replaced, never trusted; a program whose entries are all for another
kernel, source or bcc (stale) is compiled, and kept beside the newest of them. Writes go to a temporary file renamed into
place: a reader sees a whole entry or none.
"""

from __future__ import annotations

import errno
import functools
import glob
import json
import os
import platform
import stat
import time
from dataclasses import dataclass, field
from typing import Any

from ktop.collectors import headers
from ktop.collectors.bpfsys import (
    BpfMap,
    ProgramRejected,
    attach_raw_tracepoint,
    btf_load,
    map_create,
    prog_load,
)
from ktop.collectors.loader import LoadedProgram

CACHE_DIR = headers.CACHE_DIR
ENVIRONMENT_DIR = "KTOP_BPF_CACHE"  # another cache directory (tests, cold-start benchmarks)
FORMAT = 2  # of the entries: a change makes every older entry stale
MAGIC = b"ktop-bpf-program"
MAX_ENTRY = 64 << 20  # bytes; ktop's largest program describes itself in ~0.3 MiB
_WRITING = ".writing-"
STALE_WRITE_S = 60.0
KEPT = 8  # entries of one program and options, for as many kernels or checkouts
BTF_PATH = "/sys/kernel/btf/vmlinux"
_LD_IMM64, _PSEUDO_MAP_FD = 0x18, 1


class LoadFailed(Exception):
    """A described program could not be loaded; str() says why."""


@dataclass(frozen=True)
class Request:
    """One compile: bpf/<filename> with its cflags, the functions to load, bcc's environment."""

    filename: str
    source_dir: str
    cflags: tuple[str, ...]
    functions: dict[str, str] = field(hash=False)
    environment: dict[str, str] = field(hash=False)

    def options(self) -> str:
        return _digest(repr((self.filename, self.cflags, sorted(self.functions.items()),
                             sorted(self.environment.items()))).encode())[:16]

    def prefix(self) -> str:
        """Every entry of this program and options starts so, whatever it was built for."""
        stem = self.filename.split(".", 1)[0]
        return f"prog-{stem}-{self.options()}-"


def _digest(data: bytes) -> str:
    import hashlib  # noqa: PLC0415  (imported late: see ktop.cli.without_openssl)

    return hashlib.blake2b(data, digest_size=32).hexdigest()


def _file_digest(path: str) -> str:
    import hashlib  # noqa: PLC0415

    hashed = hashlib.blake2b(digest_size=32)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                hashed.update(chunk)
    except OSError as e:
        return f"unreadable: {e.errno}"
    return hashed.hexdigest()


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"unreadable: {e.errno}"


def _stat(path: str) -> tuple[Any, ...] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), info.st_size, info.st_mtime_ns, info.st_ino)


@functools.cache
def kernel_identity() -> tuple[str, ...]:
    """The running kernel's release, build line and BTF: a rebuilt kernel of the same release
    has other struct layouts, tracepoints and helpers."""
    return (platform.release(), _read("/proc/version").strip(), _file_digest(BTF_PATH))


def headers_identity(source: str | None) -> tuple[Any, ...]:
    """The headers tree bcc compiles against (the merged tree's name holds a hash of its
    links; its files are the packages', named by their stat)."""
    tree = source or os.path.join("/lib/modules", platform.release(), "build")
    files = (".config", "Makefile", "include/generated/autoconf.h",
             "include/generated/uapi/linux/version.h", "include/linux/kconfig.h")
    return (tree, *(_stat(os.path.join(tree, name)) for name in files))


def sources_identity(source_dir: str) -> tuple[tuple[str, str], ...]:
    """Every BPF source and header beside the program: any may be included."""
    try:
        names = sorted(os.listdir(source_dir))
    except OSError as e:
        return ((source_dir, f"unreadable: {e.errno}"),)
    return tuple((name, _file_digest(os.path.join(source_dir, name))) for name in names
                 if name.endswith((".c", ".h")))


@functools.cache
def bcc_identity() -> tuple[Any, ...]:
    """bcc's version and its library (clang and LLVM come with it), found without
    importing bcc: ktop's own process never maps them."""
    import importlib.util  # noqa: PLC0415

    try:
        spec = importlib.util.find_spec("bcc")
    except (ImportError, ValueError):
        spec = None
    version = (_read(os.path.join(os.path.dirname(spec.origin), "version.py"))
               if spec and spec.origin else "no bcc")
    libraries = sorted(set(glob.glob("/usr/lib/*/libbcc.so.0") + glob.glob("/usr/lib*/libbcc.so.0")
                           + glob.glob("/usr/local/lib*/libbcc.so.0")))
    return (version, *(_stat(path) for path in libraries))


def entry_key(request: Request, headers_source: str | None) -> str:
    """The hash of everything the compiled program depends on."""
    return _digest(repr((
        FORMAT, request.options(), kernel_identity(), headers_identity(headers_source),
        sources_identity(request.source_dir), bcc_identity(),
    )).encode())


def entry_name(request: Request, key: str) -> str:
    return f"{request.prefix()}{key[:32]}"


# ---- the entries' file format ------------------------------------------------------------

def encode(key: str, description: dict[str, Any]) -> bytes:
    body = json.dumps({"format": FORMAT, "key": key, **description},
                      separators=(",", ":")).encode()
    return b"%s %s %d\n" % (MAGIC, _digest(body).encode(), len(body)) + body


def decode(data: bytes, key: str) -> dict[str, Any]:
    """The description in an entry's bytes; ValueError naming what is wrong with it."""
    line, newline, body = data.partition(b"\n")
    parts = line.split(b" ")
    if not newline or len(parts) != 3 or parts[0] != MAGIC or not parts[2].isdigit():
        raise ValueError("not a ktop program entry")
    if len(body) != int(parts[2]):
        raise ValueError(f"truncated ({len(body)} of {int(parts[2])} bytes)")
    if _digest(body).encode() != parts[1]:
        raise ValueError("its checksum does not match")
    try:
        description = json.loads(body)
    except ValueError:
        raise ValueError("its body is not JSON") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise ValueError("of another format")
    if description.get("key") != key:
        raise ValueError("made for other inputs than its name says")
    _check(description)
    return description


def _check(description: dict[str, Any]) -> None:
    """Shapes a load relies on (the kernel checks the rest)."""
    def want(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f"malformed: {what}")

    maps, programs = description.get("maps"), description.get("programs")
    want(isinstance(maps, list) and isinstance(programs, list) and bool(programs), "lists")
    want(isinstance(description.get("license"), str), "license")
    want(isinstance(description.get("kern_version"), int), "kern_version")
    want(isinstance(description.get("btf"), str), "btf")
    try:
        bytes.fromhex(description["btf"])
    except ValueError:
        raise ValueError("malformed: btf") from None
    names = set()
    for m in maps:  # type: ignore[union-attr]
        want(isinstance(m, dict) and isinstance(m.get("name"), str)
             and isinstance(m.get("kernel_name"), str), "map name")
        want(all(isinstance(m.get(k), int) and 0 <= m[k] < 1 << 32
                 for k in ("type", "key_size", "value_size", "max_entries", "flags", "btf_key",
                           "btf_value")), "map")
        names.add(m["name"])
    for p in programs:  # type: ignore[union-attr]
        want(isinstance(p, dict) and all(isinstance(p.get(k), str) for k in
                                         ("name", "kernel_name", "insns", "raw_tracepoint")),
             "program")
        want(isinstance(p.get("type"), int) and isinstance(p.get("maps"), list), "program")
        try:
            insns = bytes.fromhex(p["insns"])
        except ValueError:
            raise ValueError("malformed: instructions") from None
        want(bool(insns) and len(insns) % 8 == 0, "instructions")
        for reference in p["maps"]:
            want(isinstance(reference, list) and len(reference) == 2
                 and isinstance(reference[0], int) and reference[1] in names, "map reference")
            at = reference[0] * 8
            want(0 <= at < len(insns) - 8 and insns[at] == _LD_IMM64, "map reference")


# ---- the cache directory -----------------------------------------------------------------

class ProgramCache:
    """The directory of entries, private to root; every access relative to its descriptor."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd = fd

    @classmethod
    def open(cls, directory: str | None = None) -> ProgramCache | None:
        """None where there is no private cache directory (not root, or it is not root's
        alone): then every start compiles, as before the cache."""
        directory = directory or os.environ.get(ENVIRONMENT_DIR) or CACHE_DIR
        if headers._cache(directory) is None:
            return None
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        info = os.fstat(fd)
        if info.st_uid != 0 or info.st_mode & 0o077:  # swapped since it was checked
            os.close(fd)
            return None
        return cls(directory, fd)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ProgramCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lookup(self, request: Request, key: str) -> tuple[dict[str, Any] | None, str]:
        """(the description, "") for a sound entry; (None, why the entry there is not used)
        otherwise, "" when there is simply none."""
        name = entry_name(request, key)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self._fd)
        except FileNotFoundError:
            stale = [n for n in self._names() if n.startswith(request.prefix())]
            return None, ("stale: made for another kernel, headers, BPF source or bcc"
                          if stale else "")
        except OSError as e:
            if e.errno == errno.ELOOP:
                return None, "foreign: a symlink"
            return None, f"unreadable: {e.strerror}"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, "foreign: not a regular file"
            if info.st_uid != 0:
                return None, f"foreign: owned by uid {info.st_uid}"
            if info.st_mode & 0o077:
                return None, f"foreign: mode {stat.S_IMODE(info.st_mode):04o}, not 0600"
            if info.st_nlink != 1:
                return None, "foreign: linked elsewhere too"
            if info.st_size > MAX_ENTRY:
                return None, f"corrupt: {info.st_size} bytes"
            data = _read_fd(fd, info.st_size + 1)
        except OSError as e:
            return None, f"unreadable: {e.strerror}"
        finally:
            os.close(fd)
        try:
            return decode(data, key), ""
        except ValueError as e:
            return None, f"corrupt: {e}"

    def store(self, request: Request, key: str, description: dict[str, Any]) -> bool:
        """Write the entry whole, then rename it into place; the oldest entries of the
        same program and options go, past KEPT. False if it could not be written (ktop goes on)."""
        name = entry_name(request, key)
        self._remove_stale_writes()
        temporary = f"{_WRITING}{os.getpid()}-{time.monotonic_ns()}"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=self._fd)
        except OSError:
            return False
        try:
            try:
                view = memoryview(encode(key, description))
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, 0o600)  # whatever the umask
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unlink_entry(name)  # whatever is there: rename() cannot replace a directory
            os.rename(temporary, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except OSError:
            self._unlink_entry(temporary)
            return False
        self._keep_newest(request.prefix())
        return True

    def _keep_newest(self, prefix: str) -> None:
        """Of one program and options, the newest KEPT entries: a kernel booted back, or two
        checkouts of ktop, each find theirs (one entry each would replace the other's)."""
        dated = []
        for other in self._names():
            if other.startswith(prefix):
                try:
                    dated.append((os.stat(other, dir_fd=self._fd,
                                          follow_symlinks=False).st_mtime_ns, other))
                except OSError:
                    continue
        for _, other in sorted(dated, reverse=True)[KEPT:]:
            self._unlink_entry(other)

    def _names(self) -> list[str]:
        try:
            return os.listdir(self._fd)
        except OSError:
            return []

    def _unlink_entry(self, name: str) -> None:
        """Remove what is at name: a file, a link, or a directory planted there."""
        try:
            info = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except OSError:
            return
        try:
            if stat.S_ISDIR(info.st_mode):
                import shutil  # noqa: PLC0415

                shutil.rmtree(name, dir_fd=self._fd)  # never follows links inside
            else:
                os.unlink(name, dir_fd=self._fd)
        except OSError:
            pass

    def _remove_stale_writes(self) -> None:
        """Temporary files of a ktop killed while writing."""
        now = time.time()
        for name in self._names():
            if not name.startswith(_WRITING):
                continue
            try:
                info = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
            except OSError:
                continue
            if now - info.st_mtime >= STALE_WRITE_S:
                self._unlink_entry(name)


def _read_fd(fd: int, limit: int) -> bytes:
    chunks = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


# ---- loading a described program -----------------------------------------------------------

def load(description: dict[str, Any]) -> LoadedProgram:
    """Make the maps, load the programs (the verifier checks each) and attach those bcc
    attaches itself (raw_tracepoint__*), as a compile in the child would have."""
    loaded = LoadedProgram({}, {})
    btf = -1
    try:
        if description["btf"]:
            btf = btf_load(bytes.fromhex(description["btf"]))
        descriptors = {}
        for m in description["maps"]:
            typed = (btf, m["btf_key"], m["btf_value"]) if btf >= 0 and m["btf_value"] else (
                0, 0, 0)
            fd = map_create(m["type"], m["key_size"], m["value_size"], m["max_entries"],
                            m["flags"], m["kernel_name"], typed)
            descriptors[m["name"]] = fd
            try:
                loaded.maps[m["name"]] = BpfMap(m["name"], fd, m["type"], m["key"], m["value"],
                                                m["key_size"], m["value_size"],
                                                m["max_entries"])
            except ValueError as e:
                os.close(fd)
                raise LoadFailed(str(e)) from None
        for p in description["programs"]:
            code = bytearray.fromhex(p["insns"])
            for index, map_name in p["maps"]:
                at = index * 8
                code[at + 1] = (code[at + 1] & 0x0F) | (_PSEUDO_MAP_FD << 4)
                code[at + 4:at + 8] = descriptors[map_name].to_bytes(4, "little")
            loaded.programs[p["name"]] = prog_load(
                p["type"], bytes(code), description["license"], p["kernel_name"],
                description["kern_version"])
        for p in description["programs"]:
            if p["raw_tracepoint"]:
                loaded.links.append(attach_raw_tracepoint(loaded.programs[p["name"]],
                                                          p["raw_tracepoint"]))
    except ProgramRejected as e:
        loaded.close()
        verdict = next((line for line in reversed(e.log.splitlines())
                        if line.strip() and not line.startswith("processed")), "")
        raise LoadFailed(f"the kernel rejected it: {(verdict or e.strerror or '').strip()[:160]}"
                         ) from None
    except OSError as e:
        loaded.close()
        raise LoadFailed(e.strerror or str(e)) from None
    except BaseException:
        loaded.close()
        raise
    finally:
        if btf >= 0:  # the maps hold it as long as they need it
            os.close(btf)
    return loaded
