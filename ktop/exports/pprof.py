"""pprof: a gzip-compressed profile.proto for `go tool pprof`, Pyroscope and Parca.

One profile per pane, as Go writes its cpu, mutex and block profiles apart: a profile's
duration is the span of its own pane (the BPF panes attach one after the other), and no
reader meets samples of another pane, valued zero in its types (`-traces` listed every CPU
stack before the first lock wait). PROFILES names each one's value types:

  cpu    samples/count, cpu/nanoseconds            a CPU stack's samples, as CPU time (1/Hz)
  locks  contentions/count, lock_wait/nanoseconds  a lock stack's waits, by the task that waited
  io     io_requests/count, io/bytes,              an I/O submission stack's requests; bytes
         io_latency/nanoseconds                    and latency shared among a process's
                                                   stacks by requests
  offcpu off_cpu/nanoseconds                       a blocking stack's time off the CPU (waits
         runqueue/nanoseconds                      pane); a process's time waiting for a CPU,
                                                   under one "[run queue]" frame

Labels: pid and comm on every sample that has them, lock_type and lock_caller on lock
stacks (and lock, the lock's name, where all of a caller's waits were for locks of one name:
known for sleeping locks, through their owner records), disk and op (read/write) on I/O stacks, state (S/D/other) and reason on off-CPU
stacks.

The message classes come from a descriptor built here from SCHEMA (the fields of
profile.proto beside this file), not from a module protoc generated: generated modules are
tied to the protobuf runtime that made them (newer ones refuse older runtimes, older ones
are refused by newer), whereas a descriptor built at run time works with every protobuf
from 4.21 on. A test compiles profile.proto with protoc and checks SCHEMA against it.
"""

from __future__ import annotations

import functools
import gzip
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ktop.codec import MAX_INT
from ktop.model import LockProfile, Snapshot, UserFrame
from ktop.registry import pprof_exports
from ktop.stacktree import CALLERS_DROPPED, TRUNCATED, function_name
from ktop.text import printable
from ktop.writer import SnapshotError

PACKAGE = "perftools.profiles"

# message -> (field, number, type, repeated); types as in descriptor.proto, messages by name.
SCHEMA: dict[str, tuple[tuple[str, int, str, bool], ...]] = {
    "Profile": (
        ("sample_type", 1, "ValueType", True), ("sample", 2, "Sample", True),
        ("mapping", 3, "Mapping", True), ("location", 4, "Location", True),
        ("function", 5, "Function", True), ("string_table", 6, "string", True),
        ("drop_frames", 7, "int64", False), ("keep_frames", 8, "int64", False),
        ("time_nanos", 9, "int64", False), ("duration_nanos", 10, "int64", False),
        ("period_type", 11, "ValueType", False), ("period", 12, "int64", False),
        ("comment", 13, "int64", True), ("default_sample_type", 14, "int64", False),
    ),
    "ValueType": (("type", 1, "int64", False), ("unit", 2, "int64", False)),
    "Sample": (
        ("location_id", 1, "uint64", True), ("value", 2, "int64", True),
        ("label", 3, "Label", True),
    ),
    "Label": (
        ("key", 1, "int64", False), ("str", 2, "int64", False), ("num", 3, "int64", False),
        ("num_unit", 4, "int64", False),
    ),
    "Mapping": (
        ("id", 1, "uint64", False), ("memory_start", 2, "uint64", False),
        ("memory_limit", 3, "uint64", False), ("file_offset", 4, "uint64", False),
        ("filename", 5, "int64", False), ("build_id", 6, "int64", False),
        ("has_functions", 7, "bool", False), ("has_filenames", 8, "bool", False),
        ("has_line_numbers", 9, "bool", False), ("has_inline_frames", 10, "bool", False),
    ),
    "Location": (
        ("id", 1, "uint64", False), ("mapping_id", 2, "uint64", False),
        ("address", 3, "uint64", False), ("line", 4, "Line", True),
        ("is_folded", 5, "bool", False),
    ),
    "Line": (("function_id", 1, "uint64", False), ("line", 2, "int64", False)),
    "Function": (
        ("id", 1, "uint64", False), ("name", 2, "int64", False),
        ("system_name", 3, "int64", False), ("filename", 4, "int64", False),
        ("start_line", 5, "int64", False),
    ),
}

_SCALARS = {
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
}


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """profile.proto as a descriptor, built from SCHEMA."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="ktop/exports/profile.proto", package=PACKAGE, syntax="proto3"
    )
    for message, fields in SCHEMA.items():
        described = proto.message_type.add(name=message)
        for name, number, kind, repeated in fields:
            field = described.field.add(
                name=name, number=number, json_name=_json_name(name),
                label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{kind}"
    return proto


def _json_name(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


@functools.cache
def profile_class() -> type:
    """The Profile message class, in a pool of its own (no clash with another copy of
    profile.proto a program may have loaded)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    descriptor = pool.FindMessageTypeByName(f"{PACKAGE}.Profile")
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:  # protobuf before 4.22
        return message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return get_class(descriptor)


