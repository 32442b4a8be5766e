"""The bpf(2) and perf_event_open(2) calls ktop makes once its programs are loaded: map
access, attaching, a ring buffer reader and program statistics.

Compiling needs bcc, clang and LLVM; that happens in a short-lived child process
(ktop.collectors.loader), which hands back descriptors. This module is all the ktop process
itself needs, so it never maps those libraries (30 MiB of memory it would keep otherwise).
"""

from __future__ import annotations

import ctypes as ct
import errno
import functools
import mmap
import os
import platform
import struct
from array import array
from collections.abc import Callable, Iterator
from typing import Any

_libc = ct.CDLL(None, use_errno=True)
_libc.syscall.restype = ct.c_long
_libc.ioctl.argtypes = [ct.c_int, ct.c_ulong, ct.c_ulong]

# (bpf, perf_event_open) system call numbers.
_SYSCALLS = {
    "x86_64": (321, 298),
    "aarch64": (280, 241),
    "riscv64": (280, 241),
    "ppc64le": (361, 319),
    "s390x": (351, 331),
}
_BPF_NR, _PERF_EVENT_OPEN_NR = _SYSCALLS.get(platform.machine(), (None, None))

# enum bpf_cmd (include/uapi/linux/bpf.h)
MAP_CREATE = 0
MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM, MAP_DELETE_ELEM, MAP_GET_NEXT_KEY = 1, 2, 3, 4
PROG_LOAD = 5
BTF_LOAD, BTF_GET_FD_BY_ID = 18, 19
PROG_TEST_RUN = 10
OBJ_GET_INFO_BY_FD = 15
RAW_TRACEPOINT_OPEN = 17
MAP_LOOKUP_BATCH, MAP_LOOKUP_AND_DELETE_BATCH = 24, 25
ENABLE_STATS = 32

# enum bpf_map_type, the ones ktop's programs declare
MAP_TYPE_PERCPU_HASH, MAP_TYPE_PERCPU_ARRAY, MAP_TYPE_LRU_PERCPU_HASH = 5, 6, 10
MAP_TYPE_RINGBUF = 27
_PER_CPU_TYPES = {MAP_TYPE_PERCPU_HASH, MAP_TYPE_PERCPU_ARRAY, MAP_TYPE_LRU_PERCPU_HASH}
# A kernel without the batch commands (before 5.6), or a map type without them.
_NO_BATCH = (errno.EINVAL, errno.ENOTSUP, errno.ENOSYS, 524)  # 524: ENOTSUPP


def bpf(cmd: int, attr: ct.Structure) -> int:
    """The raw system call; OSError with the kernel's errno on failure."""
    if _BPF_NR is None:
        raise OSError(errno.ENOSYS, f"bpf() is not known on {platform.machine()}")
    result = _libc.syscall(_BPF_NR, cmd, ct.byref(attr), ct.sizeof(attr))
    if result < 0:
        code = ct.get_errno()
        raise OSError(code, os.strerror(code))
    return result


class _ElemAttr(ct.Structure):
    _fields_ = [
        ("map_fd", ct.c_uint32), ("pad", ct.c_uint32), ("key", ct.c_uint64),
        ("value", ct.c_uint64), ("flags", ct.c_uint64),
    ]


class _BatchAttr(ct.Structure):
    _fields_ = [
        ("in_batch", ct.c_uint64), ("out_batch", ct.c_uint64), ("keys", ct.c_uint64),
        ("values", ct.c_uint64), ("count", ct.c_uint32), ("map_fd", ct.c_uint32),
        ("elem_flags", ct.c_uint64), ("flags", ct.c_uint64),
    ]


class _TestRunAttr(ct.Structure):
    _fields_ = [
        ("prog_fd", ct.c_uint32), ("retval", ct.c_uint32), ("data_size_in", ct.c_uint32),
        ("data_size_out", ct.c_uint32), ("data_in", ct.c_uint64), ("data_out", ct.c_uint64),
        ("repeat", ct.c_uint32), ("duration", ct.c_uint32), ("ctx_size_in", ct.c_uint32),
        ("ctx_size_out", ct.c_uint32), ("ctx_in", ct.c_uint64), ("ctx_out", ct.c_uint64),
        ("flags", ct.c_uint32), ("cpu", ct.c_uint32), ("batch_size", ct.c_uint32),
        ("pad", ct.c_uint32),
    ]


class _RawTracepointAttr(ct.Structure):
    _fields_ = [("name", ct.c_uint64), ("prog_fd", ct.c_uint32), ("pad", ct.c_uint32),
                ("cookie", ct.c_uint64)]


