"""cgroup v2 paths, names and the --cgroup filter, from text and a fake hierarchy (no root)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace

import pytest
from conftest import SCREEN_SIZE, wait_for_data

from ktop.cgroups import (
    CgroupError,
    CgroupNames,
    cgroup2_mount,
    in_subtree,
    parse_proc_cgroup,
    resolve_filter,
    short_name,
)
from ktop.cli import main
from ktop.engine import RecordedSource
from ktop.panes.blockio.widget import writeback_share
from ktop.panes.processes.collector import parse_io
from ktop.panes.processes.widget import by_cgroup
from ktop.ui.app import build_app

HEX = "3f2a9c1b0d4e" + "a" * 52
V1_ONLY = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"


def mountinfo(tmp_path, mount) -> str:
    path = tmp_path / "mountinfo"
    path.write_text(V1_ONLY + f"41 31 0:38 / {mount} rw,relatime - cgroup2 cgroup2 rw\n")
    return str(path)


@pytest.mark.parametrize(("path", "name"), [
    (f"/system.slice/docker-{HEX}.scope", "docker:3f2a9c1b0d4e"),
    (f"/docker/{HEX}", "docker:3f2a9c1b0d4e"),
    (f"/machine.slice/libpod-{HEX}.scope", "podman:3f2a9c1b0d4e"),
    (f"/kubepods.slice/kubepods-pod1.slice/cri-containerd-{HEX}.scope", "containerd:3f2a9c1b0d4e"),
    (f"/kubepods/burstable/pod1/{HEX}", "k8s:3f2a9c1b0d4e"),
    ("/system.slice/nginx.service", "nginx.service"),
    ("/user.slice/user-1000.slice/session-3.scope", "session-3.scope"),
    ("/ktop-test/inner", "inner"),
    ("/", "/"),
])
def test_a_cgroup_is_named_as_its_runtime_or_unit(path, name):
    assert short_name(path) == name


def test_the_v2_line_of_proc_pid_cgroup_on_a_hybrid_machine():
    assert parse_proc_cgroup(b"4:memory:/x\n1:cpu:/\n0::/ktop-test\n") == "/ktop-test"
    assert parse_proc_cgroup(b"0::/\n") == "/"
    assert parse_proc_cgroup(b"4:memory:/x\n1:cpu:/\n") == ""  # v1 only


def test_a_subtree_holds_its_root_and_children_only():
    assert in_subtree("/a", "/a") and in_subtree("/a/b", "/a")
    assert not in_subtree("/ab", "/a") and not in_subtree("", "/a")
    assert in_subtree("/anything", "/")


def test_the_v2_mount_is_found_on_a_hybrid_machine(tmp_path):
    assert cgroup2_mount(mountinfo(tmp_path, "/sys/fs/cgroup/unified")) == "/sys/fs/cgroup/unified"
    v1 = tmp_path / "v1"
    v1.write_text(V1_ONLY)
    assert cgroup2_mount(str(v1)) is None


def test_cgroup_filter_paths_relative_or_full(tmp_path):
    (tmp_path / "cg" / "web.slice" / "nginx.service").mkdir(parents=True)
    info = mountinfo(tmp_path, tmp_path / "cg")
    assert resolve_filter("/web.slice", info) == "/web.slice"
    assert resolve_filter("web.slice/nginx.service/", info) == "/web.slice/nginx.service"
    assert resolve_filter(str(tmp_path / "cg" / "web.slice"), info) == "/web.slice"


def test_cgroup_filter_takes_the_short_name_ktop_shows(tmp_path):
    container = tmp_path / "cg" / "machine.slice" / f"libpod-{HEX}.scope"
    container.mkdir(parents=True)
    (tmp_path / "cg" / "system.slice" / "nginx.service").mkdir(parents=True)
    info = mountinfo(tmp_path, tmp_path / "cg")
    assert resolve_filter("podman:3f2a9c1b0d4e", info) == f"/machine.slice/libpod-{HEX}.scope"
    assert resolve_filter("nginx.service", info) == "/system.slice/nginx.service"
    assert resolve_filter(str(container), info) == f"/machine.slice/libpod-{HEX}.scope"


def test_a_short_name_two_cgroups_share_asks_for_a_path(tmp_path):
    (tmp_path / "cg" / "a" / "x.service").mkdir(parents=True)
    (tmp_path / "cg" / "b" / "x.service").mkdir(parents=True)
    with pytest.raises(CgroupError, match=r"^2 cgroups are named x.service: give one by its "
                                          r"path, /a/x.service or /b/x.service$"):
        resolve_filter("x.service", mountinfo(tmp_path, tmp_path / "cg"))


def test_a_cgroup_that_does_not_exist_is_one_line_with_the_fix(tmp_path):
    (tmp_path / "cg").mkdir()
    with pytest.raises(CgroupError, match=r"^no cgroup /nope under .*: list them with `find"):
        resolve_filter("/nope", mountinfo(tmp_path, tmp_path / "cg"))


def test_cgroup_v1_only_is_one_line_with_the_fix(tmp_path):
    v1 = tmp_path / "v1"
    v1.write_text(V1_ONLY)
    with pytest.raises(CgroupError, match="cgroup v1 only: --cgroup needs the unified hierarchy"):
        resolve_filter("/x", str(v1))


def test_the_cli_says_why_in_one_line_and_exits_1(capsys):
    assert main(["--cgroup", "/ktop-no-such-cgroup-\x1b[2J", "--snapshot", "/tmp/x.txt"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ktop: no cgroup /ktop-no-such-cgroup-\\x1b[2J")


def test_ids_are_named_by_the_directory_inode_and_looked_up_again_when_unknown(tmp_path):
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    names = CgroupNames(mount=str(root))
    assert names.name(os.stat(root / "a" / "b").st_ino) == "/a/b"
    assert names.name(os.stat(root).st_ino) == "/"
    assert names.name(0) == ""
    (root / "c").mkdir()
    names._scanned = float("-inf")  # a second has passed
    assert names.name(os.stat(root / "c").st_ino) == "/c"
    assert names.name(1) == "[cgroup 1]"  # unknown, and no second rescan within the second
    assert names.scans == 2
    # Whether a name is the path (a row of the CPU sampler keeps it) or a stand-in (not kept).
    assert names.knows(os.stat(root / "c").st_ino) and names.knows(0)
    assert not names.knows(1)


def test_proc_pid_io_gives_the_bytes_iotop_shows():
    text = (b"rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n"
            b"write_bytes: 67108864\ncancelled_write_bytes: 0\n")
    assert parse_io(text) == (4096, 67108864)
    assert parse_io(b"rchar: 1\n") is None


def _with_cgroups(snapshot):
    p = snapshot.processes
    processes = (
        replace(p[0], cgroup="/ktop-test", disk_write_bps=32.0 * 2**20, disk_read_bps=0.0),
        replace(p[1], cgroup="/ktop-test/inner", disk_write_bps=2.0 * 2**20, disk_read_bps=None),
        *(replace(q, cgroup="/system.slice/x.service") for q in p[2:]),
    )
    return replace(snapshot, processes=processes)


def test_processes_grouped_per_cgroup_sum_their_rates(recorded_snapshot):
    groups = {g.cgroup: g for g in by_cgroup(_with_cgroups(recorded_snapshot).processes)}
    assert groups["/ktop-test"].disk_write_bps == 32 * 2**20
    assert groups["/ktop-test/inner"].disk_read_bps is None
    assert groups["/system.slice/x.service"].tasks == len(recorded_snapshot.processes) - 2


def test_writeback_is_named_when_kworkers_sent_most_bytes(recorded_snapshot):
    block = recorded_snapshot.blockio
    first = block.processes[0]
    kworker = replace(first, comm="kworker/u8:2", rw="W", bytes=60 << 20, pid=35)
    writer = replace(first, comm="dd", rw="W", bytes=4 << 20)
    assert writeback_share(replace(block, processes=(kworker, writer))) == pytest.approx(60 / 64)
    assert writeback_share(replace(block, processes=(replace(kworker, bytes=1 << 20), writer))) is None


def test_shift_g_filters_every_pane_to_the_cgroup_and_v_groups_by_cgroup(recorded_snapshot):
    asyncio.run(_g_filters(recorded_snapshot))


async def _g_filters(recorded_snapshot):
    snapshot = _with_cgroups(recorded_snapshot)
    app = build_app(RecordedSource([snapshot]), interval_s=0.2)
    async with app.run_test(size=SCREEN_SIZE) as pilot:
        await wait_for_data(pilot)
        await pilot.press("4", "G")
        await pilot.pause(0.1)
        table = app.main_screen.pane("processes").table
        assert {table.get_row_at(i)[0].text for i in range(table.row_count)} == {
            str(snapshot.processes[0].pid), str(snapshot.processes[1].pid)}
        assert "cgroup /ktop-test only (Esc: all)" in app.main_screen.note
        await pilot.press("v")
        await pilot.pause(0.1)
        assert table is not app.main_screen.pane("processes").table
        names = [app.main_screen.pane("processes").table.get_row_at(i)[0].text
                 for i in range(app.main_screen.pane("processes").table.row_count)]
        assert sorted(names) == ["inner", "ktop-test"]
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.main_screen.display_settings.cgroup is None and "cgroup" not in app.main_screen.note


def test_a_cgroup_removed_while_shown_says_so_in_the_header(recorded_snapshot, monkeypatch):
    monkeypatch.setattr("ktop.cgroups.cgroup_exists", lambda path: False)
    asyncio.run(_removed(recorded_snapshot))


async def _removed(recorded_snapshot):
    source = RecordedSource([_with_cgroups(recorded_snapshot)])
    source.live = True  # as if collected here: the app checks the cgroup still exists
    app = build_app(source, interval_s=0.2, cgroup="/ktop-test")
    async with app.run_test(size=SCREEN_SIZE) as pilot:
        await wait_for_data(pilot)
        assert "cgroup /ktop-test removed (Esc: all)" in app.main_screen.note
        assert app.main_screen.display_settings.cgroup_gone
        await pilot.press("3")
        await pilot.pause(0.1)
        assert "nothing from cgroup /ktop-test (removed) here" in app.main_screen.pane("blockio").table.message
