"""Folded stacks, pprof and Prometheus text from recorded data, read back by their readers.

No root: everything starts from tests/fixtures/recorded.json (through the model), and each
format is read back the way its engines read it: flamegraph.pl's line rule, protoc's own
class for profile.proto and `go tool pprof`, prometheus_client's parser.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ktop.exports import ExportOptions, export
from ktop.exports.folded import folded_stacks, to_folded
from ktop.exports.jsonfile import from_json
from ktop.exports.openmetrics import SnapshotMetrics, TopCounters, render, to_prom
from ktop.exports.pprof import PROFILES, file_descriptor, to_pprof
from ktop.model import (
    Bucket,
    IoSubmitStack,
    LockTaskStack,
    ProcessRow,
    StackSample,
    UserFrame,
)
from ktop.panes.blockio.exports import io_stack_shares
from ktop.text import printable

PROTO = os.path.join(os.path.dirname(__file__), "..", "ktop", "exports", "profile.proto")
HOSTILE = 'ev;il "x"\\ \n\x1b[2J'  # every separator and escape these formats have


@pytest.fixture
def snapshot(recorded_snapshot):
    """The recording, with what a current ktop keeps and the fixture predates: which task
    waited under which stack (two tasks on the pipe mutex, as its tasks list says)."""
    locks = recorded_snapshot.locks
    mutex, spin, rwsem = locks.callers
    libc = UserFrame("__libc_read+0x12", "/usr/lib/x86_64-linux-gnu/libc.so.6")
    mutex = replace(mutex, task_stacks=(
        LockTaskStack(4243, "[bold]red[/]", mutex.stacks[0].frames, (libc,), 500, 30_000_000),
        LockTaskStack(8072, "dd", mutex.stacks[0].frames, (), 312, 11_250_000),
    ))
    return replace(recorded_snapshot, locks=replace(locks, callers=(mutex, spin, rwsem)))


# ---- folded ----------------------------------------------------------------------------

# flamegraph.pl's own rule for a line: the weight after the last whitespace, frames by ";".
FLAMEGRAPH_LINE = re.compile(r"^(.*)\s+?(\d+(?:\.\d*)?)$")


def parse_folded(text: str) -> Counter:
    stacks: Counter = Counter()
    for line in text.splitlines():
        match = FLAMEGRAPH_LINE.match(line)
        assert match, f"flamegraph.pl would skip {line!r}"
        frames = tuple(match.group(1).split(";"))
        assert all(frames) and not any(re.search(r"[\s\x00-\x1f\x7f]", f) for f in frames), line
        stacks[frames] += int(match.group(2))
    return stacks


def test_folded_cpu_stacks_read_root_first_and_add_up_to_the_hot_functions(snapshot):
    stacks = parse_folded(to_folded(snapshot))
    assert stacks[("dd", "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "ksys_read",
                   "vfs_read", "get_random_bytes_user", "chacha_block_generic",
                   "chacha_permute")] == 225
    # Round trip: the leaf of every line is where its samples landed, as the pane counts them.
    by_leaf: Counter = Counter()
    for frames, weight in stacks.items():
        by_leaf[frames[-1]] += weight
    for function in snapshot.cpu.functions:
        if not function.idle:
            assert by_leaf[function.symbol] == function.samples, function.symbol
    assert "pv_native_safe_halt" not in by_leaf  # idle only when asked
    with_idle = parse_folded(to_folded(snapshot, include_idle=True))
    assert sum(with_idle.values()) - sum(stacks.values()) == snapshot.cpu.idle_samples


def test_folded_puts_user_frames_between_comm_and_kernel(snapshot):
    stack = StackSample(
        pid=7, comm="app", samples=3, frames=("vfs_read+0x10", "ksys_read+0x5"),
        user_frames=(UserFrame("read+0x14", "/usr/lib/libc.so.6"),
                     UserFrame("0x5581", "[unknown]"), UserFrame("main+0x1c", "/usr/bin/app")),
        truncated=True,
    )
    one = replace(snapshot, cpu=replace(snapshot.cpu, stacks=(stack,)))
    assert to_folded(one) == (
        "app;main;0x5581_[unknown];read;[truncated];ksys_read;vfs_read 3\n"
    )


def test_folded_escapes_hostile_names_into_one_frame_on_one_line(snapshot):
    stack = StackSample(pid=1, comm=HOSTILE, samples=4, frames=(f"{HOSTILE}+0x1", "vfs_read+0x2"))
    one = replace(snapshot, cpu=replace(snapshot.cpu, stacks=(stack,)))
    text = to_folded(one)
    assert text.count("\n") == 1 and "\x1b" not in text
    (frames,) = parse_folded(text)
    assert frames == (r'ev:il_"x"\_\x0a\x1b[2J', "vfs_read", r'ev:il_"x"\_\x0a\x1b[2J')


def test_folded_lock_stacks_weigh_wait_microseconds_by_the_task_that_waited(snapshot):
    stacks = parse_folded(to_folded(snapshot, "locks"))
    mutex_path = ("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "ksys_read", "vfs_read",
                  "pipe_read", "__mutex_lock.constprop.0")
    assert stacks[("[bold]red[/]", "__libc_read", *mutex_path)] == 30_000
    assert stacks[("dd", *mutex_path)] == 11_250
    # A caller the file has no task stacks for: its one waiting command is the root.
    spin = [frames for frames in stacks if frames[-1] == "queued_spin_lock_slowpath"]
    assert spin == [(r"\x1b[2J_evil", "path_lookupat", "walk_component", "__lookup_slow",
                     "d_alloc_parallel", "_raw_spin_lock", "queued_spin_lock_slowpath")]
    total_ns = sum(c.total_wait_ns for c in snapshot.locks.callers if c.stacks)
    assert sum(stacks.values()) == total_ns // 1000


def test_folded_io_weighs_bytes_or_latency_per_submitting_stack(snapshot):
    evil = snapshot.blockio.processes[0]
    bytes_lines = folded_stacks(snapshot, "io")
    (line,) = bytes_lines
    assert line.startswith(r"\x1b[2J_evil;do_syscall_64;__x64_sys_fsync;")
    assert bytes_lines[line] == evil.bytes == 10_485_760
    latency = folded_stacks(snapshot, "io-latency")
    assert latency[line] == round(evil.avg_lat_ms * 1000 * evil.requests)


def test_io_bytes_are_shared_by_requests_and_add_up_exactly(snapshot):
    process = replace(snapshot.blockio.processes[0], requests=3, bytes=100, stacks=(
        IoSubmitStack(("a+0x1",), 1), IoSubmitStack(("b+0x1",), 1), IoSubmitStack(("c+0x1",), 1)))
    assert sorted(io_stack_shares(process, 100), reverse=True) == [34, 33, 33]
    lossy = replace(process, requests=4)  # one request's stack was lost: no share for it
    assert io_stack_shares(lossy, 100) == [25, 25, 25]


def test_folded_of_an_unknown_kind_names_the_kinds(snapshot):
    with pytest.raises(ValueError, match="cpu, locks, io, io-latency"):
        to_folded(snapshot, "disks")


# ---- pprof -----------------------------------------------------------------------------


def protoc_descriptor(tmp_path):
    """profile.proto compiled by protoc itself (grpcio-tools), as a FileDescriptorProto."""
    grpc_tools = pytest.importorskip("grpc_tools")
    from google.protobuf import descriptor_pb2

    out = tmp_path / "profile.desc"
    proto_dir = os.path.dirname(os.path.abspath(PROTO))
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}", f"-I{include}",
         f"--descriptor_set_out={out}", "profile.proto"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file[0]


def fields_of(file) -> dict:
    return {
        message.name: [(f.name, f.number, f.type, f.label, f.type_name) for f in message.field]
        for message in file.message_type
    }


def test_the_schema_built_in_python_is_profile_proto_as_protoc_reads_it(tmp_path):
    compiled = protoc_descriptor(tmp_path)
    assert compiled.package == file_descriptor().package == "perftools.profiles"
    assert fields_of(file_descriptor()) == fields_of(compiled)


def fresh_profile_class(tmp_path):
    """A Profile class that owes nothing to ktop's code: protoc's descriptor, its own pool."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(protoc_descriptor(tmp_path))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))


