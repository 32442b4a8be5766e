"""Programs compiled in a child process, held and read by descriptor in ktop's own."""

from __future__ import annotations

import ctypes as ct
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import root_only

from ktop.collectors.bpfload import kernel_headers
from ktop.collectors.bpfsys import BpfMap, RowLayout, bpf, ctype_of
from ktop.collectors.loader import CompileFailed, Compiler

# Descriptions as bcc gives them for ktop's own maps.
LOCK_STACK_WAIT = json.loads(
    '["lock_stack_wait", [["wait",["lock_wait", [["count","unsigned long long"],'
    ' ["total_ns","unsigned long long"], ["max_ns","unsigned long long"],'
    ' ["min_ns","unsigned long long"] ], "struct_packed"]],'
    ' ["hist","unsigned long long", [40]] ], "struct_packed"]'
)
CPU_KEY = json.loads(
    '["cpu_key", [["pid","unsigned int"], ["kstack","int"], ["ustack","int"],'
    ' ["pad","unsigned int"], ["comm","char", [16]] ], "struct_packed"]'
)


def test_map_types_are_built_from_bccs_descriptions():
    key = ctype_of(CPU_KEY)(pid=7, kstack=-14, comm=b"dd")
    assert ct.sizeof(key) == 32
    assert (key.pid, key.kstack, key.comm) == (7, -14, b"dd")
    wait = ctype_of(LOCK_STACK_WAIT)()
    assert ct.sizeof(wait) == 352  # as the kernel map says: 4 counters and 40 slots
    wait.wait.min_ns = 2**64 - 1
    wait.hist[39] = 5
    assert (wait.wait.min_ns, wait.hist[39]) == (2**64 - 1, 5)
    assert ctype_of("unsigned char") is ct.c_ubyte


def test_rows_read_by_struct_hold_what_ctypes_reads_field_by_field():
    # Padding (an unpacked u32 before a u64), signed fields, a char array with bytes past
    # its NUL, nested structs and number arrays: each field in its place.
    desc = ["row", [["pid", "unsigned int"], ["cgroup", "unsigned long long"],
                    ["kstack", "long long"], ["wait", LOCK_STACK_WAIT], ["comm", "char", [16]],
                    ["state", "unsigned char"]], "struct"]
    ctype = ctype_of(desc)
    rows = []
    for n in range(3):
        row = ctype(pid=n + 1, cgroup=2**64 - 1 - n, kstack=-14 - n, comm=b"dd\0zz" + bytes([n]),
                    state=n)
        row.wait.wait.max_ns, row.wait.hist[0], row.wait.hist[39] = n, 2**63 + n, 7 * n
        rows.append(row)
    layout = RowLayout(ctype)
    index = layout.index
    read = list(layout.rows(b"".join(bytes(row) for row in rows)))
    assert len(read) == 3
    for row, flat in zip(rows, read):
        assert (flat[index["pid"]], flat[index["cgroup"]], flat[index["kstack"]],
                flat[index["state"]]) == (row.pid, row.cgroup, row.kstack, row.state)
        assert flat[index["comm"]].split(b"\0")[0] == row.comm == b"dd"
        assert flat[index["wait.wait.max_ns"]] == row.wait.wait.max_ns
        assert flat[index["wait.hist"]] == tuple(row.wait.hist)


def test_a_type_a_row_cannot_hold_is_refused_by_name():
    union = ctype_of(["u", [["a", "unsigned int"], ["b", "unsigned long long"]], "union"])
    outer = type("outer", (ct.Structure,), {"_fields_": [("u", union)]})
    with pytest.raises(ValueError, match="outer.u: a union"):
        RowLayout(outer)


def test_a_description_that_disagrees_with_the_map_size_is_refused():
    with pytest.raises(ValueError, match="key type is 32 bytes, the map's 40"):
        BpfMap("counts", -1, 1, CPU_KEY, "unsigned long long", 40, 8, 16)


def test_an_unknown_c_type_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown C type 'float128'"):
        ctype_of(["k", [["x", "float128"]], "struct"])


class _MapCreate(ct.Structure):
    _fields_ = [("map_type", ct.c_uint32), ("key_size", ct.c_uint32),
                ("value_size", ct.c_uint32), ("max_entries", ct.c_uint32)]


