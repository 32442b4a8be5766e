"""ktop runs as root and writes where it is told: every file it writes is safe (issue 25).

Hostile layouts are made by nobody in a sticky, world-writable directory, as in /tmp, with
fs.protected_symlinks=0 (some distributions and containers run so): ktop must not rely on
the kernel's protection. Targets that are not regular files (device nodes, FIFOs, the
/proc/self/fd/1 that /dev/stdout is) are refused, never replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, as_nobody, root_only, run_app
from test_recording import interval
from test_replay_ui import RecordableSource
from test_ui import INTERVAL, next_frames

from ktop.cli import main
from ktop.record.fileformat import (
    HEADER_SIZE,
    Recording,
    RecordingError,
    RecordWriter,
    frame_record,
)
from ktop.ui.app import build_app
from ktop.writer import SnapshotError, write_atomically

RECORDED = str(FIXTURES / "recorded.json")
NOBODY = 65534
PROTECTED_SYMLINKS = "/proc/sys/fs/protected_symlinks"


@pytest.fixture
def sticky_dir(shared_dir):
    """/tmp's shape: anyone creates, only the owner removes (mode 1777)."""
    os.chmod(shared_dir, 0o1777)
    return shared_dir


@pytest.fixture
def unprotected_symlinks():
    """The kernel follows any symlink in a sticky directory, as on machines that turn
    fs.protected_symlinks off; put back after the test."""
    with open(PROTECTED_SYMLINKS) as f:
        before = f.read().strip()
    with open(PROTECTED_SYMLINKS, "w") as f:
        f.write("0")
    try:
        yield
    finally:
        with open(PROTECTED_SYMLINKS, "w") as f:
            f.write(before)


def nobody(*command: str, home: str = "/") -> None:
    subprocess.run([*as_nobody(home), *command], check=True)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def snapshot_from_replay(target: str, *extra: str) -> int:
    """`ktop --replay recorded.json --snapshot TARGET`: the whole write path, no collecting."""
    return main(["--replay", RECORDED, "--snapshot", target, *extra])


# ---- 1. a target that is not a regular file -------------------------------------------------


@contextlib.contextmanager
def node(path: Path, kind: str):
    if kind == "character device":
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    elif kind == "FIFO":
        os.mkfifo(path)
    else:  # /dev/stdout
        path.symlink_to("/proc/self/fd/1")
    yield os.lstat(path)


@root_only
@pytest.mark.parametrize(("kind", "said"), [("character device", "a character device"),
                                            ("FIFO", "a FIFO"), ("stdout", "a symlink")])
def test_a_device_node_fifo_or_stdout_link_is_refused_never_replaced(tmp_path, capsys, kind, said):
    target = tmp_path / "out"
    with node(target, kind) as before:
        code = snapshot_from_replay(str(target), "--format", "txt")
    after = os.lstat(target)
    assert code == 1
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    line = one_line(capsys.readouterr().err)
    assert f"it is {said}" in line and "- for standard output" in line
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary left behind


def test_standard_output_is_written_with_a_dash(capsys):
    assert snapshot_from_replay("-", "--format", "txt") == 0
    assert "Hot kernel functions" in capsys.readouterr().out


# ---- 2. a symlink planted in a directory of the path ---------------------------------------


@pytest.fixture
def planted(sticky_dir, tmp_path, unprotected_symlinks):
    """(the planted link, root's directory it points to): nobody's
    `ln -s /root/somedir /tmp/sticky/reports`."""
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    link = os.path.join(sticky_dir, "reports")
    nobody("ln", "-s", str(victim), link)
    return link, victim


@root_only
def test_snapshot_through_a_planted_directory_link_is_refused(planted, capsys):
    link, victim = planted
    assert snapshot_from_replay(f"{link}/x.txt") == 1
    line = one_line(capsys.readouterr().err)
    assert f"{link} is a symlink owned by uid {NOBODY}" in line
    assert os.listdir(victim) == []


@root_only
def test_record_through_a_planted_directory_link_is_refused(planted, capsys):
    link, victim = planted
    assert main(["--record", f"{link}/x.krec", "--duration", "1"]) == 1
    assert f"symlink owned by uid {NOBODY}" in one_line(capsys.readouterr().err)
    assert os.listdir(victim) == []


@root_only
def test_s_and_r_through_a_planted_directory_link_write_nothing(planted, recorded_snapshot):
    link, victim = planted
    source = RecordableSource(recorded_snapshot)
    notes = []

    async def scenario(pilot):
        await pilot.press("s")
        await pilot.press("R")
        await next_frames(pilot, source, 2)
        notes.extend(str(n.message) for n in pilot.app._notifications)
        assert pilot.app.recorder is None

    run_app(build_app(source, interval_s=INTERVAL, save_dir=link), scenario)
    assert os.listdir(victim) == []
    assert sum(f"symlink owned by uid {NOBODY}" in note for note in notes) == 2, notes


@root_only
def test_the_ring_renames_inside_the_directory_it_opened(sticky_dir, tmp_path,
                                                         unprotected_symlinks):
    """The directory of a recording is swapped for a link while it records: the ring's new
    file still replaces the old one where it was, nothing lands where the link points."""
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    reports = os.path.join(sticky_dir, "reports")
    nobody("mkdir", "-m", "0777", reports)
    limit = HEADER_SIZE + 6 * len(frame_record(0, interval())) + 10
    writer = RecordWriter(f"{reports}/r.krec", max_bytes=limit)
    for i in range(3):
        writer.append(interval(i))
    nobody("mv", reports, f"{reports}.old")
    nobody("ln", "-s", str(victim), reports)
    for i in range(3, 20):  # the ring drops its oldest records several times
        writer.append(interval(i))
    writer.close()
    assert os.listdir(victim) == []
    kept = Recording(f"{reports}.old/r.krec")
    assert kept.records[-1].seq == 19 and kept.records[0].seq > 0