def decoded(tmp_path, data: bytes):
    profile = fresh_profile_class(tmp_path).FromString(gzip.decompress(data))
    strings = profile.string_table
    assert strings[0] == ""
    return profile, strings


def samples_by_type(profile, strings, kind: str) -> list:
    types = [strings[t.type] for t in profile.sample_type]
    index = types.index(kind)
    return [(s, s.value[index]) for s in profile.sample if s.value[index]]


def labels_of(sample, strings) -> dict:
    return {strings[label.key]: strings[label.str] if label.str else label.num
            for label in sample.label}


def test_pprof_round_trips_through_a_class_protoc_made(snapshot, tmp_path):
    profile, strings = decoded(tmp_path, to_pprof(snapshot))
    assert [(strings[t.type], strings[t.unit]) for t in profile.sample_type] == list(PROFILES["cpu"])
    assert strings[profile.default_sample_type] == "cpu"
    assert profile.period == round(1e9 / 99)

    def tables(profile):
        """Every location and function id defined once."""
        locations = {loc.id: loc for loc in profile.location}
        functions = {fn.id: strings[fn.name] for fn in profile.function}
        assert len(locations) == len(profile.location) and len(functions) == len(profile.function)
        return locations, functions

    locations, functions = tables(profile)

    def leaf(sample) -> str:
        return functions[locations[sample.location_id[0]].line[0].function_id]

    cpu = samples_by_type(profile, strings, "samples")
    by_leaf: Counter = Counter()
    for sample, count in cpu:
        by_leaf[leaf(sample)] += count
    for function in snapshot.cpu.functions:
        if not function.idle:
            assert by_leaf[function.symbol] == function.samples
    dd = next(s for s, _ in cpu if labels_of(s, strings)["comm"] == "dd")
    assert labels_of(dd, strings)["pid"] in (8072, 6610)

    profile, strings = decoded(tmp_path, to_pprof(snapshot, of="locks"))
    assert strings[profile.default_sample_type] == "lock_wait"
    locations, functions = tables(profile)
    waits = samples_by_type(profile, strings, "lock_wait")
    assert len(waits) == len(profile.sample)  # lock stacks alone
    assert sum(v for _, v in waits) == sum(c.total_wait_ns for c in snapshot.locks.callers if c.stacks)
    red = next(s for s, _ in waits if labels_of(s, strings).get("pid") == 4243)
    assert labels_of(red, strings) == {"pid": 4243, "comm": "[bold]red[/]", "lock_type": "mutex",
                                       "lock_caller": "pipe_read+0x4d"}
    assert leaf(red) == "__mutex_lock.constprop.0"
    assert functions[locations[red.location_id[-1]].line[0].function_id] == "__libc_read"

    profile, strings = decoded(tmp_path, to_pprof(snapshot, of="io"))
    (io, io_bytes), = samples_by_type(profile, strings, "io")
    assert io_bytes == 10_485_760
    assert labels_of(io, strings) == {"pid": 4242, "comm": "\\x1b[2J evil", "disk": "vda",
                                      "op": "write"}