def run_raw_tracepoint_program(prog_fd: int, args: ct.Array) -> int:
    """Run a raw tracepoint program once, here, on `args` as its arguments (Linux 5.10+):
    what it returned."""
    attr = _TestRunAttr(prog_fd=prog_fd, ctx_size_in=ct.sizeof(args), ctx_in=ct.addressof(args))
    bpf(PROG_TEST_RUN, attr)
    return attr.retval


def attach_raw_tracepoint(prog_fd: int, name: str) -> int:
    """A link running the program at raw tracepoint `name` ("sched_switch") on every CPU."""
    encoded = ct.create_string_buffer(name.encode())
    return bpf(RAW_TRACEPOINT_OPEN,
               _RawTracepointAttr(name=ct.addressof(encoded), prog_fd=prog_fd))


class _InfoAttr(ct.Structure):
    _fields_ = [("bpf_fd", ct.c_uint32), ("info_len", ct.c_uint32), ("info", ct.c_uint64)]


def enable_stats() -> int | None:
    """A descriptor that keeps BPF run-time statistics on while it is open, or None."""
    attr = (ct.c_uint32 * 2)(0, 0)  # BPF_STATS_RUN_TIME
    try:
        return bpf(ENABLE_STATS, attr)
    except OSError:
        return None


class _MapCreateAttr(ct.Structure):
    """union bpf_attr for BPF_MAP_CREATE, up to map_ifindex (Linux 4.15+)."""

    _fields_ = [
        ("map_type", ct.c_uint32), ("key_size", ct.c_uint32), ("value_size", ct.c_uint32),
        ("max_entries", ct.c_uint32), ("map_flags", ct.c_uint32), ("inner_map_fd", ct.c_uint32),
        ("numa_node", ct.c_uint32), ("map_name", ct.c_char * 16), ("map_ifindex", ct.c_uint32),
        ("btf_fd", ct.c_uint32), ("btf_key_type_id", ct.c_uint32),
        ("btf_value_type_id", ct.c_uint32),
    ]


class _ProgLoadAttr(ct.Structure):
    """union bpf_attr for BPF_PROG_LOAD, up to expected_attach_type (Linux 4.17+)."""

    _fields_ = [
        ("prog_type", ct.c_uint32), ("insn_cnt", ct.c_uint32), ("insns", ct.c_uint64),
        ("license", ct.c_uint64), ("log_level", ct.c_uint32), ("log_size", ct.c_uint32),
        ("log_buf", ct.c_uint64), ("kern_version", ct.c_uint32), ("prog_flags", ct.c_uint32),
        ("prog_name", ct.c_char * 16), ("prog_ifindex", ct.c_uint32),
        ("expected_attach_type", ct.c_uint32),
    ]


class _MapInfo(ct.Structure):
    """struct bpf_map_info (include/uapi/linux/bpf.h), up to its BTF type ids (5.0+)."""

    _fields_ = [
        ("type", ct.c_uint32), ("id", ct.c_uint32), ("key_size", ct.c_uint32),
        ("value_size", ct.c_uint32), ("max_entries", ct.c_uint32), ("map_flags", ct.c_uint32),
        ("name", ct.c_char * 16), ("ifindex", ct.c_uint32),
        ("btf_vmlinux_value_type_id", ct.c_uint32), ("netns_dev", ct.c_uint64),
        ("netns_ino", ct.c_uint64), ("btf_id", ct.c_uint32), ("btf_key_type_id", ct.c_uint32),
        ("btf_value_type_id", ct.c_uint32),
    ]


class _BtfInfo(ct.Structure):
    _fields_ = [("btf", ct.c_uint64), ("btf_size", ct.c_uint32), ("id", ct.c_uint32)]


class _BtfLoadAttr(ct.Structure):
    _fields_ = [("btf", ct.c_uint64), ("btf_log_buf", ct.c_uint64), ("btf_size", ct.c_uint32),
                ("btf_log_size", ct.c_uint32), ("btf_log_level", ct.c_uint32)]


def btf_blob(btf_id: int) -> bytes:
    """The BTF object `btf_id` (a program's types, as its maps name them), as loaded."""
    fd = bpf(BTF_GET_FD_BY_ID, (ct.c_uint32 * 4)(btf_id, 0, 0, 0))
    try:
        info = _BtfInfo()
        attr = _InfoAttr(bpf_fd=fd, info_len=ct.sizeof(info), info=ct.addressof(info))
        bpf(OBJ_GET_INFO_BY_FD, attr)  # its size first
        blob = ct.create_string_buffer(info.btf_size)
        info.btf, info.btf_size = ct.addressof(blob), info.btf_size
        bpf(OBJ_GET_INFO_BY_FD, attr)
        return blob.raw[:info.btf_size]
    finally:
        os.close(fd)


