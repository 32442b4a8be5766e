"""Lock owners and names as a user sees them: the owner view (perf lock contention -o), the
names view, names in the address view, and the owners with their stacks in the caller and
lock drill-downs. Recorded data, no root."""

from __future__ import annotations

from dataclasses import replace

from conftest import run_app
from test_drill_screens import INTERVAL, MS, frame_lines, unlink_caller, with_caller

from ktop.engine import RecordedSource
from ktop.lockviews import locks_by_name, owners_by_task
from ktop.model import OWNER_READERS, OWNER_TASK, LockAddress, LockOwnerWait
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text

MMAP = LockAddress("0xffff888100001000", "", "rwsem:W", 9, 900 * MS, 40 * MS,
                   name="&mm->mmap_lock", instance="pid 42 (python3)")
DIR_A = LockAddress("0xffff888100002000", "", "rwsem:W", 3, 300 * MS, 30 * MS,
                    name="&inode->i_rwsem", instance="/tmp/a")
DIR_B = LockAddress("0xffff888100003000", "", "rwsem:W", 2, 200 * MS, 20 * MS,
                    name="&inode->i_rwsem", instance="/tmp/\x1b[31mb")
RQ = LockAddress("0xffff888627c2ba80", "", "spinlock", 50, 5 * MS, 1 * MS,
                 name="runqueues.__lock", instance="CPU 1")
# The unlink caller's 9 waits: 6 charged to task 43, 3 to readers.
RELEASE = ("try_to_wake_up+0x3a4", "wake_up_q+0x33", "rwsem_wake.isra.0+0x6f", "up_write+0x49",
           "do_unlinkat+0x265")
OWNERS = (
    LockOwnerWait(OWNER_TASK, 43, 42, "unlinker2", RELEASE, "", "do_unlinkat+0x160", "rwsem:W",
                  MMAP.address, 4, 500 * MS, 40 * MS),
    LockOwnerWait(OWNER_TASK, 43, 42, "unlinker2", (), "not seen: the owner did not wake this "
                  "waiter", "do_unlinkat+0x160", "rwsem:W", MMAP.address, 2, 200 * MS, 30 * MS),
    LockOwnerWait(OWNER_READERS, 0, 0, "", (), "", "do_unlinkat+0x160", "rwsem:W",
                  MMAP.address, 3, 200 * MS, 20 * MS),
)


def with_owners(snapshot):
    snapshot = with_caller(snapshot, unlink_caller())
    locks = snapshot.locks
    return replace(snapshot, locks=replace(locks, owners=OWNERS,
                                           locks=(MMAP, DIR_A, DIR_B, RQ, *locks.locks)))


def shown(snapshot, keys: tuple[str, ...]) -> tuple[str, str]:
    app = build_app(RecordedSource([snapshot]), interval_s=INTERVAL)
    seen = {}

    async def scenario(pilot):
        await pilot.press(*keys)
        await pilot.pause(0.2)
        seen["screen"] = type(app.screen).__name__
        seen["text"] = screen_text(app)

    run_app(app, scenario, size=(180, 50))
    return seen["screen"], seen["text"]


def test_owner_view_charges_waits_to_owners_and_says_when_there_is_none(recorded_snapshot):
    snapshot = with_owners(recorded_snapshot)
    rows = owners_by_task(snapshot.locks)
    by_label = {r.comm: r for r in rows}
    assert (by_label["unlinker2"].pid, by_label["unlinker2"].contended) == (43, 6)
    assert by_label["[read-held: no single owner]"].contended == 3
    unowned = [c for c in snapshot.locks.callers if c.type not in ("mutex", "rwsem:W")]
    assert unowned and by_label["[lock type records no owner]"].contended == sum(
        c.contended for c in unowned)
    # the view on screen: the owner's pid and command, the no-owner rows said as such
    _, text = shown(snapshot, ("2", "z", "v", "v", "v", "v"))
    lines = frame_lines(text)
    assert any("by owners (v)" in line for line in lines)
    owner_line = next(line for line in lines if line.endswith("unlinker2"))
    assert "700.00 ms" in owner_line and " 43 " in owner_line
    assert any(line.endswith("[read-held: no single owner]") for line in lines)


def test_names_view_sums_a_name_over_its_locks_and_the_address_view_names_each(
        recorded_snapshot):
    snapshot = with_owners(recorded_snapshot)
    inodes = next(n for n in locks_by_name(snapshot.locks) if n.name == "&inode->i_rwsem")
    assert (inodes.locks, inodes.contended, inodes.total_wait_ns) == (2, 5, 500 * MS)
    _, text = shown(snapshot, ("2", "z", "v"))
    lines = frame_lines(text)
    assert any("&mm->mmap_lock pid 42 (python3) (0xffff888100001000)" in line for line in lines)
    assert any("runqueues.__lock CPU 1 (0xffff888627c2ba80)" in line for line in lines)
    # a name is kernel data: its control characters shown inert
    assert "\x1b" not in text and any("/tmp/\\x1b[31mb" in line for line in lines)
    _, text = shown(snapshot, ("2", "z", "v", "v", "v", "v", "v"))
    named = next(line for line in frame_lines(text) if line.endswith("&inode->i_rwsem"))
    assert "500.00 ms" in named


