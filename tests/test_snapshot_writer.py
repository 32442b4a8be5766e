"""Writing `--snapshot` files as root: atomically, never through a planted symlink, one-line
errors, and no partial file left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import PANE_TITLES, SCREEN_SIZE, root_only

from ktop.engine import Options, RecordedSource
from ktop.ui import headless as snapshot_module
from ktop.ui.headless import render_screen, run_snapshot
from ktop.writer import SnapshotError, write_atomically

CONTENT = "<svg>new snapshot</svg>\n"


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def leftovers(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_writes_the_file_private_and_leaves_no_temporary(tmp_path):
    """A screen holds command lines: 0600, as recordings are."""
    target = tmp_path / "out.svg"
    write_atomically(str(target), CONTENT)
    assert target.read_text() == CONTENT
    assert target.stat().st_mode & 0o777 == 0o600
    assert leftovers(tmp_path) == ["out.svg"]


def test_replaces_an_existing_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n" * 1000)
    write_atomically(str(target), "new\n")
    assert target.read_text() == "new\n"


def test_missing_directory_is_one_line_and_creates_nothing(tmp_path):
    with pytest.raises(SnapshotError) as error:
        write_atomically(str(tmp_path / "missing" / "out.json"), CONTENT)
    assert "does not exist" in one_line(error)
    assert leftovers(tmp_path) == []


def test_a_file_where_the_directory_should_be(tmp_path):
    (tmp_path / "notadir").write_text("x")
    with pytest.raises(SnapshotError) as error:
        write_atomically(str(tmp_path / "notadir" / "out.json"), CONTENT)
    one_line(error)
    assert (tmp_path / "notadir").read_text() == "x"


def test_symlink_at_the_target_is_refused_neither_followed_nor_replaced(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "out.svg"
    link.symlink_to(victim)
    with pytest.raises(SnapshotError) as error:
        write_atomically(str(link), CONTENT)
    assert "it is a symlink" in one_line(error)
    assert link.is_symlink() and victim.read_text() == "precious\n"
    assert leftovers(tmp_path) == ["out.svg", "victim"]


def test_dangling_symlink_does_not_create_its_target(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "out.json"
    link.symlink_to(elsewhere / "created-by-root")
    with pytest.raises(SnapshotError):
        write_atomically(str(link), CONTENT)
    assert leftovers(elsewhere) == []
    assert link.is_symlink()


def test_imports_go_one_way_runner_to_app_to_writer():
    """The writer knows no app, and the app (its `s` key) knows no headless runner."""
    code = ("import sys, ktop.writer; assert 'textual' not in sys.modules; "
            "import ktop.ui.app; assert 'ktop.ui.headless' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@contextlib.contextmanager
def immutable(directory):
    if not shutil.which("chattr"):
        pytest.skip("chattr is not installed")
    if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode:
        pytest.skip("this filesystem has no immutable flag")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


@contextlib.contextmanager
def mounted(*args: str, target):
    result = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if result.returncode:
        pytest.skip(f"cannot mount here: {result.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(target)], check=True)


@root_only
def test_unwritable_directory_even_for_root(tmp_path):
    """An immutable directory refuses root too."""
    locked = tmp_path / "locked"
    locked.mkdir()
    with immutable(locked):
        with pytest.raises(SnapshotError) as error:
            write_atomically(str(locked / "out.svg"), CONTENT)
        assert "locked" in one_line(error)
        assert leftovers(locked) == []


@root_only
def test_read_only_mount(tmp_path):
    source, target = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    target.mkdir()
    with mounted("--bind", str(source), target=target):
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        with pytest.raises(SnapshotError) as error:
            write_atomically(str(target / "out.txt"), CONTENT)
        one_line(error)
    assert leftovers(source) == []


@root_only
def test_full_disk_leaves_no_partial_file_and_keeps_the_old_one(tmp_path):
    """The write itself fails (ENOSPC) after the directory checks passed."""
    small = tmp_path / "small"
    small.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=64k", "tmpfs", target=small):
        (small / "out.json").write_text("previous snapshot\n")
        with pytest.raises(SnapshotError) as error:
            write_atomically(str(small / "out.json"), "x" * (1 << 20))
        assert "No space left" in one_line(error)
        assert leftovers(small) == ["out.json"]
        assert (small / "out.json").read_text() == "previous snapshot\n"


def test_bad_directory_fails_before_collecting(tmp_path, monkeypatch):
    """Nobody should wait seconds for the collectors to learn the path was wrong."""

    def collect(*args, **kwargs):
        raise AssertionError("collected although the file cannot be written")

    monkeypatch.setattr(snapshot_module, "collect", collect)
    with pytest.raises(SnapshotError):
        run_snapshot(str(tmp_path / "missing" / "out.svg"), Options(), duration_s=30)
    with pytest.raises(SnapshotError):
        run_snapshot(str(tmp_path / "out.png"), Options(), duration_s=30)


def test_run_snapshot_json_from_collected_data(tmp_path, monkeypatch, recorded_snapshot):
    """The whole path after collecting, with recorded data standing in for the kernel."""
    import json

    monkeypatch.setattr(snapshot_module, "collect", lambda options, duration: recorded_snapshot)
    written = run_snapshot(str(tmp_path / "out.json"), Options(), duration_s=0.1)
    assert written == str(tmp_path / "out.json")
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["hostname"] == recorded_snapshot.hostname
    assert leftovers(tmp_path) == ["out.json"]


def render(snapshot, fmt: str) -> str:
    return asyncio.run(render_screen(RecordedSource([snapshot]), SCREEN_SIZE, fmt))


def test_text_screen_has_every_pane_and_no_escape_bytes(recorded_snapshot):
    text = render(recorded_snapshot, ".txt")
    assert "\x1b" not in text and "\x9b" not in text
    for title in PANE_TITLES:
        assert title in text
    assert "chacha_permute" in text
    assert "\\x1b[2J evil" in text
    lines = text.splitlines()
    assert len(lines) == SCREEN_SIZE[1]
    assert max(len(line) for line in lines) <= SCREEN_SIZE[0]


def test_svg_screen_parses_and_shows_the_titles(recorded_snapshot):
    svg = render(recorded_snapshot, ".svg")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    words = " ".join("".join(root.itertext()).replace("\xa0", " ").split())
    for title in PANE_TITLES:
        assert title in words
    assert "\x1b" not in svg
