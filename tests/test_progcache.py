"""The cache of compiled programs, without the kernel: the entry format, its checks, the map
references a later load patches."""

from __future__ import annotations

import os
import struct
import time

import pytest
from conftest import root_only

from ktop.collectors import progcache
from ktop.collectors.compiler import NotKeepable, relocations
from ktop.collectors.progcache import ProgramCache, Request, decode, encode


def insn(op: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", op, dst | src << 4, off, imm)


LD_MAP = 0x18
EXIT, MOV_IMM, CALL = 0x95, 0xB7, 0x85


def program_with_maps(fds: list[int]) -> bytes:
    code = b""
    for fd in fds:
        code += insn(LD_MAP, dst=1, src=1, imm=fd) + insn(0)
        code += insn(CALL, imm=1)  # bpf_map_lookup_elem: a helper, not a BPF function
    return code + insn(MOV_IMM, imm=0) + insn(EXIT)


def test_map_references_are_recorded_by_name_and_their_descriptors_cleared():
    insns, found = relocations(program_with_maps([7, 9, 7]), {7: "counts", 9: "stacks"})
    assert found == [(0, "counts"), (3, "stacks"), (6, "counts")]
    for index, _ in found:
        assert insns[index * 8 + 4:index * 8 + 8] == bytes(4)  # a later load writes its own
        assert insns[index * 8 + 1] >> 4 == 1  # still a map reference
    assert len(insns) == len(program_with_maps([7, 9, 7]))


@pytest.mark.parametrize("code, why", [
    (insn(LD_MAP, src=1, imm=42) + insn(0), "descriptor 42"),
    (insn(LD_MAP, src=2, imm=7) + insn(0), "pseudo value of kind 2"),  # global data
    (insn(CALL, src=1, imm=3), "calls a BPF function"),
    (insn(CALL, src=2, imm=3), "calls a BPF function or a kernel function"),
])
def test_what_instructions_alone_cannot_load_again_is_refused(code, why):
    with pytest.raises(NotKeepable, match=why):
        relocations(code + insn(EXIT), {7: "counts"})


def description(insns: bytes | None = None) -> dict:
    insns = insns or relocations(program_with_maps([5]), {5: "counts"})[0]
    return {
        "license": "GPL", "kern_version": 0, "btf": "",
        "maps": [{"name": "counts", "kernel_name": "counts", "type": 1, "key_size": 4,
                  "value_size": 8, "max_entries": 16, "flags": 0, "key": "unsigned int",
                  "value": "unsigned long long", "btf_key": 0, "btf_value": 0}],
        "programs": [{"name": "on_tick", "kernel_name": "on_tick", "type": 7,
                      "insns": insns.hex(), "maps": [[0, "counts"]], "raw_tracepoint": ""}],
    }


def test_an_entry_reads_back_as_written():
    data = encode("k" * 64, description())
    assert decode(data, "k" * 64)["programs"][0]["maps"] == [[0, "counts"]]


@pytest.mark.parametrize("damage, why", [
    (lambda data: data[:-10], "truncated"),
    (lambda data: data[:len(data) // 2], "truncated"),
    (lambda data: data.replace(b'"GPL"', b'"BSD"'), "checksum"),
    (lambda data: b"", "not a ktop program entry"),
    (lambda data: b"#!/bin/sh\nrm -rf /\n", "not a ktop program entry"),
])
def test_a_damaged_entry_is_refused_naming_the_damage(damage, why):
    with pytest.raises(ValueError, match=why):
        decode(damage(encode("k" * 64, description())), "k" * 64)


def test_an_entry_for_other_inputs_is_refused():
    with pytest.raises(ValueError, match="other inputs"):
        decode(encode("k" * 64, description()), "j" * 64)


@pytest.mark.parametrize("change, why", [
    (lambda d: d["programs"][0].update(maps=[[1, "counts"]]), "map reference"),
    (lambda d: d["programs"][0].update(maps=[[0, "elsewhere"]]), "map reference"),
    (lambda d: d["programs"][0].update(insns="abc"), "instructions"),
    (lambda d: d["maps"][0].update(max_entries=-1), "map"),
    (lambda d: d.update(programs=[]), "lists"),
    (lambda d: d.update(btf="not hex"), "btf"),
])
def test_a_well_sealed_entry_of_the_wrong_shape_is_refused(change, why):
    """A checksum proves the bytes whole, not the writer right: what a load indexes with is
    checked before it is used."""
    broken = description()
    change(broken)
    with pytest.raises(ValueError, match=f"malformed: {why}"):
        decode(encode("k" * 64, broken), "k" * 64)


def request(source_dir: str, *cflags: str) -> Request:
    return Request("tiny.bpf.c", source_dir, cflags, {"on_tick": "PERF_EVENT"}, {})


def test_the_key_follows_the_source_the_options_and_the_kernel(tmp_path, monkeypatch):
    (tmp_path / "tiny.bpf.c").write_text("int x;\n")
    (tmp_path / "shared.h").write_text("#define Y 1\n")
    first = progcache.entry_key(request(str(tmp_path)), None)
    assert progcache.entry_key(request(str(tmp_path)), None) == first
    assert progcache.entry_key(request(str(tmp_path), "-DX=2"), None) != first
    (tmp_path / "shared.h").write_text("#define Y 2\n")  # an included header changed
    second = progcache.entry_key(request(str(tmp_path)), None)
    assert second != first
    monkeypatch.setattr(progcache, "kernel_identity", lambda: ("6.99.0", "other build", "btf"))
    assert progcache.entry_key(request(str(tmp_path)), None) != second
    # Options name the entry, the rest only its key: a stale entry is found by its name.
    assert request(str(tmp_path)).prefix() != request(str(tmp_path), "-DX=2").prefix()


@pytest.fixture
def cache(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    with ProgramCache.open(str(directory)) as opened:
        yield opened


@root_only
def test_a_stored_entry_is_roots_alone_and_found_again(cache, tmp_path):
    wanted = request(str(tmp_path))
    assert cache.lookup(wanted, "k" * 64) == (None, "")
    assert cache.store(wanted, "k" * 64, description())
    path = os.path.join(cache.directory, progcache.entry_name(wanted, "k" * 64))
    info = os.lstat(path)
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o600)
    found, problem = cache.lookup(wanted, "k" * 64)
    assert problem == "" and found["programs"][0]["name"] == "on_tick"
    assert [n for n in os.listdir(cache.directory) if n.startswith(".writing")] == []


def plant(cache: ProgramCache, name: str, how: str) -> None:
    path = os.path.join(cache.directory, name)
    if how == "another user's":
        os.chown(path, 65534, 65534)
    elif how == "readable by all":
        os.chmod(path, 0o644)
    elif how == "truncated":
        os.truncate(path, os.path.getsize(path) - 100)
    elif how == "a wrong hash":
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[-5] ^= 1
            f.seek(0)
            f.write(data)
    elif how == "a symlink":
        os.rename(path, path + ".real")
        os.symlink(path + ".real", path)
    elif how == "a hard link":
        os.link(path, path + ".other")
    elif how == "a directory":
        os.unlink(path)
        os.mkdir(path, 0o700)


@root_only
@pytest.mark.parametrize("how, why", [
    ("another user's", "foreign: owned by uid 65534"),
    ("readable by all", "foreign: mode 0644"),
    ("truncated", "corrupt: truncated"),
    ("a wrong hash", "corrupt: its checksum does not match"),
    ("a symlink", "foreign: a symlink"),
    ("a hard link", "foreign: linked elsewhere"),
    ("a directory", "foreign: not a regular file"),
])
def test_an_entry_that_cannot_be_trusted_is_not_used_and_storing_replaces_it(cache, tmp_path,
                                                                              how, why):
    wanted = request(str(tmp_path))
    cache.store(wanted, "k" * 64, description())
    name = progcache.entry_name(wanted, "k" * 64)
    plant(cache, name, how)
    found, problem = cache.lookup(wanted, "k" * 64)
    assert found is None and problem.startswith(why)
    assert cache.store(wanted, "k" * 64, description())
    found, problem = cache.lookup(wanted, "k" * 64)
    assert problem == "" and found is not None


@root_only
def test_entries_of_the_same_program_for_other_builds_are_stale_and_the_oldest_go(cache,
                                                                                 tmp_path):
    wanted = request(str(tmp_path))
    keys = [letter * 64 for letter in "abcdefghij"]
    cache.store(wanted, keys[0], description())
    found, problem = cache.lookup(wanted, keys[1])
    assert found is None and problem.startswith("stale")
    for key in keys[1:]:
        time.sleep(0.01)  # mtimes apart
        cache.store(wanted, key, description())
    kept = sorted(progcache.entry_name(wanted, key) for key in keys[-progcache.KEPT:])
    assert sorted(os.listdir(cache.directory)) == kept
    assert cache.lookup(wanted, keys[-2])[1] == ""  # two checkouts: each finds its own
    other_options = request(str(tmp_path), "-DX=2")
    assert cache.lookup(other_options, keys[0]) == (None, "")  # not stale: never made


@root_only
def test_a_cache_directory_others_may_use_is_not_used(tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o700)
    os.chmod(directory, 0o755)
    assert ProgramCache.open(str(directory)) is None
    os.chmod(directory, 0o700)
    os.chown(directory, 65534, 65534)
    assert ProgramCache.open(str(directory)) is None
    link = tmp_path / "link"
    os.chown(directory, 0, 0)
    link.symlink_to(directory)
    assert ProgramCache.open(str(link)) is None
