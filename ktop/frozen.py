"""Frozen dataclasses built fast: the rows ktop makes thousands of a refresh (a profile's
stacks and wakers, a view's groups, a drain's rows).

A frozen dataclass's __init__ sets each field through object.__setattr__ (its own
__setattr__ refuses): 2.9 us for a 13-field row here, against 0.3 us for a mutable one.
`quick_init` gives a frozen, slotted dataclass an __init__ that writes each slot through
its descriptor instead: 1.1 us, and the instances stay as frozen as before.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

T = TypeVar("T")

_NOTHING = object()  # a default_factory field's argument left out


def quick_init(cls: type[T]) -> type[T]:
    """Use over @dataclass(frozen=True, slots=True): the same signature and defaults."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not (params.frozen and "__slots__" in cls.__dict__):
        raise TypeError(f"{cls.__name__}: quick_init is for frozen, slotted dataclasses")
    namespace: dict[str, object] = {"_NOTHING": _NOTHING}
    arguments, body = [], []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init takes plain fields only")
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            arguments.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            arguments.append(f"{f.name}=_NOTHING")
            body.append(f"    if {f.name} is _NOTHING:\n        {f.name} = _factory_{f.name}()")
        else:
            arguments.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(arguments)}):\n" + "\n".join(body or ["    pass"])
    exec(source, namespace)  # noqa: S102 - the source is made of field names only
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return cls