def test_lock_drill_down_shows_owners_with_their_stacks(recorded_snapshot):
    screen, text = shown(with_owners(recorded_snapshot), ("2", "v", "enter"))
    assert screen == "LockAddressScreen"
    lines = frame_lines(text)
    assert any("&mm->mmap_lock pid 42 (python3)" in line for line in lines[:3])
    start = next(i for i, line in enumerate(lines) if "owner 43 unlinker2" in line)
    assert lines[start + 1].startswith("4 waits, total 500.00 ms")
    assert lines[start + 2: start + 7] == list(RELEASE)
    assert any("not seen: the owner did not wake this waiter" in line for line in lines)
    assert any("[read-held: no single owner]" in line for line in lines)


def test_a_spinning_lock_says_it_has_no_owner(recorded_snapshot):
    snapshot = with_owners(recorded_snapshot)
    snapshot = replace(snapshot, locks=replace(snapshot.locks, locks=(
        replace(RQ, total_wait_ns=10_000 * MS), *snapshot.locks.locks)))
    screen, text = shown(snapshot, ("2", "v", "enter"))
    assert screen == "LockAddressScreen"
    assert "[lock type records no owner] (spinlock)" in text
    assert "owner 43" not in text


def test_caller_drill_down_lists_the_owners_that_made_it_wait(recorded_snapshot):
    screen, text = shown(with_owners(recorded_snapshot), ("2", "enter"))
    assert screen == "LockCallerScreen"
    lines = frame_lines(text)
    assert any(line.startswith("lock owners when the waits began") for line in lines)
    row = next(line for line in lines if line.startswith("43") and "unlinker2" in line)
    assert "700.00 ms" in row
    assert "up_write+0x49" in lines


# ---- carried in exports, files and recordings ------------------------------------------------


def test_owners_and_names_survive_json_and_old_files_read_without_them(recorded_snapshot,
                                                                       recorded_json):
    from ktop.exports.jsonfile import from_json, to_json

    snapshot = with_owners(recorded_snapshot)
    back = from_json(to_json(snapshot))
    assert back.locks.owners == OWNERS
    assert back.locks.locks[:4] == (MMAP, DIR_A, DIR_B, RQ)
    # a file written before owners and names: read as having none, not refused
    old = from_json(recorded_json)
    assert old.locks.owners == () and {lock.name for lock in old.locks.locks} == {""}


def test_a_recording_replays_owners_and_names(recorded_snapshot, tmp_path):
    from ktop.aggregate.locks import merge_profiles
    from ktop.record.fileformat import decode_snapshot, encode_snapshot

    # through a record (owner frames numbered into its table like every stack's) and back
    locks = decode_snapshot(encode_snapshot(with_owners(recorded_snapshot))).locks
    assert locks.owners == OWNERS
    merged = merge_profiles([locks, locks])
    by_key = {(o.pid, o.frames, o.stack_note): o for o in merged.owners}
    assert by_key[43, RELEASE, ""].contended == 8  # two intervals of 4
    assert {lock.address: lock.instance for lock in merged.locks}[DIR_A.address] == "/tmp/a"


def test_openmetrics_names_locks_by_kind_never_by_instance(recorded_snapshot):
    from prometheus_client.parser import text_string_to_metric_families

    from ktop.exports.openmetrics import to_prom

    parsed = {f.name: f for f in text_string_to_metric_families(
        to_prom(with_owners(recorded_snapshot), top=3))}
    waits = {(s.labels["lock_type"], s.labels["lock"]): s.value
             for s in parsed["ktop_lock_name_wait_seconds"].samples}
    assert waits["rwsem:W", "&inode->i_rwsem"] == 0.5  # both directories, one series
    assert waits["rwsem:W", "&mm->mmap_lock"] == 0.9
    assert len(waits) == 4  # top 3 and other
    assert not any("/tmp" in lock or "pid" in lock for _, lock in waits)


def test_pprof_labels_a_callers_samples_with_the_lock_it_waited_for(recorded_snapshot):
    from ktop.exports.pprof import build_profile

    profile = build_profile(with_owners(recorded_snapshot), of="locks")
    strings = list(profile.string_table)
    labelled = [
        {strings[label.key]: strings[label.str] for label in sample.label if label.str}
        for sample in profile.sample
    ]
    unlink = [labels for labels in labelled if labels.get("lock_caller") == "do_unlinkat+0x160"]
    assert unlink and all(labels["lock"] == "&mm->mmap_lock" for labels in unlink)
    # callers whose waits kept no lock per stack (spinning) carry no lock label
    assert any("lock" not in labels for labels in labelled)


def test_enter_on_a_name_lists_the_locks_of_that_name(recorded_snapshot):
    _, text = shown(with_owners(recorded_snapshot),
                    ("2", "z", "v", "v", "v", "v", "v", "down", "enter"))
    lines = frame_lines(text)
    assert any("by addresses (v)" in line and "filter: &inode->i_rwsem" in line
               for line in lines)
    assert any("/tmp/a" in line for line in lines)
    assert not any("&mm->mmap_lock pid 42" in line for line in lines)
