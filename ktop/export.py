"""The Snapshot as JSON (the contract tests and other tools rely on), and back for replay."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from ktop.model import Bucket, BuiltOnRead, Snapshot
from ktop.panes import PANES
from ktop.stacktree import callers_tree
from ktop.text import printable

# 1: files written before this field existed. 2: lock wait buckets end at an inclusive high,
# as block I/O's do (ktop wrote an exclusive one); sample_hz and cpus are in "cpu" too.
FORMAT = 2

# Floats are written rounded to what they can mean; those not named here are written whole.
ROUNDING: dict[type, Mapping[str, int]] = {
    Snapshot: {"duration_s": 3},
    **{cls: digits for spec in PANES for cls, digits in spec.rounding.items()},
}

# Written as a list of their fields, not an object: histograms always were [low, high, count].
AS_LIST: tuple[type, ...] = (Bucket,)


def encode(value: Any) -> Any:
    """A model value as JSON data: a dataclass as an object of its fields."""
    if dataclasses.is_dataclass(value):
        digits = ROUNDING.get(type(value), {})
        fields = {
            f.name: encode(_rounded(getattr(value, f.name), digits.get(f.name)))
            for f in dataclasses.fields(value)
        }
        return list(fields.values()) if type(value) in AS_LIST else fields
    if isinstance(value, (tuple, BuiltOnRead)):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {key: encode(item) for key, item in value.items()}
    return value


def _rounded(value: Any, digits: int | None) -> Any:
    return value if digits is None or value is None else round(value, digits)


def decode(hint: Any, data: Any) -> Any:
    """JSON data back to the model type `hint` (as the dataclasses' type hints name it).
    Keys the model does not know are ignored, a missing field takes its default; one without
    raises KeyError, a value of the wrong type TypeError."""
    origin = get_origin(hint)
    if origin is UnionType:  # only ever "X | None"
        (inner,) = (arg for arg in get_args(hint) if arg is not type(None))
        return None if data is None else decode(inner, data)
    if origin is tuple or origin is Sequence:
        return tuple(decode(get_args(hint)[0], item) for item in _expect(data, list, "a list"))
    if origin is Mapping:
        key, item = get_args(hint)
        return {decode(key, k): decode(item, v) for k, v in _expect(data, dict, "an object").items()}
    if dataclasses.is_dataclass(hint):
        return _decode_record(hint, data)
    if hint is float:
        return float(_expect(data, (int, float), "a number"))
    return _expect(data, hint, hint.__name__)


def _decode_record(cls: type, data: Any) -> Any:
    fields = dataclasses.fields(cls)
    if cls in AS_LIST:
        data = dict(zip((f.name for f in fields), _expect(data, list, "a list")))
    data = _expect(data, dict, "an object")
    hints = _hints(cls)
    values = {}
    for f in fields:
        if f.name in data:
            values[f.name] = decode(hints[f.name], data[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise KeyError(f.name)
    return cls(**values)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _expect(data: Any, kind: type | tuple[type, ...], name: str) -> Any:
    # JSON's true is no number, though Python's bool is an int
    if not isinstance(data, kind) or (isinstance(data, bool) and kind is not bool):
        raise TypeError(f"found {data!r:.40} where {name} belongs")
    return data


def to_json(snapshot: Snapshot, include_idle: bool = False) -> dict[str, Any]:
    """The snapshot as JSON data, with idle functions and stacks only if asked. Stacks
    without kernel frames are left out: the file lists kernel stacks."""
    cpu = snapshot.cpu
    if cpu is not None:
        cpu = dataclasses.replace(
            cpu,
            functions=tuple(f for f in cpu.functions if include_idle or not f.idle),
            stacks=tuple(s for s in cpu.stacks if s.frames and (include_idle or not s.idle)),
        )
    data: dict[str, Any] = {"format": FORMAT, **encode(dataclasses.replace(snapshot, cpu=cpu))}
    # Derived values, for tools that read the file (replay computes them again).
    data["sample_hz"] = cpu.sample_hz if cpu else 0
    data["cpus"] = cpu.cpus if cpu else 0
    if cpu is not None:
        data["cpu"]["expected_samples"] = cpu.expected_samples
        for function, written in zip(cpu.functions, data["cpu"]["functions"]):
            # percent in the tree is the share of this function's samples, as perf top -g
            # (a function samples only passed through has none: no walk over the stacks)
            stacks = cpu.stacks if function.samples else ()
            written["callers"] = callers_tree(function.symbol, stacks).to_json(function.samples)
    if snapshot.locks is not None:
        for caller, written in zip(snapshot.locks.callers, data["locks"]["callers"]):
            written["avg_wait_ns"] = caller.avg_wait_ns
    return data


def from_json(data: dict[str, Any]) -> Snapshot:
    return decode(Snapshot, _upgraded(_expect(data, dict, "an object")))


# What format 1 could leave out, as its reader filled it in.
_FORMAT_1_DEFAULTS: dict[str, dict[str, Any]] = {
    "snapshot": {"taken_at": 0.0, "headers": "", "cpu": None},
    "cpu": {"cumulative": False, "lost": {}},
    "locks": {"lost": {}},
    "blockio": {"lost": {}},
    "io process": {"major": 0, "minor": 0},
}


def _upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """A format 1 file's data as format 2 has it (a copy: the caller's data is left alone)."""
    if data.get("format", 1) >= 2:
        return data
    defaults = _FORMAT_1_DEFAULTS
    data = {**defaults["snapshot"], **data}
    if data["cpu"]:
        data["cpu"] = {**defaults["cpu"], **data["cpu"],
                       "sample_hz": data["sample_hz"], "cpus": data["cpus"]}
    if data.get("locks"):
        data["locks"] = {**defaults["locks"], **data["locks"], "callers": [
            {**caller, "hist_ns": [_inclusive(*bucket) for bucket in caller.get("hist_ns", ())]}
            for caller in data["locks"]["callers"]
        ]}
    if data.get("blockio"):
        data["blockio"] = {**defaults["blockio"], **data["blockio"], "processes": [
            {**defaults["io process"], **process} for process in data["blockio"]["processes"]
        ]}
    return data


def _inclusive(low: int, high: int, count: int) -> list[int]:
    """A format 1 lock bucket with an inclusive high. ktop wrote them ending at 2^n, exclusive;
    some files (the test fixture among them) already end at 2^n - 1, which no log2 bucket's
    exclusive end can be."""
    exclusive = high >= 2 and high & (high - 1) == 0
    return [low, high - 1 if exclusive else high, count]


class RecordingError(Exception):
    """A file that cannot be replayed; str() is one line naming the problem and the fix."""


def read_recording(path: str) -> Snapshot:
    """The snapshot in a file written by `ktop --snapshot FILE.json`."""
    fix = "replay a file written by `ktop --snapshot FILE.json`"
    name = printable(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise RecordingError(f"cannot read {name}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordingError(f"{name} is not JSON ({e}): {fix}") from None
    try:
        return from_json(data)
    except KeyError as e:
        raise RecordingError(f"{name} is not a ktop snapshot (no {e} field): {fix}") from None
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        raise RecordingError(f"{name} is not a ktop snapshot ({e}): {fix}") from None