def test_pprof_keeps_hostile_names_as_data(snapshot, tmp_path):
    """pprof strings are data: a lone surrogate does not break the file. Labels are printed
    as they are by `go tool pprof -tags`: a comm's escape sequence is escaped (printable)."""
    odd = "\ud800bad"  # a lone surrogate cannot be UTF-8: it must not break the file
    stack = StackSample(pid=1, comm=HOSTILE, samples=4, frames=(f"{odd}+0x1", "vfs_read+0x2"))
    one = replace(snapshot, cpu=replace(snapshot.cpu, stacks=(stack,)), locks=None, blockio=None)
    profile, strings = decoded(tmp_path, to_pprof(one))
    ((sample, _),) = samples_by_type(profile, strings, "samples")
    assert labels_of(sample, strings)["comm"] == printable(HOSTILE)
    assert "\x1b" not in printable(HOSTILE)
    assert "\\ud800bad" in strings


def go_pprof(*args: str, home: str) -> str:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain: `apt-get install golang-go` (make test does)")
    result = subprocess.run(
        [go, "tool", "pprof", *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "HOME": home, "PPROF_TMPDIR": home, "GOFLAGS": "-mod=mod",
             "GOPROXY": "off", "GOTOOLCHAIN": "local"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def top_rows(text: str) -> dict[str, str]:
    """`pprof -top` rows: {function: flat}."""
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1].endswith("%"):
            rows[parts[-1]] = parts[0]
    return rows


def pprof_files(snapshot, tmp_path) -> dict[str, str]:
    paths = {}
    for of in PROFILES:
        paths[of] = str(tmp_path / f"{of}.pb.gz")
        (tmp_path / f"{of}.pb.gz").write_bytes(to_pprof(snapshot, of=of))
    return paths


def test_go_tool_pprof_reads_every_sample_type(snapshot, tmp_path):
    path = pprof_files(snapshot, tmp_path)
    home = str(tmp_path)
    cpu = go_pprof("-top", "-sample_index=samples", path["cpu"], home=home)
    assert top_rows(cpu)["chacha_permute"] == "225"
    assert top_rows(go_pprof("-top", path["cpu"], home=home))["chacha_permute"] == "2.27s"
    waits = top_rows(go_pprof("-top", path["locks"], home=home))
    assert waits["__mutex_lock.constprop.0"] == "41.25ms"
    io = go_pprof("-top", "-tagfocus=disk=vda", path["io"], home=home)
    assert top_rows(io)["blk_mq_submit_bio"] == "10MB"
    tags = go_pprof("-tags", "-sample_index=contentions", path["locks"], home=home)
    assert "lock_type" in tags and "mutex" in tags


def test_each_pprof_profile_covers_its_panes_seconds_and_holds_its_samples_alone(
        snapshot, tmp_path):
    """The I/O pane attached seconds after the run began: rates from a run-long Duration
    understated its I/O (1374 against 1665 MB/s); and `-traces` of the lock waits listed
    ~770 CPU stacks first, valued 0."""
    snapshot = replace(snapshot, duration_s=17.68, cpu=replace(snapshot.cpu, window_s=10.0),
                       locks=replace(snapshot.locks, window_s=9.5),
                       blockio=replace(snapshot.blockio, window_s=8.25))
    path = pprof_files(snapshot, tmp_path)
    home = str(tmp_path)
    for of, header in (("cpu", "Duration: 10s"), ("locks", "Duration: 9.50s"),
                       ("io", "Duration: 8.25s")):
        traces = go_pprof("-traces", path[of], home=home)
        assert header in traces, traces[:300]
        values = re.findall(r"^-+\+-+\n\s+(\S+)", traces, re.M)
        assert values and "0" not in values, values  # no zero-valued trace
    locks = go_pprof("-traces", path["locks"], home=home)
    assert "chacha_permute" not in locks and "__mutex_lock" in locks


# ---- Prometheus text -------------------------------------------------------------------


def families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def series(family, **labels) -> list:
    return [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]


def test_prom_parses_with_prometheus_client_and_bounds_the_series(snapshot):
    parsed = families(to_prom(snapshot, top=3))
    assert series(parsed["ktop_up"])[0].value == 1.0
    functions = parsed["ktop_function_samples"]
    assert functions.type == "counter"
    values = {s.labels["function"]: s.value for s in functions.samples}
    assert len(values) == 4  # top 3 and other
    assert values["chacha_permute"] == 225
    busy = sum(f.samples for f in snapshot.cpu.functions if not f.idle)
    assert sum(values.values()) == busy
    assert "pv_native_safe_halt" not in values
    waits = {(s.labels["lock_type"], s.labels["caller"]): s.value
             for s in parsed["ktop_lock_wait_seconds"].samples}
    assert waits[("mutex", "pipe_read+0x4d")] == pytest.approx(0.04125)
    written = series(parsed["ktop_disk_io_bytes"], disk="vda", op="write")
    assert written[0].value == 10_485_760 + 663_552
    processes = {s.labels["comm"] for s in parsed["ktop_process_cpu_ratio"].samples}
    assert len(processes) == 4
    # No stack is ever a label: no value holds a frame separator or an offset chain.
    for family in parsed.values():
        for sample in family.samples:
            assert not any(";" in value for value in sample.labels.values())


def test_process_series_stay_as_few_as_the_commands_under_pid_churn(snapshot):
    """Fifty short dd a second, each its own pid, for 100 refreshes: Prometheus keeps every
    series it ever saw, so the series are those of the commands (and cgroups), not the pids."""
    metrics = SnapshotMetrics(top=5)
    seen = set()
    for refresh in range(100):
        shell = ProcessRow(100, "bash", "root", "S", 3.0, 2.0, 1, 4096, cgroup="/user.slice")
        dds = tuple(ProcessRow(1000 + 50 * refresh + i, "dd", "root", "R", 1.5, 1.0, 1, 4096,
                               cgroup=f"/machine.slice/libpod-{'ab' * 32}.scope")
                    for i in range(50))
        text = render(metrics.families(replace(snapshot, processes=(shell, *dds)))).decode()
        for sample in families(text)["ktop_process_cpu_ratio"].samples:
            seen.add(tuple(sorted(sample.labels.items())))
        if refresh == 0:
            dd = series(families(text)["ktop_process_cpu_ratio"], comm="dd", mode="user")
            assert dd[0].labels["cgroup"] == "podman:abababababab"
            assert dd[0].value == pytest.approx(0.25)  # fifty of 0.5% user each
    assert len(seen) == 6  # (bash, dd, other) x (user, system)


def test_kernel_threads_are_one_series_whatever_work_renames_them(snapshot):
    workers = [ProcessRow(10 + i, name, "root", "I", 1.0, 1.0, 1, 0, cmdline="", cgroup="/")
               for i, name in enumerate(("kworker/0:2-events", "kworker/1:2-virtio_vsock",
                                         "kworker/u8:0-writeback", "ksoftirqd/0", "ksoftirqd/1"))]
    odd = ProcessRow(99, "my/tool", "root", "S", 1.0, 1.0, 1, 0, cmdline="my/tool --x", cgroup="/")
    parsed = families(to_prom(replace(snapshot, processes=(*workers, odd))))
    comms = {s.labels["comm"]: s.value for s in series(parsed["ktop_process_cpu_ratio"], mode="system")}
    assert comms == {"kworker": 0.03, "ksoftirqd": 0.02, "my/tool": 0.01, "other": 0.0}


def test_exp2_buckets_become_cumulative_le_buckets(snapshot):
    evil = replace(snapshot.blockio.processes[0], hist_us=(
        Bucket(64, 127, 12), Bucket(128, 255, 95), Bucket(256, 511, 3)))
    blockio = replace(snapshot.blockio, processes=(evil,))
    parsed = families(to_prom(replace(snapshot, blockio=blockio)))
    latency = parsed["ktop_disk_io_latency_seconds"]
    assert latency.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in series(latency, disk="vda", op="write")
               if s.name.endswith("_bucket")}
    assert buckets["6.4e-05"] == 0  # 64..127 us is not all under 64 us
    assert buckets["0.000128"] == 12  # latencies of at most 127 us are below 128 us
    assert buckets["0.000256"] == 107 and buckets["0.000512"] == 110 and buckets["+Inf"] == 110
    counts = list(buckets.values())
    assert counts == sorted(counts)
    (count,) = [s.value for s in series(latency, disk="vda") if s.name.endswith("_count")]
    assert count == 110