def btf_load(blob: bytes) -> int:
    """A BTF object's descriptor, for maps whose keys and values it types."""
    data = ct.create_string_buffer(blob, len(blob))
    return bpf(BTF_LOAD, _BtfLoadAttr(btf=ct.addressof(data), btf_size=len(blob)))


def map_create(map_type: int, key_size: int, value_size: int, max_entries: int,
               flags: int = 0, name: str = "", btf: tuple[int, int, int] = (0, 0, 0)) -> int:
    """A new map's descriptor (close-on-exec, as every bpf() descriptor); btf: (BTF
    descriptor, key type id, value type id), for maps the kernel wants typed (task storage,
    spin locks), or zeros."""
    attr = _MapCreateAttr(map_type=map_type, key_size=key_size, value_size=value_size,
                          max_entries=max_entries, map_flags=flags,
                          map_name=name.encode()[:15], btf_fd=btf[0], btf_key_type_id=btf[1],
                          btf_value_type_id=btf[2])
    return bpf(MAP_CREATE, attr)


def map_info(map_fd: int) -> _MapInfo:
    """The kernel's description of a map: type, sizes, flags, name."""
    info = _MapInfo()
    attr = _InfoAttr(bpf_fd=map_fd, info_len=ct.sizeof(info), info=ct.addressof(info))
    bpf(OBJ_GET_INFO_BY_FD, attr)
    return info


class ProgramRejected(OSError):
    """BPF_PROG_LOAD failed; .log is the verifier's log (may be empty)."""

    def __init__(self, code: int, log: str) -> None:
        super().__init__(code, os.strerror(code))
        self.log = log


PROG_LOG_SIZE = 1 << 20


def prog_load(prog_type: int, insns: bytes, license: str = "GPL", name: str = "",
              kern_version: int = 0) -> int:
    """A program's descriptor once the verifier accepts `insns` (raw struct bpf_insn
    bytes); ProgramRejected with the verifier's log if it does not."""
    code = ct.create_string_buffer(insns, len(insns))
    licence = ct.create_string_buffer(license.encode())
    attr = _ProgLoadAttr(prog_type=prog_type, insn_cnt=len(insns) // 8,
                         insns=ct.addressof(code), license=ct.addressof(licence),
                         kern_version=kern_version, prog_name=name.encode()[:15])
    try:
        return bpf(PROG_LOAD, attr)
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES) and os.geteuid() != 0:
            raise ProgramRejected(e.errno, "") from None
    # Again with the log on (it slows the verifier down: only when it already refused).
    log = ct.create_string_buffer(PROG_LOG_SIZE)
    attr.log_level, attr.log_size, attr.log_buf = 1, PROG_LOG_SIZE, ct.addressof(log)
    try:
        return bpf(PROG_LOAD, attr)  # accepted the second time: a transient failure
    except OSError as e:
        raise ProgramRejected(e.errno, log.value.decode(errors="replace")) from None


# The C type names bcc describes map keys and values with.
_C_TYPES = {
    "char": ct.c_char, "signed char": ct.c_byte, "unsigned char": ct.c_ubyte,
    "short": ct.c_short, "unsigned short": ct.c_ushort,
    "int": ct.c_int, "unsigned int": ct.c_uint,
    "long": ct.c_long, "unsigned long": ct.c_ulong,
    "long long": ct.c_longlong, "unsigned long long": ct.c_ulonglong,
    "_Bool": ct.c_bool, "__int128": ct.c_ubyte * 16, "unsigned __int128": ct.c_ubyte * 16,
}


