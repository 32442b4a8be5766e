"""Just enough of a reader for the kernel's BTF (/sys/kernel/btf/vmlinux) to find struct
member offsets and raw tracepoint arguments: what a BPF program needs to read kernel
structs on a kernel whose headers are not installed (format: include/uapi/linux/btf.h)."""

from __future__ import annotations

import ctypes as ct
import struct
from array import array

BTF_PATH = "/sys/kernel/btf/vmlinux"


class BtfError(Exception):
    """The kernel's BTF lacks (or garbles) something the program needs."""


# BTF kinds (include/uapi/linux/btf.h) and the bytes each adds after struct btf_type.
_INT, _PTR, _ARRAY, _STRUCT, _UNION, _ENUM, _TYPEDEF, _FUNC_PROTO, _ENUM64 = (
    1, 2, 3, 4, 5, 6, 8, 13, 19,
)
_QUALIFIERS = {9, 10, 11, 18}  # volatile, const, restrict, type_tag
_EXTRA_BYTES = {1: 4, 3: 12, 14: 4, 17: 4}
_EXTRA_PER_ITEM = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}


class KernelBtf:
    """Just enough of a BTF reader to find struct member offsets and tracepoint arguments."""

    def __init__(self, data: bytes) -> None:
        if len(data) < 24:
            raise BtfError("truncated BTF header")
        magic, _version, _flags, header_len = struct.unpack_from("<HBBI", data, 0)
        if magic != 0xEB9F:
            raise BtfError("not BTF (bad magic)")
        type_off, type_len, str_off, _str_len = struct.unpack_from("<IIII", data, 8)
        self._data = data
        self._strings = header_len + str_off
        # type id -> offset of its struct btf_type; 0 is void. An array, not a list of ints:
        # the kernel's 126,000 types were as many int objects, made by each pane that loads.
        self._types = array("Q", [0])
        self._structs: dict[str, int] = {}
        self._typedefs: dict[str, int] = {}
        pos, end = header_len + type_off, header_len + type_off + type_len
        while pos < end:
            name_off, info = struct.unpack_from("<II", data, pos)
            kind, vlen = info >> 24 & 0x1F, info & 0xFFFF
            self._types.append(pos)
            if kind in (_STRUCT, _UNION) and name_off:
                self._structs.setdefault(self._name(name_off), len(self._types) - 1)
            elif kind == _TYPEDEF and data.startswith(b"btf_trace_", self._strings + name_off):
                self._typedefs[self._name(name_off)] = len(self._types) - 1
            pos += 12 + _EXTRA_BYTES.get(kind, 0) + _EXTRA_PER_ITEM.get(kind, 0) * vlen

    @classmethod
    def load(cls, path: str = BTF_PATH) -> KernelBtf:
        with open(path, "rb") as f:
            return cls(f.read())

    def _name(self, offset: int) -> str:
        start = self._strings + offset
        return self._data[start : self._data.index(b"\0", start)].decode()

    def _type_name(self, type_id: int) -> str:
        name_off = struct.unpack_from("<I", self._data, self._types[self._resolve(type_id)])[0]
        return self._name(name_off) if name_off else ""

    def _type(self, type_id: int) -> tuple[int, int, int, int, int]:
        """(kind, vlen, kind_flag, size_or_type, offset of what follows the btf_type)."""
        pos = self._types[type_id]
        _name, info, size_or_type = struct.unpack_from("<III", self._data, pos)
        return info >> 24 & 0x1F, info & 0xFFFF, info >> 31, size_or_type, pos + 12

    def _resolve(self, type_id: int) -> int:
        """Through typedefs and qualifiers to the type itself."""
        for _ in range(32):
            kind, _vlen, _kflag, target, _ = self._type(type_id)
            if kind != _TYPEDEF and kind not in _QUALIFIERS:
                return type_id
            type_id = target
        raise BtfError("typedef loop")

    def size_of(self, type_id: int) -> int:
        type_id = self._resolve(type_id)
        kind, _vlen, _kflag, size, extra = self._type(type_id)
        if kind == _PTR:
            return ct.sizeof(ct.c_void_p)
        if kind == _ARRAY:
            element, _index, count = struct.unpack_from("<III", self._data, extra)
            return self.size_of(element) * count
        return size

    def _find_member(self, type_id: int, name: str) -> tuple[int, int] | None:
        """(byte offset, type id) of a member, looking inside anonymous structs and unions."""
        kind, vlen, kind_flag, _size, extra = self._type(self._resolve(type_id))
        if kind not in (_STRUCT, _UNION):
            return None
        for i in range(vlen):
            name_off, member_type, offset = struct.unpack_from("<III", self._data, extra + 12 * i)
            bits = offset & 0xFFFFFF if kind_flag else offset
            if kind_flag and offset >> 24:
                continue  # a bitfield: never one of ours
            if name_off and self._name(name_off) == name:
                return bits // 8, member_type
            if not name_off:
                inner = self._find_member(member_type, name)
                if inner:
                    return bits // 8 + inner[0], inner[1]
        return None

    def member(self, struct_name: str, path: str) -> tuple[int, int]:
        """(byte offset, size) of `path` ("bi_iter.bi_sector") inside struct `struct_name`."""
        type_id = self._structs.get(struct_name)
        if type_id is None:
            raise BtfError(f"no struct {struct_name}")
        offset = 0
        for name in path.split("."):
            found = self._find_member(type_id, name)
            if found is None:
                raise BtfError(f"struct {struct_name} has no {path}")
            offset += found[0]
            type_id = found[1]
        return offset, self.size_of(type_id)

    def tracepoint_arity(self, tracepoint: str) -> int:
        """How many arguments a raw tracepoint passes its programs."""
        typedef = self._typedefs.get(f"btf_trace_{tracepoint}")
        if typedef is None:
            raise BtfError(f"no tracepoint {tracepoint}")
        kind, _vlen, _kflag, target, _ = self._type(self._resolve(typedef))
        if kind == _PTR:
            kind, vlen, _kflag, _ret, _extra = self._type(self._resolve(target))
            if kind == _FUNC_PROTO:
                return vlen - 1  # the first parameter is the probe's own data pointer
        raise BtfError(f"tracepoint {tracepoint} is not a function pointer in BTF")

    def enumerator(self, name: str) -> int:
        """The value of the enum constant `name` ("__REQ_PREFLUSH"), in whichever enum holds it."""
        data = self._data
        for pos in self._types[1:]:
            _name, info = struct.unpack_from("<II", data, pos)
            kind, vlen = info >> 24 & 0x1F, info & 0xFFFF
            if kind not in (_ENUM, _ENUM64):
                continue
            step = 8 if kind == _ENUM else 12
            for i in range(vlen):
                item = pos + 12 + step * i
                if self._name(struct.unpack_from("<I", data, item)[0]) == name:
                    if kind == _ENUM:
                        return struct.unpack_from("<i", data, item + 4)[0]
                    low, high = struct.unpack_from("<II", data, item + 4)
                    return high << 32 | low
        raise BtfError(f"no enum constant {name}")

    def tracepoint_arg(self, tracepoint: str, struct_name: str) -> int:
        """Index among a raw tracepoint's arguments of the first `struct struct_name *`."""
        typedef = self._typedefs.get(f"btf_trace_{tracepoint}")
        if typedef is None:
            raise BtfError(f"no tracepoint {tracepoint}")
        kind, _vlen, _kflag, target, _ = self._type(self._resolve(typedef))
        if kind == _PTR:
            kind, vlen, _kflag, _ret, extra = self._type(self._resolve(target))
            if kind == _FUNC_PROTO:
                # The first parameter is the probe's own data pointer, not an argument.
                for i in range(1, vlen):
                    _name, param = struct.unpack_from("<II", self._data, extra + 8 * i)
                    p_kind, _v, _k, pointee, _e = self._type(self._resolve(param))
                    if p_kind != _PTR:
                        continue
                    s_kind, _v, _k, _s, _e = self._type(self._resolve(pointee))
                    if s_kind == _STRUCT and self._type_name(pointee) == struct_name:
                        return i - 1
        raise BtfError(f"tracepoint {tracepoint} takes no struct {struct_name} *")
