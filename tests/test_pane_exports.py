"""Every export a pane declares (ktop.registry) works through the command line: `--folded-of`,
`--pprof-of`, `--drill`, the Prometheus families, the CSV dump's columns and compare's
folded stacks, for every pane. The README documented `--folded-of offcpu` while the CLI's
own list refused it (exit 2): the lists are the registry's now, and this runs each of them."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import subprocess
import sys

import pytest
from test_export import full_snapshot

from ktop.cli import main, parse_args
from ktop.exports.jsonfile import to_json
from ktop.exports.openmetrics import SnapshotMetrics
from ktop.exports.pprof import profile_class
from ktop.model import Snapshot
from ktop.record.dump import CSV_COLUMNS
from ktop.record.fileformat import RecordWriter
from ktop.registry import PANES, folded_exports, pprof_exports
from ktop.stacktree import hot_functions

FOLDED = list(folded_exports())
PPROF = list(pprof_exports())


def every_pane_busy() -> Snapshot:
    """A snapshot with a row in every pane (the CPU stack not idle, so it is exported; waits
    of milliseconds, not nanoseconds, so they weigh something in microseconds)."""
    snapshot = full_snapshot()
    cpu = snapshot.cpu
    stacks = tuple(dataclasses.replace(s, idle=False) for s in cpu.stacks)
    cpu = dataclasses.replace(cpu, stacks=stacks, functions=hot_functions(
        stacks, cpu.sample_hz * cpu.window_s * cpu.cpus))
    waits = snapshot.waits
    assert waits is not None
    waits = dataclasses.replace(
        waits, stacks=tuple(dataclasses.replace(s, total_ns=s.total_ns * 1_500_000)
                            for s in waits.stacks),
        processes=tuple(dataclasses.replace(p, runq_ns=p.runq_ns * 1_500_000)
                        for p in waits.processes))
    # (none loading or unavailable: each shows its rows)
    return dataclasses.replace(snapshot, cpu=cpu, waits=waits, loading={}, unavailable={})


@pytest.fixture
def replay_file(tmp_path):
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(to_json(every_pane_busy())))
    return str(path)


def test_every_pane_with_data_declares_its_exports():
    """A pane with stacks has folded stacks and a pprof profile; a pane with figures has CSV
    columns and metric families: a new pane cannot forget one silently."""
    for spec in PANES:
        assert spec.csv is not None and spec.metrics is not None, spec.name
        if spec.build is not None:  # the BPF panes: stacks of their own
            assert spec.folded and spec.pprof is not None, spec.name
        if spec.compare is not None:  # compare's folded stacks are a pane's export
            assert spec.compare.folded_of in folded_exports(), spec.name


def test_the_cli_offers_exactly_the_declared_exports():
    assert parse_args(["--snapshot", "o.folded", "--folded-of", "offcpu"]).folded_of == "offcpu"
    assert FOLDED == ["cpu", "locks", "io", "io-latency", "offcpu", "signals", "syscalls"]
    assert PPROF == ["cpu", "locks", "io", "offcpu", "signals", "syscalls"]
    for name in FOLDED:
        assert parse_args(["--snapshot", "o.folded", "--folded-of", name]).folded_of == name
    for name in PPROF:
        assert parse_args(["--snapshot", "o.pb.gz", "--pprof-of", name]).pprof_of == name


def test_folded_of_offcpu_runs_as_the_readme_shows_it(replay_file, tmp_path):
    """A real `ktop` process, as a user types it (it exited 2: invalid choice 'offcpu')."""
    out = tmp_path / "offcpu.folded"
    result = subprocess.run(
        [sys.executable, "-m", "ktop", "--replay", replay_file, "--snapshot", str(out),
         "--folded-of", "offcpu"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines() == [
        "dd;worker_loop;__iomap_dio_rw;io_schedule 60000"]  # blocked 60 ms


@pytest.mark.parametrize("of", FOLDED)
def test_every_folded_export_of_every_pane(replay_file, tmp_path, of):
    out = tmp_path / f"{of}.folded"
    assert main(["--replay", replay_file, "--snapshot", str(out), "--folded-of", of]) == 0
    lines = out.read_text().splitlines()
    assert lines, f"--folded-of {of} wrote nothing"
    for line in lines:
        stack, weight = line.rsplit(" ", 1)
        assert ";" in stack and int(weight) > 0, line


@pytest.mark.parametrize("of", FOLDED)
def test_every_folded_export_compares_with_a_baseline(replay_file, tmp_path, of):
    """The same window as its own baseline: two equal counts a stack."""
    out = tmp_path / f"{of}.diff.folded"
    assert main(["--replay", replay_file, "--baseline", replay_file, "--snapshot", str(out),
                 "--folded-of", of]) == 0
    lines = out.read_text().splitlines()
    assert lines
    for line in lines:
        _stack, was, now = line.rsplit(" ", 2)
        assert was == now and int(now) > 0, line


@pytest.mark.parametrize("of", PPROF)
def test_every_pprof_profile_of_every_pane(replay_file, tmp_path, of):
    out = tmp_path / f"{of}.pb.gz"
    assert main(["--replay", replay_file, "--snapshot", str(out), "--pprof-of", of]) == 0
    profile = profile_class()()
    profile.ParseFromString(gzip.decompress(out.read_bytes()))
    types = [(profile.string_table[t.type], profile.string_table[t.unit])
             for t in profile.sample_type]
    _pane, export = pprof_exports()[of]
    assert types == list(export.sample_types)
    assert profile.string_table[profile.default_sample_type] == export.default_type
    assert profile.sample and all(any(s.value) for s in profile.sample)


def test_every_panes_metric_families_are_served(replay_file, tmp_path):
    out = tmp_path / "ktop.prom"
    assert main(["--replay", replay_file, "--snapshot", str(out)]) == 0
    text = out.read_text()
    snapshot = every_pane_busy()
    for spec in PANES:
        assert spec.metrics is not None
        families = spec.metrics(SnapshotMetrics(), snapshot)
        assert families, spec.name
        for family in families:
            assert f"# TYPE {family.name}" in text, (spec.name, family.name)


def test_drill_of_every_pane(replay_file, tmp_path):
    snapshot = every_pane_busy()
    for spec in PANES:
        assert spec.compare is not None
        row = spec.compare.rows(snapshot, None)[0]
        what = str(getattr(row, spec.drill_by))
        out = tmp_path / f"{spec.name}.txt"
        assert main(["--replay", replay_file, "--snapshot", str(out),
                     "--drill", f"{spec.name}:{what}"]) == 0, spec.name
        assert what.split("+")[0] in out.read_text(), spec.name


def test_the_csv_dump_has_every_panes_columns_waits_included(tmp_path, capsys):
    path = tmp_path / "busy.krec"
    writer = RecordWriter(str(path))
    writer.append(every_pane_busy())
    writer.close()
    assert main(["--replay", str(path), "--dump", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert tuple(row) == CSV_COLUMNS
    for spec in PANES:
        assert spec.csv is not None
        assert set(spec.csv.names) <= set(row), spec.name
    waits = every_pane_busy().waits
    assert waits is not None
    (process,) = waits.processes
    assert row["top_wait_pid"] == str(process.pid) and row["top_wait_comm"] == process.comm
    assert float(row["wait_runq_ms"]) == pytest.approx(process.runq_ns / 1e6, abs=1e-3)
    assert row["top_wait_reason"] == process.reason
    assert row["top_function"] == "vfs_read"
