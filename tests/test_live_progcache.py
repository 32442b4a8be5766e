"""Programs compiled once, then loaded from the cache with plain bpf() calls: no compiler
runs, and the programs count what the compiled ones count."""

from __future__ import annotations

import os
import time

import pytest
from conftest import root_only

from ktop.collectors import bpfload, loader, progcache
from ktop.collectors.bpfsys import attach_sampling, program_info

# A program of the kinds ktop's panes use: a raw tracepoint bcc attaches itself
# (RAW_TRACEPOINT_PROBE, as blockio.bpf.c), a perf event program ktop attaches (as cpu.bpf.c),
# a hash, an array, a per-CPU array, a stack map and a task storage (typed by BTF).
TINY = """
#include <uapi/linux/bpf_perf_event.h>
BPF_ARRAY(switches, u64, 1);
BPF_HASH(samples, u32, u64, 1024);
BPF_PERCPU_ARRAY(per_cpu, u64, 1);
BPF_STACK_TRACE(stacks, 64);

/* Task storage: a map the kernel makes only with its BTF key and value types. */
BPF_TASK_STORAGE(seen, u64);

RAW_TRACEPOINT_PROBE(sched_switch)
{
    u32 zero = 0;
    u64 *count = switches.lookup(&zero);
    u64 *before = seen.task_storage_get(bpf_get_current_task_btf(), 0,
                                      BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (count && before && !(*before)++)
        __sync_fetch_and_add(count, SCALE);
    return 0;
}

int on_tick(struct bpf_perf_event_data *ctx)
{
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    u32 zero = 0;
    samples.increment(pid);
    stacks.get_stackid(ctx, 0);
    u64 *mine = per_cpu.lookup(&zero);
    if (mine)
        (*mine)++;
    return 0;
}
"""


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """bpf/ with the tiny program, and an empty private cache directory."""
    source_dir = tmp_path / "bpf"
    source_dir.mkdir()
    (source_dir / "tiny.bpf.c").write_text(TINY)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(bpfload, "bpf_source_dir", lambda: str(source_dir))
    monkeypatch.setenv(progcache.ENVIRONMENT_DIR, str(cache))
    bpfload.take_notes()
    return source_dir, cache


def load(*cflags: str):
    return bpfload.load_program("tiny.bpf.c", ["-DSCALE=1", *cflags], {"on_tick": "PERF_EVENT"})


def counts_live(program) -> None:
    """The truth: the raw tracepoint bcc would attach fires, the perf event program samples."""
    program.keep(*attach_sampling(program.programs["on_tick"], 199))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if (program.maps["switches"][0] > 0 and program.maps["samples"].items()
                and sum(program.maps["per_cpu"][0]) > 0):
            return
        time.sleep(0.05)
    raise AssertionError("the programs counted nothing in 5 s")


def entries(cache) -> list[str]:
    return sorted(n for n in os.listdir(cache) if n.startswith("prog-"))


@root_only
def test_a_second_load_comes_from_the_cache_and_no_compiler_runs(sources, monkeypatch):
    _, cache = sources
    before = loader.started
    first = load()
    try:
        assert loader.started == before + 1
        counts_live(first)
    finally:
        first.close()
    [entry] = entries(cache)
    info = os.stat(os.path.join(cache, entry))
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o600)

    def no_compiler(*args, **kwargs):
        raise AssertionError("a compiler process was started")

    monkeypatch.setattr(loader, "Compiler", no_compiler)
    second = load()
    try:
        assert loader.started == before + 1
        assert set(second.programs) == {"on_tick", "raw_tracepoint__sched_switch"}
        assert len(second.links) == 1  # the raw tracepoint, attached as bcc did
        info = program_info(second.programs["on_tick"])
        assert info is not None and info.name == b"on_tick" and info.type == 7
        counts_live(second)
    finally:
        second.close()
    assert bpfload.take_notes() == []


def compiles(monkeypatch) -> list[str]:
    """The programs compiled from here on, by file name."""
    compiled: list[str] = []
    real = loader.load_in_child

    def counted(filename, *args, **kwargs):
        compiled.append(filename)
        return real(filename, *args, **kwargs)

    monkeypatch.setattr(bpfload, "load_in_child", counted)
    return compiled