def test_label_values_are_escaped_and_read_back(snapshot):
    process = replace(snapshot.processes[0], comm=HOSTILE, cpu_percent=500.0)
    text = to_prom(replace(snapshot, processes=(process,)))
    assert "\x1b" not in text
    parsed = families(text)
    comms = {s.labels["comm"] for s in parsed["ktop_process_cpu_ratio"].samples}
    assert printable(HOSTILE) in comms  # the exposition's escapes undone by the parser


def test_openmetrics_text_parses_too(snapshot):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse

    text = render(SnapshotMetrics(5).families(snapshot), openmetrics=True).decode()
    assert text.endswith("# EOF\n")
    names = {family.name for family in parse(text)}
    assert {"ktop_up", "ktop_function_samples", "ktop_disk_io_latency_seconds"} <= names


def test_other_never_goes_down_when_a_key_enters_the_top():
    counters = TopCounters(top=1, values=1)
    top, other = counters.update({"a": (10.0,), "b": (5.0,)})
    assert top == [("a", (10.0,))] and other == (5.0,)
    top, other = counters.update({"a": (11.0,), "b": (30.0,)})  # b overtakes a
    assert top == [("b", (30.0,))] and other == (6.0,)  # a's new 1, b's past 5 kept
    top, other = counters.update({"a": (11.0,), "b": (31.0,), "c": (2.0,)})
    assert other == (8.0,)


