"""The Snapshot as JSON (the contract tests and other tools rely on), and back for replay."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Mapping
from typing import Any

from ktop.codec import FieldError, RecordingError, from_data, to_data
from ktop.model import Snapshot
from ktop.registry import PANES
from ktop.stacktree import callers_tree
from ktop.text import printable

# The biggest --snapshot FILE.json read back: a busy machine's is a few MB; decoding takes
# about six times a file's size in memory.
MAX_FILE = 64 << 20

# 1: files written before this field existed. 2: lock wait buckets end at an inclusive high,
# as block I/O's do (ktop wrote an exclusive one); sample_hz and cpus are in "cpu" too.
FORMAT = 2

# Floats only shown are written rounded to what they can mean (each pane's own, in
# ktop.registry). Those not named there are written whole: spans, CPU shares and I/O latencies
# feed the exports (pprof, folded, Prometheus), which must come out of a replayed file as
# they came out of the live run.
ROUNDING: dict[type, Mapping[str, int]] = {
    **{cls: digits for spec in PANES for cls, digits in spec.rounding.items()},
}

def encode(value: Any) -> Any:
    """A model value as the file's JSON data: floats rounded as ROUNDING says."""
    return to_data(value, ROUNDING)


def to_json(snapshot: Snapshot, include_idle: bool = False) -> dict[str, Any]:
    """The snapshot as JSON data, with idle functions and stacks only if asked. Every stack
    with frames is kept, user-only ones too: the exports of a replayed file are the live
    run's."""
    cpu = snapshot.cpu
    if cpu is not None:
        cpu = dataclasses.replace(
            cpu,
            functions=tuple(f for f in cpu.functions if include_idle or not f.idle),
            stacks=tuple(s for s in cpu.stacks
                         if (s.frames or s.user_frames) and (include_idle or not s.idle)),
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
    if not isinstance(data, dict):
        raise TypeError(f"found {data!r:.40} where an object belongs")
    return from_data(Snapshot, _upgraded(data))


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


def read_snapshot_file(path: str) -> Snapshot:
    """The snapshot in a file written by `ktop --snapshot FILE.json`."""
    fix = "replay a file written by `ktop --snapshot FILE.json`"
    name = printable(path)
    try:
        text = _read_bounded(path, name, fix)
        data = json.loads(text)
    except OSError as e:
        raise RecordingError(f"cannot read {name}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordingError(f"{name} is not JSON ({e}): {fix}") from None
    except RecursionError:  # json's decoder stops at the interpreter's recursion limit
        raise RecordingError(f"{name} nests containers deeper than ktop reads: {fix}") from None
    try:
        return from_json(data)
    except FieldError as e:
        raise RecordingError(f"{name} holds {printable(str(e))[:120]}" if e.rows else
                             f"{name} is not a ktop snapshot ({printable(str(e))[:120]}): {fix}") from None
    except KeyError as e:
        raise RecordingError(f"{name} is not a ktop snapshot (no {e} field): {fix}") from None
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        raise RecordingError(f"{name} is not a ktop snapshot ({printable(str(e))[:120]}): {fix}") from None


def _read_bounded(path: str, name: str, fix: str) -> bytes:
    """The file's bytes: a regular file (a FIFO or a device would block or never end) of
    at most MAX_FILE bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordingError(f"cannot read {name}: not a regular file; {fix}")
        if info.st_size > MAX_FILE:
            raise RecordingError(f"{name} is {info.st_size / 1e6:.0f} MB, more than the "
                                 f"{MAX_FILE >> 20} MiB of any snapshot ktop writes: {fix}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:  # it grew since
            raise RecordingError(f"{name} is more than {MAX_FILE >> 20} MiB: {fix}")
        return data
    finally:
        os.close(fd)