def ctype_of(desc: Any) -> type:
    """A ctypes type from bcc's JSON description of a map's key or value: a C type name,
    or [name, [[field, type] | [field, type, [n]] | [field, type, bits] ...], "struct"|...]."""
    if isinstance(desc, str):
        try:
            return _C_TYPES[desc]
        except KeyError:
            raise ValueError(f"unknown C type {desc!r}") from None
    name, members, *kind = desc
    kind = kind[0] if kind else "struct"
    fields: list[tuple] = []
    anonymous = []
    for member in members:
        field, ctype, *extra = member
        if extra and isinstance(extra[0], list):  # an array
            fields.append((field, ctype_of(ctype) * extra[0][0]))
        elif extra and isinstance(extra[0], int):  # a bit field
            fields.append((field, ctype_of(ctype), extra[0]))
        elif extra and extra[0] in ("struct", "struct_packed", "union"):  # declared inline
            if not field:
                field = f"__anon{len(anonymous)}"
                anonymous.append(field)
            fields.append((field, ctype_of(member)))
        elif not extra:
            fields.append((field, ctype_of(ctype)))
        else:
            raise ValueError(f"cannot read the type description {member!r}")
    base = ct.Union if kind == "union" else ct.Structure
    namespace: dict[str, Any] = {"_fields_": fields, "_anonymous_": anonymous}
    if kind == "struct_packed":
        namespace["_pack_"] = 1
    return type(str(name), (base,), namespace)


class RowLayout:
    """A map's key or value type read as flat tuples with one struct call for a whole drain,
    not a ctypes object and an attribute lookup per field (the waits pane drains a row per
    blocked stack: ~15 us each that way). index[field] is a field's place in a row: an int,
    or a slice for an array of numbers; a char array is one bytes item, NULs kept."""

    _CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}

    def __init__(self, ctype: type) -> None:
        self.index: dict[str, int | slice] = {}
        self._offsets: dict[str, tuple[int, int]] = {}  # field: (offset, size)
        codes: list[str] = []
        self._flatten(ctype, 0, "", codes, [0, 0])
        self._struct = struct.Struct("=" + "".join(codes))
        if self._struct.size != ct.sizeof(ctype):
            raise ValueError(f"{ctype.__name__}: read as {self._struct.size} bytes, "
                             f"it is {ct.sizeof(ctype)}")

    def _flatten(self, ctype: type, base: int, prefix: str, codes: list[str],
                 at: list[int]) -> None:
        """Struct codes for ctype's fields from byte `base`; at: [bytes, items] so far."""
        for name, ftype, *bits in ctype._fields_:  # type: ignore[attr-defined]
            if bits:
                raise ValueError(f"{ctype.__name__}.{name}: a bit field")
            offset = base + getattr(ctype, name).offset
            if offset > at[0]:
                codes.append(f"{offset - at[0]}x")
                at[0] = offset
            size = ct.sizeof(ftype)
            self._offsets[prefix + name] = (offset, size)
            element = getattr(ftype, "_type_", None)
            if isinstance(ftype, type) and issubclass(ftype, (ct.Structure, ct.Union)):
                if issubclass(ftype, ct.Union):
                    raise ValueError(f"{ctype.__name__}.{name}: a union")
                self._flatten(ftype, offset, f"{prefix}{name}.", codes, at)
            elif issubclass(ftype, ct.Array) and element is ct.c_char:
                codes.append(f"{size}s")
                self.index[prefix + name] = at[1]
                at[1] += 1
            elif issubclass(ftype, ct.Array) and isinstance(element, type) \
                    and issubclass(element, ct._SimpleCData):
                n = ftype._length_  # type: ignore[attr-defined]
                codes.append(f"{n}{self._code(element)}")
                self.index[prefix + name] = slice(at[1], at[1] + n)
                at[1] += n
            elif issubclass(ftype, ct._SimpleCData):
                codes.append(self._code(ftype))
                self.index[prefix + name] = at[1]
                at[1] += 1
            else:
                raise ValueError(f"{ctype.__name__}.{name}: cannot read {ftype!r} as a row")
            at[0] = offset + size
        end = base + ct.sizeof(ctype)
        if base == 0 and end > at[0]:  # the struct's own tail padding
            codes.append(f"{end - at[0]}x")
            at[0] = end

    def _code(self, ctype: type) -> str:
        if ctype is ct.c_char:
            return "c"
        code = self._CODES[ct.sizeof(ctype)]
        signed = ctype(-1).value == -1  # type: ignore[call-arg]
        return code.lower() if signed else code

    def rows(self, data: bytes | bytearray) -> Iterator[tuple]:
        """Every row packed back to back in data, in order."""
        return self._struct.iter_unpack(data)

    @property
    def size(self) -> int:
        return self._struct.size

    def offset_of(self, field: str) -> int:
        """Where a field's bytes start in a row."""
        return self._offsets[field][0]

    def field_size(self, field: str) -> int:
        return self._offsets[field][1]


@functools.cache
def row_layout(ctype: type) -> RowLayout:
    """A map's key or value type's layout, made once per type."""
    return RowLayout(ctype)