def test_cpu_seconds_never_step_back_when_shares_round_differently(snapshot):
    metrics = SnapshotMetrics()
    first = families(render(metrics.families(snapshot)).decode())
    shifted = replace(snapshot, cpu=replace(snapshot.cpu, times=replace(
        snapshot.cpu.times, kernel=snapshot.cpu.times.kernel - 1)))
    second = families(render(metrics.families(shifted)).decode())
    before = series(first["ktop_cpu_seconds"], mode="kernel")[0].value
    assert series(second["ktop_cpu_seconds"], mode="kernel")[0].value == before


def test_export_dispatches_every_data_format(snapshot):
    options = ExportOptions(folded_of="locks", top=2)
    assert export("folded", snapshot, options).startswith("[bold]red[/];__libc_read;")
    assert gzip.decompress(export("pprof", snapshot, options))
    assert export("prom", snapshot, options).startswith("# HELP ktop_up")
    assert '"format": 2' in export("json", snapshot, options)


# ---- --snapshot FILE in each format, from a replayed recording ---------------------------

RECORDED = os.path.join(os.path.dirname(__file__), "fixtures", "recorded.json")


def ktop(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ktop", "--replay", RECORDED, *args],
                          capture_output=True, timeout=120, cwd=cwd, stdin=subprocess.DEVNULL)