@pytest.fixture
def unprotected_hardlinks():
    """Any user may hard-link a file they do not own (fs.protected_hardlinks=0, as on
    machines that turn it off); put back after the test."""
    path = "/proc/sys/fs/protected_hardlinks"
    with open(path) as f:
        before = f.read().strip()
    with open(path, "w") as f:
        f.write("0")
    try:
        yield
    finally:
        with open(path, "w") as f:
            f.write(before)


@root_only
@pytest.mark.parametrize("holder", ["nobody's own directory", "a sticky directory like /var/lock"])
def test_roots_own_link_hard_linked_where_others_write_is_not_followed(
        sticky_dir, tmp_path, unprotected_hardlinks, capsys, holder):
    """nobody: `ln -P /usr/lib/ssl/private ~/reports` (root's link to /etc/ssl/private):
    the link is root's, but it sits where nobody writes; root's --snapshot
    ~nobody/reports/snap.json must not land in /etc/ssl/private."""
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    roots = os.path.join(sticky_dir, "roots")
    os.mkdir(roots, 0o755)
    os.symlink(victim, os.path.join(roots, "private"))  # /usr/lib/ssl/private's shape
    directory = sticky_dir
    if holder == "nobody's own directory":
        directory = os.path.join(sticky_dir, "home")
        nobody("mkdir", "-m", "0755", directory)
    reports = os.path.join(directory, "reports")
    nobody("ln", "-P", os.path.join(roots, "private"), reports)
    assert os.lstat(reports).st_uid == 0 and stat.S_ISLNK(os.lstat(reports).st_mode)
    assert snapshot_from_replay(f"{reports}/snap.json") == 1
    line = one_line(capsys.readouterr().err)
    assert f"cannot write {reports}/snap.json: {reports} is a symlink in a directory" in line
    assert os.listdir(victim) == []


def test_a_link_root_or_the_user_made_is_followed(tmp_path):
    """Not every link is refused: /var/run -> /run, or the user's own."""
    (tmp_path / "real").mkdir()
    (tmp_path / "mine").symlink_to(tmp_path / "real")
    write_atomically(str(tmp_path / "mine" / "x.txt"), "x\n")
    assert (tmp_path / "real" / "x.txt").read_text() == "x\n"


# ---- 3. another user's recording ------------------------------------------------------------


@root_only
def test_root_never_continues_a_recording_another_user_made(sticky_dir, capsys):
    """nobody: `touch /tmp/sticky/rec.krec; chmod 666`; root's --record must not fill it."""
    path = os.path.join(sticky_dir, "rec.krec")
    nobody("touch", path)
    nobody("chmod", "666", path)
    assert main(["--record", path, "--duration", "1"]) == 1
    assert f"belongs to uid {NOBODY}" in one_line(capsys.readouterr().err)
    assert os.stat(path).st_size == 0


def test_a_recording_others_may_write_is_not_continued(tmp_path):
    path = tmp_path / "rec.krec"
    writer = RecordWriter(str(path))
    writer.append(interval(0))
    writer.close()
    os.chmod(path, 0o666)
    size = path.stat().st_size
    with pytest.raises(RecordingError) as error:
        RecordWriter(str(path))
    assert "others may write it" in str(error.value)
    assert path.stat().st_size == size and path.stat().st_mode & 0o777 == 0o666


@root_only
def test_r_never_continues_a_file_planted_at_its_predictable_name(sticky_dir, recorded_snapshot):
    """R names its file for the time: nobody plants those names for the next minute."""
    now = time.time()
    names = [time.strftime("ktop-%Y%m%d-%H%M%S.krec", time.localtime(now + s)) for s in range(60)]
    subprocess.run([*as_nobody("/"), "sh", "-c", 'cd "$0" && touch "$@" && chmod 666 "$@"',
                    sticky_dir, *names], check=True)
    source = RecordableSource(recorded_snapshot)

    async def scenario(pilot):
        await pilot.press("R")
        await next_frames(pilot, source, 3)
        await pilot.press("R")

    run_app(build_app(source, interval_s=INTERVAL, save_dir=sticky_dir), scenario)
    for name in names:  # every planted file untouched
        assert os.stat(os.path.join(sticky_dir, name)).st_size == 0
    (ours,) = set(os.listdir(sticky_dir)) - set(names)
    info = os.stat(os.path.join(sticky_dir, ours))
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o600)
    assert len(Recording(os.path.join(sticky_dir, ours))) >= 2


# ---- 4. kernel addresses and command lines are private ------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".txt", ".svg", ".folded", ".pb.gz"])
def test_snapshots_are_0600_whatever_the_umask(tmp_path, suffix):
    """JSON holds lock addresses kptr_restrict hides from users; screens command lines."""
    target = tmp_path / f"out{suffix}"
    umask = os.umask(0o022)
    try:
        assert snapshot_from_replay(str(target)) == 0
    finally:
        os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o600


def test_prometheus_text_stays_readable_by_node_exporter(tmp_path):
    target = tmp_path / "ktop.prom"
    assert snapshot_from_replay(str(target)) == 0
    assert target.stat().st_mode & 0o777 == 0o644
    text = target.read_text()
    assert "0xffff" not in text and "cmdline" not in text  # neither addresses nor command lines


def test_a_file_where_the_target_is_a_directory_is_one_line(tmp_path):
    with pytest.raises(SnapshotError) as error:
        write_atomically(str(tmp_path), "x")
    assert "it is a directory" in str(error.value)