@functools.lru_cache(maxsize=4096)  # the same few commands in most of a drain's rows
def task_name(raw: bytes) -> str:
    """A task's name as the kernel keeps it (a char array's bytes): up to its first NUL."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """Per-CPU maps hold a value for every possible CPU, not only the online ones."""
    return len(_cpu_list(path))


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    return _cpu_list(path)


def _cpu_list(path: str) -> list[int]:
    with open(path) as f:
        text = f.read().strip()
    cpus = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


class BpfMap:
    """One map of a loaded program, read and written by descriptor."""

    def __init__(
        self, name: str, fd: int, map_type: int, key_desc: Any, value_desc: Any,
        key_size: int, value_size: int, max_entries: int,
    ) -> None:
        self.name = name
        self.fd = fd
        self.map_type = map_type
        self.max_entries = max_entries
        self.key_size, self.value_size = key_size, value_size
        if map_type == MAP_TYPE_RINGBUF:  # no keys or values: read with RingBuffer
            self.Key = self.Leaf = None
            return
        self.Key, self.Leaf = ctype_of(key_desc), ctype_of(value_desc)
        for what, ctype, size in (("key", self.Key, key_size), ("value", self.Leaf, value_size)):
            if ct.sizeof(ctype) != size:
                raise ValueError(
                    f"map {name}: the {what} type is {ct.sizeof(ctype)} bytes, the map's {size}"
                )
        # A per-CPU value is one slot per possible CPU, each rounded up to 8 bytes.
        self.cpus = possible_cpus() if map_type in _PER_CPU_TYPES else 0
        self._slot = (value_size + 7) // 8 * 8
        self._scalar = issubclass(self.Leaf, ct._SimpleCData)
        self._value_bytes = self._slot * self.cpus if self.cpus else value_size
        # One request block and value buffer, reused: stacks are read thousands of times a
        # second at high sampling rates. A map is only used from one thread at a time.
        self._attr = _ElemAttr(map_fd=fd)
        self._last_batch = 0
        self._value = ct.create_string_buffer(self._value_bytes)

    def _key(self, key: Any) -> Any:
        return self.Key(key) if isinstance(key, int) else key

    def lookup_bytes(self, key: Any) -> bytes:
        """The raw value; KeyError when the key is not there."""
        key = self._key(key)
        attr = self._attr
        attr.key, attr.value, attr.flags = ct.addressof(key), ct.addressof(self._value), 0
        try:
            bpf(MAP_LOOKUP_ELEM, attr)
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise KeyError(key) from None
            raise
        return self._value.raw

    def __getitem__(self, key: Any) -> Any:
        return self._decode(self.lookup_bytes(key), 0)

    def _decode(self, buffer: Any, offset: int) -> Any:
        """A value as bcc gives it: a number for a scalar, a ctypes structure otherwise, and
        for a per-CPU map a list of one such value per CPU."""
        if self.cpus:
            return [self._value_at(buffer, offset + i * self._slot) for i in range(self.cpus)]
        return self._value_at(buffer, offset)

    def _value_at(self, buffer: Any, offset: int) -> Any:
        value = self.Leaf.from_buffer_copy(buffer, offset)
        return value.value if self._scalar else value

    def __setitem__(self, key: Any, value: Any) -> None:
        key = self._key(key)
        if isinstance(value, int):
            value = self.Leaf(value)
        attr = _ElemAttr(map_fd=self.fd, key=ct.addressof(key), value=ct.addressof(value))
        bpf(MAP_UPDATE_ELEM, attr)

    def __delitem__(self, key: Any) -> None:
        key = self._key(key)
        try:
            bpf(MAP_DELETE_ELEM, _ElemAttr(map_fd=self.fd, key=ct.addressof(key)))
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise KeyError(key) from None
            raise

    def keys(self) -> Iterator[Any]:
        key, following = self.Key(), self.Key()
        attr = _ElemAttr(map_fd=self.fd, key=0, value=ct.addressof(following))
        while True:
            try:
                bpf(MAP_GET_NEXT_KEY, attr)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    return
                raise
            yield self.Key.from_buffer_copy(following)
            ct.memmove(ct.addressof(key), ct.addressof(following), self.key_size)
            attr.key = ct.addressof(key)

    def items(self) -> list[tuple[Any, Any]]:
        return [self._decoded(k, v) for k, v in self._items_raw()]

    def _items_raw(self) -> list[tuple[bytes, bytes]]:
        found = []
        for key in list(self.keys()):
            try:
                found.append((bytes(key), self.lookup_bytes(key)))
            except KeyError:  # deleted meanwhile
                pass
        return found

    def _decoded(self, key: bytes, value: bytes) -> tuple[Any, Any]:
        return self.Key.from_buffer_copy(key), self._decode(value, 0)

    def clear(self) -> None:
        for key in list(self.keys()):
            try:
                del self[key]
            except KeyError:
                pass

    def drain(self) -> list[tuple[Any, Any]]:
        """Every entry, each deleted as it is read: one system call per batch (Linux 5.6+),
        key by key on older kernels."""
        return [self._decoded(k, v) for k, v in self.drain_raw()]

    def drain_raw(self) -> list[tuple[bytes, bytes]]:
        """drain(), undecoded: (key, value) as the kernel's bytes, for a caller that meets the
        same keys interval after interval and decodes each once."""
        return self._pairs(*self.drain_columns())

    def drain_columns(self) -> tuple[list[bytes], bytes]:
        """drain_raw() as two columns: the keys, and the values back to back in the same
        order; a caller whose values are plain numbers reads them all in one cast, not one
        slice and conversion each (at 4000 Hz the sampler drains ~450 counters a second)."""
        try:
            return self._batch(MAP_LOOKUP_AND_DELETE_BATCH)
        except OSError as e:
            if e.errno not in _NO_BATCH:
                raise
        found = self._items_raw()
        for key, _ in found:
            try:
                del self[self.Key.from_buffer_copy(key)]
            except KeyError:
                pass
        return [key for key, _ in found], b"".join(value for _, value in found)

    def snapshot_keys(self) -> list[bytes]:
        """Every key, as the kernel's bytes, left in place: one system call per batch."""
        try:
            return self._batch(MAP_LOOKUP_BATCH)[0]
        except OSError as e:
            if e.errno not in _NO_BATCH:
                raise
        return [bytes(key) for key in self.keys()]

    def snapshot(self) -> list[tuple[Any, Any]]:
        """Every entry, left in place."""
        try:
            raw = self._pairs(*self._batch(MAP_LOOKUP_BATCH))
        except OSError as e:
            if e.errno not in _NO_BATCH:
                raise
            raw = self._items_raw()
        return [self._decoded(k, v) for k, v in raw]

    def _pairs(self, keys: list[bytes], values: bytes) -> list[tuple[bytes, bytes]]:
        """Columns as (key, value) pairs: each key with its slice of the values."""
        size = self._value_bytes
        return [(key, values[i * size:(i + 1) * size]) for i, key in enumerate(keys)]

    def _batch(self, cmd: int) -> tuple[list[bytes], bytes]:
        # Sized by what the map held last time (the buffers are zeroed each call, and an
        # idle map's 1024 entries of 352 bytes took longer to clear than to read).
        count = min(self.max_entries, max(64, min(1024, self._last_batch)))
        # The kernel's place in the map between calls: a bucket number for hash maps.
        token_size = max(self.key_size, 8)
        in_token, out_token = bytearray(token_size), bytearray(token_size)
        keys: list[bytes] = []
        values: list[bytes] = []
        key_size, value_size = self.key_size, self._value_bytes
        first = True
        while True:
            key_buffer, value_buffer = bytearray(count * key_size), bytearray(count * value_size)
            attr = _BatchAttr(
                in_batch=0 if first else _address(in_token), out_batch=_address(out_token),
                keys=_address(key_buffer), values=_address(value_buffer), count=count,
                map_fd=self.fd,
            )
            try:
                bpf(cmd, attr)
                done = False
            except OSError as e:
                if e.errno == errno.ENOSPC and attr.count == 0:  # a bucket bigger than count
                    count *= 2
                    continue
                if e.errno != errno.ENOENT:
                    raise
                done = True  # the last batch: it may still hold entries
            got = attr.count
            key_bytes = bytes(memoryview(key_buffer)[:got * key_size])
            keys += [key_bytes[i:i + key_size] for i in range(0, got * key_size, key_size)]
            values.append(bytes(memoryview(value_buffer)[:got * value_size]))
            if done:
                self._last_batch = len(keys)
                return keys, b"".join(values)
            in_token[:] = out_token
            first = False