# Per profile: (type, unit) of each value, in the order its samples carry them (each pane's
# PprofExport, in ktop.registry).
PROFILES: dict[str, tuple[tuple[str, str], ...]] = {
    name: export.sample_types for name, (_pane, export) in pprof_exports().items()}
PPROF_OF = tuple(PROFILES)
RUN_QUEUE = "[run queue]"
KERNEL_MAPPING = "[kernel.kallsyms]"


@dataclass
class _Tables:
    """The profile's shared tables: each string, function, location and mapping once."""

    profile: Any
    sample_types: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        self._value = {kind: i for i, (kind, _unit) in enumerate(self.sample_types)}
        self._strings: dict[str, int] = {}
        self._functions: dict[tuple[str, str], int] = {}
        self._locations: dict[tuple[str, str, int], int] = {}
        self._mappings: dict[str, int] = {}
        self.string("")

    def string(self, text: str) -> int:
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self._strings)
            self.profile.string_table.append(_utf8(text))
        return index

    def mapping(self, path: str) -> int:
        mapping_id = self._mappings.get(path)
        if mapping_id is None:
            mapping_id = self._mappings[path] = len(self._mappings) + 1
            self.profile.mapping.add(
                id=mapping_id, filename=self.string(path), has_functions=True,
            )
        return mapping_id

    def function(self, name: str, filename: str) -> int:
        key = (name, filename)
        function_id = self._functions.get(key)
        if function_id is None:
            function_id = self._functions[key] = len(self._functions) + 1
            self.profile.function.add(
                id=function_id, name=self.string(name), system_name=self.string(name),
                filename=self.string(filename),
            )
        return function_id

    def location(self, frame: str, module: str, source: str = "", name: str = "") -> int:
        """A location per frame as ktop names it ("symbol+0xoff" in its module): ktop keeps
        no addresses, and the offset tells call sites of one function apart."""
        filename, _, line_text = source.rpartition(":")
        line = int(line_text) if line_text.isdigit() else 0
        key = (frame, module, line)
        location_id = self._locations.get(key)
        if location_id is None:
            location_id = self._locations[key] = len(self._locations) + 1
            function_id = self.function(name or function_name(frame), filename if line else "")
            self.profile.location.add(
                id=location_id, mapping_id=self.mapping(module or KERNEL_MAPPING),
                line=[{"function_id": function_id, "line": line}],
            )
        return location_id

    def kernel_stack(
        self, frames: tuple[str, ...], modules: tuple[str, ...] = (), sources: tuple[str, ...] = ()
    ) -> list[int]:
        return [
            self.location(frame, modules[i] if i < len(modules) else KERNEL_MAPPING,
                          sources[i] if i < len(sources) else "")
            for i, frame in enumerate(frames)
        ]

    def user_stack(self, frames: tuple[UserFrame, ...]) -> list[int]:
        return [self.location(frame.symbol, frame.module, name=_user_function(frame))
                for frame in frames]

    def sample(self, locations: list[int], values: dict[str, int], labels: dict[str, Any]) -> None:
        row = [0] * len(self.sample_types)
        for kind, value in values.items():
            if not -MAX_INT <= value <= MAX_INT:  # summed from a forged file's records
                raise SnapshotError(f"a {kind} value of {value:.3g} is past pprof's 64-bit "
                                    "range: the data holds numbers ktop never wrote")
            row[self._value[kind]] = value
        sample = self.profile.sample.add(location_id=locations, value=row)
        for key, value in labels.items():
            if isinstance(value, int):
                sample.label.add(key=self.string(key), num=value)
            else:  # `go tool pprof -tags` prints labels as they are: escaped here
                sample.label.add(key=self.string(key), str=self.string(printable(value)))


def _user_function(frame: UserFrame) -> str:
    """An unnamed user frame says in which file it is (as in the stacks view), or every
    `[unknown]` of every library would be one function."""
    if "+" in frame.symbol:
        return function_name(frame.symbol)
    module = frame.module if frame.module.startswith("[") else f"[{frame.module}]"
    return f"{frame.symbol} {module}"


