"""Every string from a file or the kernel is inert wherever ktop prints it (issue 25).

A replay file is anyone's: the snapshot here has an escape sequence, a lone surrogate (the
JSON `"\\ud800"`, or a file name that is not UTF-8) and markup in EVERY string field the
model has. The hostile snapshot is generated from the model's dataclass fields, so a field
added to the model is covered without touching this test (a check below fails if one is
not). It travels through a JSON file on disk, as `--replay` reads it, then to every output:
the TUI and its drill-downs, .txt, .svg, JSON, folded stacks, pprof, Prometheus text, a
recording and `--dump csv|jsonl`.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import os
import re
from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

import pytest
from conftest import run_app

from ktop.cgroups import cgroup_exists, parse_proc_cgroup
from ktop.cli import main
from ktop.engine import RecordedSource
from ktop.exports import ExportOptions, export
from ktop.exports.folded import FOLDED_OF
from ktop.exports.jsonfile import read_snapshot_file, to_json
from ktop.model import BuiltOnRead, Snapshot
from ktop.record.fileformat import RecordWriter
from ktop.registry import PANES
from ktop.text import printable
from ktop.ui.app import build_app
from ktop.ui.headless import render_screen, screen_text

# An OSC that retitles the terminal, a colour, a one-byte CSI, a bidi override, markup that
# closes a tag never opened (Rich raises MarkupError), a lone surrogate and the stand-in of
# an undecodable byte (surrogateescape).
HOSTILE = "\x1b]2;PWNED\x07\x1b[31m\x9b1m\u202e\ud800[/][bold]\udcff"
# What may never reach an output: controls but newline, C1, bidi overrides, surrogates.
ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def inert(text: str, where: str) -> None:
    found = ACTIVE.search(text)
    assert found is None, f"{where}: {found.group()!r} at {found.start()}: {text[max(0, found.start() - 60):found.start() + 20]!r}"
    text.encode("utf-8")  # strict: what a terminal or a file is handed


# ---- the hostile snapshot, from the model's fields -------------------------------------


@dataclasses.dataclass
class Coverage:
    """(class, field) of every str the model can hold, and those the generator set."""

    fields: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    hostile: set[tuple[str, str]] = dataclasses.field(default_factory=set)


def _inner(hint: Any) -> Any:
    """X of "X | None"."""
    return next(arg for arg in get_args(hint) if arg is not type(None))


def _holds_str(hint: Any) -> bool:
    if hint is str:
        return True
    origin = get_origin(hint)
    if origin in (UnionType, tuple, Sequence, Mapping):
        return any(_holds_str(arg) for arg in get_args(hint) if arg is not Ellipsis)
    return False


def make(hint: Any, coverage: Coverage, where: tuple[str, str]) -> Any:
    """A value of type `hint` made up where the recorded data had none (an empty tuple, a
    None): strings hostile, numbers 1."""
    origin = get_origin(hint)
    if origin is UnionType:
        return make(_inner(hint), coverage, where)
    if origin in (tuple, Sequence):
        return (make(get_args(hint)[0], coverage, where),)
    if origin is Mapping:
        key, value = get_args(hint)
        return {make(key, coverage, where): make(value, coverage, where)}
    if dataclasses.is_dataclass(hint):
        return hostile(None, hint, coverage)
    if hint is str:
        coverage.hostile.add(where)
        return HOSTILE
    return {int: 1, float: 1.0, bool: False}[hint]


def spoil(value: Any, hint: Any, coverage: Coverage, where: tuple[str, str]) -> Any:
    """`value` with HOSTILE before every string it holds (the original after it, so a frame
    still ends in "+0x1a" and a state still reads "S"); an empty or missing value made up."""
    origin = get_origin(hint)
    if origin is UnionType:
        return make(hint, coverage, where) if value is None else spoil(value, _inner(hint), coverage, where)
    if origin in (tuple, Sequence):
        if not value:
            return make(hint, coverage, where) if _holds_str(hint) or dataclasses.is_dataclass(get_args(hint)[0]) else value
        return tuple(spoil(item, get_args(hint)[0], coverage, where) for item in value)
    if origin is Mapping:
        key_hint, value_hint = get_args(hint)
        spoiled = {spoil(k, key_hint, coverage, where): spoil(v, value_hint, coverage, where)
                   for k, v in value.items()}
        return spoiled or make(hint, coverage, where)
    if dataclasses.is_dataclass(hint):
        return hostile(value, hint, coverage)
    if hint is str:
        coverage.hostile.add(where)
        return HOSTILE + value
    return value


def hostile(value: Any, cls: type, coverage: Coverage) -> Any:
    """An instance of the model class `cls` (made up if `value` is None) with every string
    field spoiled."""
    hints = get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        where = (cls.__name__, f.name)
        if _holds_str(hints[f.name]):
            coverage.fields.add(where)
        if f.name == "functions":  # derived from the stacks on reading: left to them
            values[f.name] = ()
            continue
        current = None if value is None else getattr(value, f.name)
        if isinstance(current, BuiltOnRead):
            current = tuple(current)
        if value is None:
            values[f.name] = make(hints[f.name], coverage, where)
        else:
            values[f.name] = spoil(current, hints[f.name], coverage, where)
    return cls(**values)


@pytest.fixture(scope="module")
def replay_file(tmp_path_factory, recorded_data):
    """The hostile snapshot written as `--snapshot FILE.json` writes one: surrogates travel
    as "\\ud800" escapes, as they would in a forged file."""
    from ktop.exports.jsonfile import from_json

    coverage = Coverage()
    snapshot = hostile(from_json(json.loads(json.dumps(recorded_data))), Snapshot, coverage)
    snapshot = dataclasses.replace(snapshot, loading={}, paused=False)  # panes show their data
    missing = coverage.fields - coverage.hostile - {("Snapshot", "loading")}
    assert not missing, f"string fields the generator never made hostile: {sorted(missing)}"
    path = tmp_path_factory.mktemp("hostile") / "hostile.json"
    path.write_text(json.dumps(to_json(snapshot, include_idle=True)))
    return path


@pytest.fixture
def replayed(replay_file) -> Snapshot:
    return read_snapshot_file(str(replay_file))


def test_the_file_carries_the_hostile_strings(replay_file, replayed):
    assert "\\ud800" in replay_file.read_text()
    assert replayed.kernel.startswith(HOSTILE) and replayed.processes[0].comm.startswith(HOSTILE)


# ---- the screen ----------------------------------------------------------------------


def test_the_screen_and_every_drill_down_show_every_string_inert(replayed):
    seen: dict[str, str] = {}

    async def scenario(pilot):
        app = pilot.app
        seen["main"] = screen_text(app)
        for name in (p.name for p in PANES):
            pane = app.main_screen.pane(name)
            for key in list(pane._shown)[:2]:
                if app.main_screen.open_drill(pane, key) and app.screen is not app.main_screen:
                    await pilot.pause(0.1)
                    seen[f"{name} {key}"] = screen_text(app)
                    for _ in range(3):  # every view the drill-down has
                        await pilot.press("v")
                        await pilot.pause(0.05)
                        seen[f"{name} {key} v"] = screen_text(app)
                    app.pop_screen()
                    await pilot.pause()
        for number, name in enumerate((p.name for p in PANES), 1):  # every view of every pane
            await pilot.press(str(number))
            for view in range(4):
                await pilot.press("v")
                await pilot.pause(0.05)
                seen[f"{name} view {view}"] = screen_text(app)
        await pilot.press("L")
        await pilot.pause(0.1)
        seen["losses"] = screen_text(app)
        seen["notes"] = "\n".join(str(n.message) for n in app._notifications)

    run_app(build_app(RecordedSource([replayed]), interval_s=0.05, show_idle=True,
                      source_note=f"replay of {printable(HOSTILE)}.json"), scenario)
    assert len(seen) > 6
    for where, text in seen.items():
        inert(text, where)
    assert "\\x1b]2;PWNED\\x07" in seen["main"]  # escaped, shown as what the string holds


def test_the_header_escapes_kernel_headers_and_version(replayed):
    # Wide enough for every header item: a narrower line drops the least useful whole.
    text = asyncio.run(render_screen(RecordedSource([replayed]), (400, 50), "txt"))
    inert(text, ".txt")
    header = "\n".join(text.splitlines()[:4])
    assert header.count("\\x1b]2;PWNED") >= 3  # the kernel, the headers, the version


def test_svg_and_txt_pictures_are_inert(replay_file, tmp_path):
    for suffix in ("txt", "svg"):
        out = tmp_path / f"out.{suffix}"
        assert main(["--replay", str(replay_file), "--snapshot", str(out), "--idle"]) == 0
        inert(out.read_text(encoding="utf-8"), suffix)


# ---- the data formats ------------------------------------------------------------------


@pytest.mark.parametrize("of", FOLDED_OF)
def test_folded_stacks_are_inert(replayed, of):
    inert(export("folded", replayed, ExportOptions(include_idle=True, folded_of=of)), f"folded {of}")


def test_prometheus_text_is_inert(replayed):
    inert(export("prom", replayed, ExportOptions(include_idle=True)), "prom")


def test_json_keeps_the_strings_as_escaped_data(replayed):
    text = export("json", replayed, ExportOptions(include_idle=True))
    inert(text, "json")
    assert json.loads(text)["kernel"] == replayed.kernel  # data, whole


def test_pprof_labels_are_inert(replayed, tmp_path):
    from test_exports import decoded, labels_of

    profile, strings = decoded(tmp_path, export("pprof", replayed, ExportOptions(include_idle=True)))
    labels = [value for sample in profile.sample
              for value in labels_of(sample, strings).values() if isinstance(value, str)]
    assert labels and any("\\x1b]2;PWNED" in label for label in labels)
    for label in labels:
        inert(label, "pprof label")


def test_a_recording_and_its_dumps_are_inert(replayed, tmp_path, capsys):
    path = tmp_path / "hostile.krec"
    writer = RecordWriter(str(path))
    writer.append(replayed)
    writer.append(dataclasses.replace(replayed, taken_at=replayed.taken_at + 1))
    writer.close()
    for fmt in ("csv", "jsonl"):
        assert main(["--replay", str(path), "--dump", fmt]) == 0
        inert(capsys.readouterr().out, fmt)
    out = tmp_path / "window.txt"
    assert main(["--replay", str(path), "--snapshot", str(out)]) == 0
    inert(out.read_text(encoding="utf-8"), "recording pictured")


# ---- CSV: formulas ---------------------------------------------------------------------


@pytest.mark.parametrize("formula", ["=HYPERLINK(1)", "+1+1", "-1+1", "@SUM(A1)", "\tx", "\rx"])
def test_a_process_named_as_a_formula_reaches_a_spreadsheet_as_text(recorded_snapshot, tmp_path,
                                                                    capsys, formula):
    """OWASP's CSV injection rule: a cell starting with = + - @ tab or CR gets a ' first."""
    io_profile = recorded_snapshot.blockio
    processes = tuple(dataclasses.replace(p, comm=formula) for p in io_profile.processes)
    snapshot = dataclasses.replace(recorded_snapshot,
                                   blockio=dataclasses.replace(io_profile, processes=processes))
    writer = RecordWriter(str(tmp_path / "f.krec"))
    writer.append(snapshot)
    writer.close()
    assert main(["--replay", str(tmp_path / "f.krec"), "--dump", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert row["top_io_comm"] == "'" + printable(formula)
    assert not row["top_io_comm"].startswith(("=", "+", "-", "@", "\t", "\r"))


# ---- names that are not UTF-8 ------------------------------------------------------------


def test_a_replay_file_named_in_bytes_that_are_not_utf8(recorded_data, tmp_path):
    """`ktop --replay $'b\\xff.json'` showed a blank screen: its name is in the header."""
    name = os.fsdecode(b"b\xff.json")
    (tmp_path / name).write_text(json.dumps(recorded_data))
    out = tmp_path / "out.txt"
    assert main(["--replay", str(tmp_path / name), "--snapshot", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "replay of b\\xff.json" in text


def test_a_cgroup_named_in_bytes_that_are_not_utf8_is_found(tmp_path):
    """A cgroup `adv\\xff` read "removed" while it held a process: /proc/PID/cgroup's path,
    decoded with U+FFFD, named no directory."""
    mount = tmp_path / "unified"
    os.makedirs(os.fsencode(mount) + b"/adv\xff")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"35 25 0:30 / {mount} rw - cgroup2 cgroup2 rw\n")
    path = parse_proc_cgroup(b"0::/adv\xff\n")
    assert cgroup_exists(path, str(mountinfo))
    assert printable(path) == "/adv\\xff"