@root_only
@pytest.mark.parametrize("change, stale", [
    ("source", True), ("header", True), ("kernel release", True), ("option", False)])
def test_a_changed_source_kernel_or_option_compiles_again(sources, monkeypatch, change, stale):
    source_dir, cache = sources
    load().close()
    compiled = compiles(monkeypatch)
    load().close()
    assert compiled == [], "the same inputs came from the cache"
    cflags: tuple[str, ...] = ()
    if change == "source":
        (source_dir / "tiny.bpf.c").write_text(TINY.replace("(*mine)++", "(*mine) += 2"))
    elif change == "header":  # any file beside the program may be included
        (source_dir / "tiny.h").write_text("#define UNUSED 1\n")
    elif change == "kernel release":
        real = progcache.kernel_identity()
        monkeypatch.setattr(progcache, "kernel_identity", lambda: ("6.99.0", *real[1:]))
    else:
        cflags = ("-DUNUSED=2",)
    changed = load(*cflags)
    try:
        assert compiled == ["tiny.bpf.c"]
        counts_live(changed)
    finally:
        changed.close()
    notes = bpfload.take_notes()
    if stale:  # the old entry was for this program and options: replaced, and said so
        assert len(notes) == 1 and "stale" in notes[0] and "replaced" in notes[0]
        assert len(entries(cache)) == 2  # the old one kept too, for a kernel booted back
    else:  # another set of options: an entry beside the first
        assert notes == [] and len(entries(cache)) == 2
    load(*cflags).close()
    assert compiled == ["tiny.bpf.c"], "the new entry serves the next start"


@root_only
@pytest.mark.parametrize("damage, why", [
    ("planted by another user", "foreign: owned by uid 65534"),
    ("truncated", "corrupt: truncated"),
    ("a wrong hash", "corrupt: its checksum does not match"),
])
def test_an_untrustworthy_entry_is_compiled_again_replaced_and_said_once(sources, monkeypatch,
                                                                         damage, why):
    _, cache = sources
    load().close()
    [entry] = entries(cache)
    path = os.path.join(cache, entry)
    if damage == "planted by another user":
        os.chown(path, 65534, 65534)
    elif damage == "truncated":
        os.truncate(path, os.path.getsize(path) // 2)
    else:
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[len(data) // 2] ^= 0x01
            f.seek(0)
            f.write(data)
    compiled = compiles(monkeypatch)
    program = load()
    try:
        counts_live(program)
    finally:
        program.close()
    assert compiled == ["tiny.bpf.c"]
    notes = bpfload.take_notes()
    assert len(notes) == 1 and why in notes[0] and "replaced" in notes[0]
    info = os.lstat(path)
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o600)
    load().close()
    assert compiled == ["tiny.bpf.c"] and bpfload.take_notes() == []


@root_only
def test_a_cached_program_the_kernel_refuses_is_compiled_again(sources, monkeypatch):
    """A whole entry whose instructions the verifier rejects (a root-written file, or a kernel
    change the key missed) costs a compile, not the pane."""
    _, cache = sources
    load().close()
    [entry] = entries(cache)
    source = bpfload.kernel_headers().source
    wanted = progcache.Request("tiny.bpf.c", bpfload.bpf_source_dir(), ("-DSCALE=1",),
                               {"on_tick": "PERF_EVENT"},
                               {"BCC_KERNEL_SOURCE": source} if source else {})
    key = progcache.entry_key(wanted, source)
    with progcache.ProgramCache.open(str(cache)) as opened:
        description, problem = opened.lookup(wanted, key)
    assert problem == "" and description is not None
    program = description["programs"][0]
    program["insns"] = program["insns"][:-16]  # its exit gone: the verifier refuses it
    with open(os.path.join(cache, entry), "wb") as f:
        f.write(progcache.encode(key, {k: v for k, v in description.items()
                                       if k not in ("format", "key")}))
    compiled = compiles(monkeypatch)
    again = load()
    again.close()
    assert compiled == ["tiny.bpf.c"]
    [note] = bpfload.take_notes()
    assert "did not load: the kernel rejected it" in note
