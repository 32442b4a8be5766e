"""The model's dataclasses as JSON data and back: one codec for `--snapshot FILE.json` (floats
rounded to what they can mean, every field written) and for each record of a recording
(floats whole, fields at their default left out), and the one error a file that cannot be
read or written as either raises."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from ktop.model import Bucket, BuiltOnRead


class RecordingError(Exception):
    """A snapshot file or a recording that cannot be read or written; str() is one line
    naming the problem and the fix."""


# Written as a list of their fields, not an object: histograms always were [low, high, count].
AS_LIST: tuple[type, ...] = (Bucket,)
Rounding = Mapping[type, Mapping[str, int]]

_NO_DEFAULT = object()
# Per model class: its fields and their defaults, looked up once (dataclasses.fields() on
# each of the thousands of values in a record was most of the cost of writing it).
_PLANS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, Any], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = tuple(
            (f.name, f.default if f.default is not dataclasses.MISSING
             else f.default_factory() if f.default_factory is not dataclasses.MISSING
             else _NO_DEFAULT)
            for f in dataclasses.fields(cls)
        )
    return plan


def to_data(value: Any, rounding: Rounding | None = None, skip_defaults: bool = False) -> Any:
    """A model value as JSON data: a dataclass as an object of its fields (AS_LIST's as a
    list), floats rounded as `rounding` says per class and field, fields at their default
    left out with skip_defaults."""
    cls = type(value)
    if cls is tuple or cls is list or cls is BuiltOnRead:
        return [to_data(item, rounding, skip_defaults) for item in value]
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value
    if cls is Bucket:
        return [value.low, value.high, value.count]
    if dataclasses.is_dataclass(value):
        digits = rounding.get(cls) if rounding else None
        data = {}
        for name, default in _plan(cls):
            item = getattr(value, name)
            if skip_defaults and (item is default or (default is not _NO_DEFAULT and item == default)):
                continue
            if digits and item is not None and name in digits:
                item = round(item, digits[name])
            data[name] = to_data(item, rounding, skip_defaults)
        return data
    if isinstance(value, Mapping):
        return {key: to_data(item, rounding, skip_defaults) for key, item in value.items()}
    return value


def from_data(hint: Any, data: Any) -> Any:
    """JSON data back to the model type `hint` (as the dataclasses' type hints name it).
    Keys the model does not know are ignored, a missing field takes its default; one without
    raises KeyError, a value of the wrong type TypeError (ValueError for a bad bucket)."""
    return decoder(hint)(data)


def _checked(kind: type, name: str) -> Callable[[Any], Any]:
    def check(data: Any) -> Any:
        if type(data) is not kind:  # exact: JSON's true is no int here
            raise TypeError(f"found {data!r:.40} where {name} belongs")
        return data
    return check


def _float(data: Any) -> float:
    if type(data) is float or type(data) is int:
        return float(data)
    raise TypeError(f"found {data!r:.40} where a number belongs")


def _list(data: Any) -> list:
    if type(data) is not list:
        raise TypeError(f"found {data!r:.40} where a list belongs")
    return data


def _object(data: Any) -> dict:
    if type(data) is not dict:
        raise TypeError(f"found {data!r:.40} where an object belongs")
    return data


@functools.cache
def decoder(hint: Any) -> Callable[[Any], Any]:
    """A function from JSON data to the model type `hint`, made once per type: a replay
    decodes thousands of records."""
    origin = get_origin(hint)
    if origin is UnionType:  # only ever "X | None"
        (inner,) = (arg for arg in get_args(hint) if arg is not type(None))
        decode_inner = decoder(inner)
        return lambda data: None if data is None else decode_inner(data)
    if origin is tuple or origin is Sequence:
        item = decoder(get_args(hint)[0])
        return lambda data: tuple(map(item, _list(data)))
    if origin is Mapping:
        key, value = map(decoder, get_args(hint))
        return lambda data: {key(k): value(v) for k, v in _object(data).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record_decoder(hint)
    if hint is float:
        return _float
    return _checked(hint, hint.__name__)


def _record_decoder(cls: type) -> Callable[[Any], Any]:
    hints = get_type_hints(cls)
    fields = [(f.name, decoder(hints[f.name]),
               f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
              for f in dataclasses.fields(cls)]
    if cls is Bucket:  # [low, high, count]
        int_ = _checked(int, "int")

        def bucket(data: Any) -> Bucket:
            low, high, count = _list(data)
            return Bucket(int_(low), int_(high), int_(count))
        return bucket

    def record(data: Any) -> Any:
        data = _object(data)
        values = {}
        for name, convert, required in fields:
            if name in data:
                values[name] = convert(data[name])
            elif required:
                raise KeyError(name)
        return cls(**values)
    return record