def _utf8(text: str) -> str:
    """proto3 strings must be UTF-8: a name that cannot be (a lone surrogate from a raw
    symbol table) keeps its code as an escape rather than failing the whole file."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def build_profile(snapshot: Snapshot, include_idle: bool = False, of: str = "cpu") -> Any:
    """One pane of the snapshot as a Profile message (not yet serialized): `of` names a
    pane's profile (PPROF_OF). A pane that did not run gives a profile without samples."""
    exports = pprof_exports()
    if of not in exports:
        raise ValueError(f"no pprof profile of {of!r}: choose one of {', '.join(exports)}")
    pane, export = exports[of]
    profile = profile_class()()
    tables = _Tables(profile, export.sample_types)
    for kind, unit in export.sample_types:
        profile.sample_type.add(type=tables.string(kind), unit=tables.string(unit))
    # The pane's own span: the BPF panes attach one after the other, after the processes.
    span_s = pane.window_s(snapshot) or snapshot.duration_s
    profile.time_nanos = int((snapshot.taken_at - span_s) * 1e9)
    profile.duration_nanos = int(span_s * 1e9)
    profile.default_sample_type = tables.string(export.default_type)
    tables.mapping(KERNEL_MAPPING)  # the first mapping is what pprof names the profile by
    profile.comment.append(tables.string(
        f"ktop {snapshot.ktop_version} on {snapshot.hostname}, Linux {snapshot.kernel}"
    ))
    export.add(tables, snapshot, include_idle)
    return profile


def add_cpu(tables: _Tables, snapshot: Snapshot, include_idle: bool) -> None:
    cpu = snapshot.cpu
    if cpu is None:
        return
    profile = tables.profile
    period_ns = round(1e9 / cpu.sample_hz) if cpu.sample_hz else 0
    profile.period_type.type = tables.string("cpu")
    profile.period_type.unit = tables.string("nanoseconds")
    profile.period = period_ns
    for stack in cpu.stacks:
        if (stack.idle and not include_idle) or not (stack.frames or stack.user_frames):
            continue
        locations = tables.kernel_stack(stack.frames, stack.modules, stack.sources)
        if stack.truncated:
            locations.append(tables.location(TRUNCATED, KERNEL_MAPPING))
        if stack.callers_dropped:
            locations.append(tables.location(CALLERS_DROPPED, KERNEL_MAPPING))
        locations += tables.user_stack(stack.user_frames)
        tables.sample(locations, {"samples": stack.samples, "cpu": stack.samples * period_ns},
                      {"pid": stack.pid, "comm": stack.comm})


def caller_lock_names(locks: LockProfile) -> dict[tuple[str, str], str]:
    """(caller, type) -> the name of the locks it waited for, where its owner records
    (sleeping locks only) show one name alone; spinning waits keep no lock per stack."""
    names = {lock.address: lock.name for lock in locks.locks}
    seen: dict[tuple[str, str], set[str]] = {}
    for owner in locks.owners:
        seen.setdefault((owner.caller, owner.type), set()).add(names.get(owner.address, ""))
    return {key: next(iter(found)) for key, found in seen.items()
            if len(found) == 1 and "" not in found}


def add_locks(tables: _Tables, snapshot: Snapshot, include_idle: bool = False) -> None:
    if snapshot.locks is None:
        return
    named = caller_lock_names(snapshot.locks)
    for caller in snapshot.locks.callers:
        where = {"lock_type": caller.type, "lock_caller": caller.caller}
        if (caller.caller, caller.type) in named:
            where["lock"] = named[caller.caller, caller.type]
        if caller.task_stacks:
            for stack in caller.task_stacks:
                locations = tables.kernel_stack(stack.frames) + tables.user_stack(stack.user_frames)
                tables.sample(locations,
                              {"contentions": stack.contended, "lock_wait": stack.total_wait_ns},
                              {"pid": stack.pid, "comm": stack.comm, **where})
        else:  # a file from before ktop kept each task's stacks: no pid to say
            for stack in caller.stacks:
                tables.sample(tables.kernel_stack(stack.frames),
                              {"contentions": stack.contended, "lock_wait": stack.total_wait_ns},
                              where)


def add_waits(tables: _Tables, snapshot: Snapshot, include_idle: bool = False) -> None:
    if snapshot.waits is None:
        return
    for stack in snapshot.waits.stacks:
        locations = tables.kernel_stack(stack.frames) + tables.user_stack(stack.user)
        tables.sample(locations, {"off_cpu": stack.total_ns},
                      {"pid": stack.pid, "comm": stack.comm, "state": stack.state,
                       "reason": stack.reason})
    queue = [tables.location(RUN_QUEUE, KERNEL_MAPPING)]
    for process in snapshot.waits.processes:
        if process.runq_ns:
            tables.sample(queue, {"runqueue": process.runq_ns},
                          {"pid": process.pid, "comm": process.comm})


def to_pprof(snapshot: Snapshot, include_idle: bool = False, of: str = "cpu") -> bytes:
    """The gzip-compressed profile of one pane, as pprof files are stored (mtime 0: the same
    data gives the same bytes)."""
    return gzip.compress(build_profile(snapshot, include_idle, of).SerializeToString(), mtime=0)