def _address(buffer: bytearray) -> int:
    """Where a bytearray's bytes are, for the kernel to write there. (A ctypes buffer of each
    new size made a type of its own, `c_char * n`, left in reference cycles when dropped.)"""
    return ct.addressof(ct.c_char.from_buffer(buffer))


def stack_addresses(stacks: BpfMap, stack_id: int) -> tuple[int, ...]:
    """A stack map entry's addresses, innermost first, up to the first empty slot; KeyError
    when the entry is gone. Read as one array of machine words (a loop over ctypes slots
    cost 25 us a stack)."""
    words = array("Q", stacks.lookup_bytes(ct.c_uint32(stack_id)))
    try:
        depth = words.index(0)
    except ValueError:
        depth = len(words)
    return tuple(words[:depth])


class RingBuffer:
    """Reads a BPF_MAP_TYPE_RINGBUF map in place, as libbpf's ring_buffer__consume does:
    a consumer page we write, then the producer page and the data pages, mapped twice in a
    row so that a record wrapping around the end reads as one piece."""

    _BUSY, _DISCARD, _HEADER = 1 << 31, 1 << 30, 8

    def __init__(self, ring: BpfMap) -> None:
        if ring.map_type != MAP_TYPE_RINGBUF:
            raise ValueError(f"map {ring.name} is not a ring buffer")
        page = mmap.PAGESIZE
        self._size = ring.max_entries  # a power of two number of bytes
        self._consumer = mmap.mmap(ring.fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(ring.fd, page + 2 * self._size, mmap.MAP_SHARED,
                                   mmap.PROT_READ, offset=page)
        self._data = page  # where the data pages start in the producer mapping

    def consume(self, on_record: Callable[[memoryview], None]) -> int:
        """Hand every committed record to on_record, oldest first; returns how many."""
        (consumer,) = struct.unpack_from("<Q", self._consumer, 0)
        (producer,) = struct.unpack_from("<Q", self._producer, 0)
        view = memoryview(self._producer)
        records = 0
        try:
            while consumer < producer:
                at = self._data + (consumer & (self._size - 1))
                (length,) = struct.unpack_from("<I", self._producer, at)
                if length & self._BUSY:  # reserved, not yet committed
                    break
                size = length & ~(self._BUSY | self._DISCARD)
                consumer += (size + self._HEADER + 7) // 8 * 8
                if not length & self._DISCARD:
                    on_record(view[at + self._HEADER : at + self._HEADER + size])
                    records += 1
                struct.pack_into("<Q", self._consumer, 0, consumer)
        finally:
            view.release()
        return records

    def close(self) -> None:
        self._consumer.close()
        self._producer.close()


class _PerfEventAttr(ct.Structure):
    """struct perf_event_attr up to PERF_ATTR_SIZE_VER5 (112 bytes, Linux 4.1+)."""

    _fields_ = [
        ("type", ct.c_uint32), ("size", ct.c_uint32), ("config", ct.c_uint64),
        ("sample_period_or_freq", ct.c_uint64), ("sample_type", ct.c_uint64),
        ("read_format", ct.c_uint64), ("flags", ct.c_uint64),
        ("wakeup_events", ct.c_uint32), ("bp_type", ct.c_uint32),
        ("config1", ct.c_uint64), ("config2", ct.c_uint64),
        ("branch_sample_type", ct.c_uint64), ("sample_regs_user", ct.c_uint64),
        ("sample_stack_user", ct.c_uint32), ("clockid", ct.c_int32),
        ("sample_regs_intr", ct.c_uint64), ("aux_watermark", ct.c_uint32),
        ("sample_max_stack", ct.c_uint16), ("reserved", ct.c_uint16),
    ]


assert ct.sizeof(_PerfEventAttr) == 112
PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 1, 2
PERF_COUNT_SW_CPU_CLOCK = 0
_PERF_SAMPLE_RAW = 1 << 10
_ATTR_DISABLED, _ATTR_FREQ = 1 << 0, 1 << 10
_PERF_FLAG_FD_CLOEXEC = 8
_IOC_ENABLE, _IOC_SET_BPF = 0x2400, 0x40042408  # _IO('$', 0), _IOW('$', 8, u32)


def _perf_event_open(attr: _PerfEventAttr, pid: int, cpu: int) -> int:
    if _PERF_EVENT_OPEN_NR is None:
        raise OSError(errno.ENOSYS, f"perf_event_open() is not known on {platform.machine()}")
    fd = _libc.syscall(_PERF_EVENT_OPEN_NR, ct.byref(attr), pid, cpu, -1, _PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        code = ct.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


def _attach(fd: int, prog_fd: int) -> None:
    """Run the program on every overflow of this event, then turn the event on."""
    for request, arg in ((_IOC_SET_BPF, prog_fd), (_IOC_ENABLE, 0)):
        if _libc.ioctl(fd, request, arg) != 0:
            code = ct.get_errno()
            os.close(fd)
            raise OSError(code, os.strerror(code))


def attach_sampling(prog_fd: int, hz: int, event_type: int = PERF_TYPE_SOFTWARE,
                    config: int = PERF_COUNT_SW_CPU_CLOCK) -> list[int]:
    """One sampling event per online CPU, each running the program hz times a second."""
    fds: list[int] = []
    try:
        for cpu in online_cpus():
            attr = _PerfEventAttr(type=event_type, size=ct.sizeof(_PerfEventAttr), config=config,
                                  sample_period_or_freq=hz, flags=_ATTR_DISABLED | _ATTR_FREQ)
            fd = _perf_event_open(attr, -1, cpu)
            _attach(fd, prog_fd)
            fds.append(fd)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def attach_tracepoint(prog_fd: int, tracepoint: str, tracefs: str) -> int:
    """tracepoint as "category:event"; the event's id comes from tracefs."""
    category, event = tracepoint.split(":", 1)
    with open(os.path.join(tracefs, "events", category, event, "id")) as f:
        event_id = int(f.read())
    attr = _PerfEventAttr(type=PERF_TYPE_TRACEPOINT, size=ct.sizeof(_PerfEventAttr),
                          config=event_id, sample_period_or_freq=1, sample_type=_PERF_SAMPLE_RAW,
                          wakeup_events=1, flags=_ATTR_DISABLED)
    fd = _perf_event_open(attr, -1, 0)  # a tracepoint program runs on every CPU
    _attach(fd, prog_fd)
    return fd


class _ProgInfo(ct.Structure):
    """struct bpf_prog_info (include/uapi/linux/bpf.h), up to recursion_misses (5.12+)."""

    _fields_ = [
        ("type", ct.c_uint32), ("id", ct.c_uint32), ("tag", ct.c_uint8 * 8),
        ("jited_prog_len", ct.c_uint32), ("xlated_prog_len", ct.c_uint32),
        ("jited_prog_insns", ct.c_uint64), ("xlated_prog_insns", ct.c_uint64),
        ("load_time", ct.c_uint64), ("created_by_uid", ct.c_uint32),
        ("nr_map_ids", ct.c_uint32), ("map_ids", ct.c_uint64), ("name", ct.c_char * 16),
        ("ifindex", ct.c_uint32), ("gpl_compatible", ct.c_uint32),
        ("netns_dev", ct.c_uint64), ("netns_ino", ct.c_uint64),
        ("nr_jited_ksyms", ct.c_uint32), ("nr_jited_func_lens", ct.c_uint32),
        ("jited_ksyms", ct.c_uint64), ("jited_func_lens", ct.c_uint64),
        ("btf_id", ct.c_uint32), ("func_info_rec_size", ct.c_uint32),
        ("func_info", ct.c_uint64), ("nr_func_info", ct.c_uint32),
        ("nr_line_info", ct.c_uint32), ("line_info", ct.c_uint64),
        ("jited_line_info", ct.c_uint64), ("nr_jited_line_info", ct.c_uint32),
        ("line_info_rec_size", ct.c_uint32), ("jited_line_info_rec_size", ct.c_uint32),
        ("nr_prog_tags", ct.c_uint32), ("prog_tags", ct.c_uint64),
        ("run_time_ns", ct.c_uint64), ("run_cnt", ct.c_uint64),
        ("recursion_misses", ct.c_uint64),
    ]


assert _ProgInfo.recursion_misses.offset == 208, "struct bpf_prog_info changed shape"


_RUN_TIME_END = _ProgInfo.run_time_ns.offset + 8


def program_info(prog_fd: int) -> _ProgInfo | None:
    """The kernel's struct bpf_prog_info of a program (Linux 5.1+: with run_time_ns); None
    if prog_fd names none (closed, or reused). The same call on a map or link descriptor
    succeeds but fills a shorter struct: told apart by the length the kernel wrote. Fields
    a kernel is too old to fill read as 0."""
    info = _ProgInfo()
    attr = _InfoAttr(bpf_fd=prog_fd, info_len=ct.sizeof(info), info=ct.addressof(info))
    try:
        bpf(OBJ_GET_INFO_BY_FD, attr)
    except OSError:
        return None
    return info if attr.info_len >= _RUN_TIME_END else None


def recursion_misses(prog_fd: int) -> int:
    """Times the kernel skipped this program (re-entered on one CPU); 0 if it cannot say."""
    info = program_info(prog_fd)
    return 0 if info is None else int(info.recursion_misses)