def test_snapshot_writes_each_format_by_its_suffix(tmp_path):
    for name in ("top.folded", "top.pb.gz", "top.prom"):
        result = ktop("--snapshot", str(tmp_path / name))
        assert result.returncode == 0, result.stderr
        assert result.stderr.decode() == f"ktop: wrote {tmp_path / name}\n"
    assert sorted(os.listdir(tmp_path)) == ["top.folded", "top.pb.gz", "top.prom"]  # no temporaries
    assert parse_folded((tmp_path / "top.folded").read_text())
    profile, strings = decoded(tmp_path, (tmp_path / "top.pb.gz").read_bytes())
    assert "chacha_permute" in strings
    assert (tmp_path / "top.pb.gz").stat().st_mode & 0o777 == 0o600  # kernel addresses
    assert (tmp_path / "top.prom").stat().st_mode & 0o777 == 0o644  # neither those nor cmdlines
    assert "ktop_up" in families((tmp_path / "top.prom").read_text())


def test_folded_to_standard_output_for_a_pipe(tmp_path):
    result = ktop("--snapshot", "-", "--format", "folded", "--folded-of", "io", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == b""
    (stack,) = parse_folded(result.stdout.decode())
    assert stack[0] == r"\x1b[2J_evil" and stack[-1] == "blk_mq_submit_bio"
    assert os.listdir(tmp_path) == []


def test_pprof_of_writes_the_profile_of_one_pane(tmp_path):
    result = ktop("--snapshot", str(tmp_path / "locks.pb.gz"), "--pprof-of", "locks")
    assert result.returncode == 0, result.stderr
    profile, strings = decoded(tmp_path, (tmp_path / "locks.pb.gz").read_bytes())
    assert [strings[t.type] for t in profile.sample_type] == ["contentions", "lock_wait"]
    assert "__mutex_lock.constprop.0" in strings and "chacha_permute" not in strings


def test_format_overrides_the_suffix(tmp_path):
    result = ktop("--snapshot", str(tmp_path / "profile.bin"), "--format", "pprof")
    assert result.returncode == 0, result.stderr
    assert decoded(tmp_path, (tmp_path / "profile.bin").read_bytes())[0].sample


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--snapshot", "x.svg", "--folded-of", "locks"], "--folded-of goes with folded"),
        (["--snapshot", "x.json", "--top", "5"], "--top goes with --serve"),
        (["--top", "0", "--serve", "9464"], "--top"),
        (["--format", "folded"], "--format goes with --snapshot"),
        (["--snapshot", "x.folded", "--folded-of", "disks"], "--folded-of"),
        (["--snapshot", "x.folded", "--pprof-of", "locks"], "--pprof-of goes with pprof"),
        (["--snapshot", "x.pb.gz", "--pprof-of", "io-latency"], "--pprof-of"),
    ],
)
def test_export_options_out_of_place_are_usage_errors(args, complaint, tmp_path):
    result = ktop(*args, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.decode().startswith("usage: ktop")
    assert complaint in result.stderr.decode()
    assert os.listdir(tmp_path) == []


def test_standard_output_without_a_format_is_one_line(tmp_path):
    result = ktop("--snapshot", "-", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode() == (
        "ktop: --snapshot - writes to standard output: say which format with --format\n")


# ---- from a replayed file as from the live run -----------------------------------------


def every_export(snapshot) -> dict:
    formats = {f"folded {of}": export("folded", snapshot, ExportOptions(folded_of=of))
               for of in ("cpu", "locks", "io", "io-latency")}
    formats["pprof"] = gzip.decompress(export("pprof", snapshot))
    formats["prom"] = export("prom", snapshot)
    return formats


def test_every_export_of_a_json_file_is_the_live_runs(snapshot):
    """A spinner's samples have no kernel frames: the file keeps them, and an odd span and
    latency come back whole, so every format written from the file is the live one."""
    spinner = StackSample(pid=4321, comm="spin", samples=816, frames=(), user_frames=(
        UserFrame("spin+0x12", "/usr/local/bin/spin"), UserFrame("main+0x30", "/usr/local/bin/spin")))
    cpu = replace(snapshot.cpu, stacks=(*snapshot.cpu.stacks, spinner), window_s=3.0001234567,
                  user_samples=snapshot.cpu.user_samples + 816)
    process = replace(snapshot.blockio.processes[0], avg_lat_ms=1 / 3)
    blockio = replace(snapshot.blockio, processes=(process, *snapshot.blockio.processes[1:]))
    live = replace(snapshot, cpu=cpu, blockio=blockio, duration_s=3.0001234567)
    replayed = from_json(json.loads(export("json", live)))
    assert parse_folded(to_folded(replayed))[("spin", "main", "spin")] == 816
    live_exports, replayed_exports = every_export(live), every_export(replayed)
    for name, content in live_exports.items():
        assert replayed_exports[name] == content, name
