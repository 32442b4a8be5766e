"""The model's dataclasses as JSON data and back: one codec for `--snapshot FILE.json` (floats
rounded to what they can mean, every field written) and for each record of a recording
(floats whole, fields at their default left out), and the one error a file that cannot be
read or written as either raises."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from ktop.model import Bucket, BuiltOnRead


class RecordingError(Exception):
    """A snapshot file or a recording that cannot be read or written; str() is one line
    naming the problem and the fix."""


# What a file may hold, checked where it is decoded: a forged file (checksums are no
# signature) must not reach the screen, the exports or time.localtime() with values that
# overflow them, nor make a decode take gigabytes.
MAX_ROWS = 1 << 16  # a table (list) of a snapshot: twice the biggest map ktop's BPF keeps
MAX_INT = (1 << 63) - 1  # every integer: what pprof's int64 and C's time_t take
MAX_FLOAT = float(1 << 53)  # every float's magnitude: finite, and exact as an integer
LAST_TIME = 9_223_372_036.0  # 2262-04-11: the last second pprof's int64 nanoseconds hold
MAX_SPAN_S = 100 * 366 * 24 * 3600.0  # a window or an interval: a century at most
# Fields whose range is narrower than their type's, wherever they are.
FIELD_RANGES: dict[str, tuple[float, float]] = {
    "taken_at": (0.0, LAST_TIME),
    "window_s": (0.0, MAX_SPAN_S),
    "duration_s": (0.0, MAX_SPAN_S),
}


class FieldError(ValueError):
    """A value the model cannot take; str() names its field ("cpu.window_s: ...")."""

    def __init__(self, problem: str, rows: int = 0) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []
        self.rows = rows  # a table too long: how many rows it holds

    @property
    def field(self) -> str:
        return ".".join(self.path)

    def __str__(self) -> str:
        if self.rows:
            return f"{self.rows} rows of {self.field or 'a table'}; ktop reads at most {MAX_ROWS}"
        return f"{self.field}: {self.problem}" if self.path else self.problem


def _in_field(name: str, error: Exception) -> FieldError:
    """The error of a value, with the field it was in named first."""
    if not isinstance(error, FieldError):
        error = FieldError(str(error))
    error.path.insert(0, name)
    return error


def brief(data: Any) -> str:
    """A value as an error message shows it: a container by its kind (its repr could be as
    long or as deep as the file), anything else cut short."""
    if type(data) is list:
        return f"a list of {len(data)}"
    if type(data) is dict:
        return f"an object of {len(data)} keys"
    return f"{data!r:.40}"


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
            raise TypeError(f"found {brief(data)} where {name} belongs")
        return data
    return check


def _int(data: Any) -> int:
    if type(data) is not int:  # exact: JSON's true is no int here
        raise TypeError(f"found {brief(data)} where an int belongs")
    if not -MAX_INT <= data <= MAX_INT:
        raise FieldError(f"found {data:.3g}, past the 64-bit range" if abs(data) < 1e300
                         else "found an integer past the 64-bit range")
    return data


def _float(data: Any) -> float:
    if type(data) is float or type(data) is int:
        value = data if type(data) is float or abs(data) < 1e308 else math.inf
        if not -MAX_FLOAT <= value <= MAX_FLOAT:  # NaN and infinities too
            raise FieldError(f"found {value!r:.40}, not a finite number of at most 2^53")
        return float(value)
    raise TypeError(f"found {brief(data)} where a number belongs")


def _ranged(convert: Callable[[Any], Any], low: float, high: float) -> Callable[[Any], Any]:
    def check(data: Any) -> Any:
        value = convert(data)
        if value is not None and not low <= value <= high:
            raise FieldError(f"found {value!r:.40}, out of its range ({low:g} to {high:g})")
        return value
    return check


def _list(data: Any) -> list:
    if type(data) is not list:
        raise TypeError(f"found {brief(data)} where a list belongs")
    if len(data) > MAX_ROWS:
        raise FieldError("too many rows", rows=len(data))
    return data


def _object(data: Any) -> dict:
    if type(data) is not dict:
        raise TypeError(f"found {brief(data)} where an object belongs")
    return data


def _table(data: Any) -> dict:
    data = _object(data)
    if len(data) > MAX_ROWS:
        raise FieldError("too many rows", rows=len(data))
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
        return lambda data: {key(k): value(v) for k, v in _table(data).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record_decoder(hint)
    if hint is float:
        return _float
    if hint is int:
        return _int
    return _checked(hint, hint.__name__)


def _record_decoder(cls: type) -> Callable[[Any], Any]:
    hints = get_type_hints(cls)
    fields = [(f.name, _field_decoder(f.name, hints[f.name]),
               f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
              for f in dataclasses.fields(cls)]
    if cls is Bucket:  # [low, high, count]
        def bucket(data: Any) -> Bucket:
            data = _list(data)
            if len(data) != 3:
                raise ValueError(f"a bucket of {len(data)} numbers, not 3")
            low, high, count = data
            return Bucket(_int(low), _int(high), _int(count))
        return bucket

    def record(data: Any) -> Any:
        data = _object(data)
        values = {}
        for name, convert, required in fields:
            if name in data:
                try:
                    values[name] = convert(data[name])
                except (TypeError, ValueError) as e:
                    raise _in_field(name, e) from None
            elif required:
                raise KeyError(name)
        return cls(**values)
    return record


def _field_decoder(name: str, hint: Any) -> Callable[[Any], Any]:
    convert = decoder(hint)
    limits = FIELD_RANGES.get(name)
    return _ranged(convert, *limits) if limits else convert