@root_only
def test_a_hash_map_drains_whole_across_many_batches():
    """More entries than one batch holds: every one comes back once, and the map is empty."""
    entries = 5000
    fd = bpf(0, _MapCreate(map_type=1, key_size=4, value_size=8, max_entries=8192))  # HASH
    table = BpfMap("t", fd, 1, "unsigned int", "unsigned long long", 4, 8, 8192)
    try:
        for i in range(entries):
            table[i] = i * 3
        assert table[4999] == 14997
        drained = {key.value: value for key, value in table.drain()}
        assert drained == {i: i * 3 for i in range(entries)}
        assert list(table.keys()) == []
        with pytest.raises(KeyError):
            table[1]
    finally:
        import os  # noqa: PLC0415

        os.close(fd)


@root_only
def test_drains_of_every_size_leave_nothing_for_the_collector():
    """A map drained every refresh, holding a different number of entries each time: the
    drains leave no garbage in reference cycles (buffers typed per size did: a ctypes type
    each, dropped after the drain, that waited for the collector with its descriptors)."""
    import gc  # noqa: PLC0415

    fd = bpf(0, _MapCreate(map_type=1, key_size=4, value_size=8, max_entries=8192))  # HASH
    table = BpfMap("t", fd, 1, "unsigned int", "unsigned long long", 4, 8, 8192)
    gc.collect()  # other tests' garbage, freed
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for entries in (100, 700, 2000, 300, 1500):
            for i in range(entries):
                table[i] = i
            assert len(table.drain_raw()) == entries
        gc.collect()
        left = [type(thing).__name__ for thing in gc.garbage  # (not other threads' garbage)
                if isinstance(thing, type) or type(thing).__module__ == "_ctypes"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        os.close(fd)
    assert left == []


@root_only
def test_a_kernel_without_batch_commands_drains_key_by_key(monkeypatch):
    """Before Linux 5.6 (or for a map type without them) the batch commands fail with
    EINVAL: the same entries come back, decoded or as bytes, and the map is emptied."""
    import errno  # noqa: PLC0415
    import os  # noqa: PLC0415

    fd = bpf(0, _MapCreate(map_type=1, key_size=4, value_size=8, max_entries=64))  # HASH
    table = BpfMap("t", fd, 1, "unsigned int", "unsigned long long", 4, 8, 64)

    def no_batch(cmd):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(table, "_batch", no_batch)
    try:
        for i in range(10):
            table[i] = i * 3
        assert {key.value: value for key, value in table.snapshot()} == {i: i * 3 for i in range(10)}
        raw = table.drain_raw()
        assert sorted((int.from_bytes(k, sys.byteorder), int.from_bytes(v, sys.byteorder))
                      for k, v in raw) == [(i, i * 3) for i in range(10)]
        assert list(table.keys()) == []
        table[1] = 5
        assert [(key.value, value) for key, value in table.drain()] == [(1, 5)]
        assert list(table.keys()) == []
    finally:
        os.close(fd)


BROKEN = "int f(void) { return undeclared_thing; }\n"


def headers_environment() -> dict[str, str]:
    source = kernel_headers().source
    return {"BCC_KERNEL_SOURCE": source} if source else {}


@root_only
def test_a_compile_error_comes_back_as_one_line_naming_it(tmp_path):
    (tmp_path / "broken.bpf.c").write_text(BROKEN)
    with Compiler() as compiler, pytest.raises(CompileFailed) as error:
        compiler.load("broken.bpf.c", str(tmp_path), [], {}, headers_environment())
    message = str(error.value)
    assert message.startswith("broken.bpf.c failed to compile:")
    assert "undeclared_thing" in message and "\n" not in message


@root_only
def test_killing_the_compiler_mid_compile_fails_the_load_and_nothing_stays(tmp_path):
    (tmp_path / "slow.bpf.c").write_text("#include <linux/sched.h>\n" + BROKEN)
    compiler = Compiler()
    threading.Timer(0.3, compiler.kill).start()
    started = time.monotonic()
    with pytest.raises(CompileFailed, match="was killed by signal 9"):
        compiler.load("slow.bpf.c", str(tmp_path), [], {}, headers_environment())
    compiler.close()
    assert time.monotonic() - started < 2


def test_a_compiler_killed_between_compiles_says_so_and_the_fix(tmp_path):
    """A compiler killed while idle (the out-of-memory killer's choice: the biggest process)
    answered the next compile with "[Errno 32] Broken pipe"."""
    compiler = Compiler()
    compiler.kill()
    compiler._child.wait()
    with pytest.raises(CompileFailed) as error:
        compiler.load("any.bpf.c", str(tmp_path), [], {}, {})
    compiler.close()
    message = str(error.value)
    assert "the BPF compiler process was killed by signal 9 (out of memory" in message
    assert "start ktop again" in message and "Broken pipe" not in message


KTOP_PROCESS = """
import json, sys, time
from ktop.engine import LiveSource, Options
source = LiveSource(Options())
source.start()
time.sleep(1)
snapshot = source.collect()
with open("/proc/self/maps") as f:
    maps = f.read()
print(json.dumps({
    "unavailable": dict(snapshot.unavailable),
    "functions": len(snapshot.cpu.functions) if snapshot.cpu else 0,
    "compiler_mapped": [n for n in ("libLLVM", "libclang", "libbcc") if n in maps],
    "bcc_imported": "bcc" in sys.modules,
}))
source.close()
"""


@root_only
@pytest.mark.live
def test_ktops_own_process_never_loads_the_compiler():
    """The point of the child: bcc, clang and LLVM's 30 MiB never enter ktop's memory."""
    result = subprocess.run([sys.executable, "-c", KTOP_PROCESS], capture_output=True,
                            text=True, timeout=60, check=True)
    seen = json.loads(result.stdout)
    assert seen["unavailable"] == {}
    assert seen["functions"] > 0
    assert seen["compiler_mapped"] == []
    assert seen["bcc_imported"] is False


def test_kill_9_during_start_up_leaves_no_headers_tree_and_the_next_reuses_it(tmp_path):
    """Each start merged the headers into a new /tmp/ktop-headers-XXXX (63 entries), which
    a kill -9 left behind: a dozen sat on a machine after a day."""
    import glob
    import signal

    from ktop.collectors.headers import CACHE_DIR, find_kernel_headers

    before = set(glob.glob("/tmp/ktop-headers-*"))
    cached = find_kernel_headers().source  # built now if this is the first ktop here
    if cached is None:
        pytest.skip("this kernel has its own headers at /lib/modules/$(uname -r)/build")
    inode = os.lstat(cached).st_ino
    for attempt in range(2):
        # An empty cache of compiled programs: this ktop compiles (a warm one loads from it).
        programs = tmp_path / f"programs-{attempt}"
        programs.mkdir(mode=0o700)
        process = subprocess.Popen([sys.executable, "-m", "ktop", "--record",
                                    str(tmp_path / "r.krec")], stderr=subprocess.DEVNULL,
                                   start_new_session=True,
                                   env={**os.environ, "KTOP_BPF_CACHE": str(programs)})
        deadline = time.monotonic() + 60
        # Until it compiles (its compiler child runs): the headers were looked for.
        while time.monotonic() < deadline and not any(
                "ktop.collectors.loader" in child_cmdline(pid)
                for pid in children(process.pid)):
            time.sleep(0.05)
        assert time.monotonic() < deadline, "ktop never started its compiler"
        time.sleep(1.0)  # its first compile under way: the headers were found
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert set(glob.glob("/tmp/ktop-headers-*")) <= before
    assert not [n for n in os.listdir(CACHE_DIR) if n.startswith(".building-")]
    again = find_kernel_headers().source
    assert again == cached and os.lstat(again).st_ino == inode  # the same tree, reused
    assert kernel_headers().source == cached


def test_without_root_the_headers_cache_is_not_touched(tmp_path):
    """A ktop without root still asks for the headers (the header line names them): it
    tried to build in root's cache and its loading thread died with PermissionError."""
    from conftest import as_nobody

    from ktop.collectors.headers import CACHE_DIR, find_kernel_headers

    if find_kernel_headers().source is None:  # root built the cache, if this kernel needs one
        pytest.skip("this kernel has its own headers at /lib/modules/$(uname -r)/build")
    os.chmod(tmp_path, 0o755)
    code = ("from ktop.collectors.headers import find_kernel_headers; "
            "print(find_kernel_headers().source)")
    result = subprocess.run([*as_nobody(str(tmp_path)), sys.executable, "-c", code],
                            capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert not result.stdout.startswith(CACHE_DIR)  # a private tree of its own


def children(pid: int) -> list[int]:
    """Of every thread (the compiler is started by the loading one)."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def child_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0")]
    except OSError:
        return []
