"""The endings pane on constructed drains: who killed it, what died and why, kept per
interval so a replay finds it, and the exports."""

from __future__ import annotations

import dataclasses

from endings_data import KILL, endings_profile

from ktop.panes.endings.aggregate import (
    KEEP_PER_INTERVAL,
    EndingsAggregator,
    merge_profiles,
)
from ktop.panes.endings.collector import (
    EndingsDrain,
    Executable,
    ExitRecord,
    OomRecord,
    SignalRecord,
    SignalTotal,
    exe_names,
    exe_path,
)
from ktop.panes.endings.names import code_name, how_ended, result_name, signal_name

T0 = 1767268245.0


def signal(sig=9, sender=300, sender_comm="bash", target=301, target_comm="sleep", code=0,
           result=0, time=T0, user=(), exe=None) -> SignalRecord:
    return SignalRecord(time=time, sig=sig, code=code, result=result, group=True,
                        sender_pid=sender, sender_tid=sender, sender_comm=sender_comm,
                        target_pid=target, target_tid=target, target_comm=target_comm,
                        cgroup="/user.slice", kernel=(), user=user, exe=exe)


def exit_of(pid=301, comm="sleep", status=9, time=T0 + 0.001, lifetime_ns=2_000_000_000,
            cpu_ns=1_000_000) -> ExitRecord:
    return ExitRecord(time=time, pid=pid, tid=pid, ppid=300, comm=comm, status=status,
                      lifetime_ns=lifetime_ns, cpu_ns=cpu_ns, cgroup="/user.slice")


def drain(start=0.0, signals=(), exits=(), ooms=(), totals=(), lost=None) -> EndingsDrain:
    return EndingsDrain(start, start + 1.0, tuple(totals), tuple(signals), tuple(exits),
                        tuple(ooms), lost or {"signal_ring_full": 0})


def aggregator(window_s: float = 5.0, now: float = T0 + 5, **kwargs) -> EndingsAggregator:
    return EndingsAggregator(window_s, clock=lambda: now, **kwargs)


def test_the_live_list_reaches_back_a_minute_past_a_shorter_window():
    """What died in the last minute is listed though the window is 5 s; older is gone (the
    records keep each interval's own, for a replay)."""
    agg = aggregator(5.0, now=T0 + 100)
    agg.add(drain(0.0, exits=[exit_of(pid=1, time=T0 + 30)]))  # 70 s before now
    agg.add(drain(1.0, exits=[exit_of(pid=2, time=T0 + 50)]))  # 50 s before now
    for i in range(2, 12):
        agg.add(drain(float(i)))
    profile = agg.profile()
    assert [e.pid for e in profile.endings] == [2] and profile.exits == 0


def test_names_of_signals_codes_results_and_statuses():
    assert [signal_name(s) for s in (9, 11, 6, 17, 34, 64, 99)] == [
        "SIGKILL", "SIGSEGV", "SIGABRT", "SIGCHLD", "SIGRTMIN", "SIGRTMAX", "signal 99"]
    assert code_name(11, 1) == "SEGV_MAPERR" and code_name(9, 0) == "SI_USER"
    assert code_name(9, 0x80) == "SI_KERNEL" and code_name(17, 2) == "CLD_KILLED"
    assert [result_name(r) for r in range(5)] == [
        "delivered", "ignored", "already pending", "overflow", "info lost"]
    assert how_ended(3 << 8) == ("exit 3", 3, "")
    assert how_ended(9) == ("SIGKILL", -1, "SIGKILL")
    assert how_ended(11 | 0x80) == ("SIGSEGV (core dumped)", -1, "SIGSEGV")


def test_an_executables_path_is_whole_only_up_to_its_roots_name():
    raw = b"".join(name.ljust(32, b"\0") for name in (b"segv", b"tmp", b"/"))
    assert exe_names(raw, 3) == ["segv", "tmp", "/"]
    assert exe_path(["segv", "tmp", "/"]) == "/tmp/segv"
    assert exe_path(["f", "e", "d", "c", "b", "a"]) == ""  # cut short: no guess


def test_a_kill_names_its_sender_in_the_ending_it_caused():
    agg = aggregator()
    agg.add(drain(signals=[signal()], exits=[exit_of()],
                  totals=[SignalTotal(300, "bash", 301, "sleep", 9, 0, "/user.slice", 1)]))
    profile = agg.profile()
    (ending,) = profile.endings
    assert (ending.pid, ending.how, ending.killer_pid, ending.killer_comm) == (
        301, "SIGKILL", 300, "bash")
    assert ending.lifetime_s == 2.0 and ending.cpu_s == 0.001
    assert ending.killer is not None and ending.killer.code == "SI_USER"
    (count,) = profile.counts
    assert (count.signal, count.sender_comm, count.target_comm, count.result, count.count) == (
        "SIGKILL", "bash", "sleep", "delivered", 1)


def test_the_killer_is_found_across_intervals_and_only_for_the_signal_that_ended_it():
    """SIGTERM sent a second before the SIGKILL that ended it; a process that exits 0 after
    a SIGTERM it handled was not killed by anyone."""
    agg = aggregator()
    agg.add(drain(0.0, signals=[signal(sig=15, sender=400, sender_comm="systemd"),
                                signal(sig=15, target=302, target_comm="web")]))
    agg.add(drain(1.0, signals=[signal(sig=9, time=T0 + 1)],
                  exits=[exit_of(time=T0 + 1.1), exit_of(pid=302, comm="web", status=0)]))
    endings = {e.pid: e for e in agg.profile().endings}
    assert (endings[301].killer_pid, endings[301].killer_comm) == (300, "bash")
    assert endings[302].how == "exit 0" and endings[302].killer is None


def test_an_oom_kill_is_marked_and_counted():
    agg = aggregator()
    agg.add(drain(signals=[signal(sender=500, sender_comm="hog", code=0x80)],
                  ooms=[OomRecord(T0, 301, 301, "sleep", 500, "hog")], exits=[exit_of()]))
    profile = agg.profile()
    assert profile.oom_kills == 1
    assert profile.endings[0].killer is not None and profile.endings[0].killer.oom


def test_what_died_is_in_each_intervals_profile_and_a_replay_of_them_finds_it():
    """A recording keeps each interval's profile (latest): the endings of 03:12 are in the
    record of 03:12, and merging the records gives what the live window showed."""
    agg = aggregator(60.0)
    records = []
    for i in range(4):
        agg.add(drain(float(i), signals=[signal(target=1000 + i, time=T0 + i)],
                      exits=[exit_of(pid=1000 + i, time=T0 + i + 0.5)],
                      totals=[SignalTotal(300, "bash", 1000 + i, "sleep", 9, 0, "/", 1)]))
        records.append(agg.profile(latest=True))
    assert [[e.pid for e in r.endings] for r in records] == [[1000], [1001], [1002], [1003]]
    live, replayed = agg.profile(), merge_profiles(records)
    assert [e.pid for e in replayed.endings] == [e.pid for e in live.endings] == [
        1003, 1002, 1001, 1000]
    assert replayed.counts == live.counts and replayed.exits == live.exits == 4


def test_an_interval_keeps_a_bounded_number_of_records_and_counts_the_rest():
    agg = aggregator()
    many = [exit_of(pid=2000 + i, status=0) for i in range(KEEP_PER_INTERVAL + 50)]
    agg.add(drain(exits=many))
    profile = agg.profile(latest=True)
    assert len(profile.endings) == KEEP_PER_INTERVAL and profile.exits == KEEP_PER_INTERVAL + 50
    assert profile.endings[0].pid == 2000 + KEEP_PER_INTERVAL + 49  # the newest kept
    assert profile.lost["endings_not_kept"] == 50


def test_a_dead_senders_own_frames_are_named_from_its_executable(tmp_path):
    """The maps of a process killed by its own fault are gone by the drain: the frames in its
    executable's text are named from the file the program recorded."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    source, program = tmp_path / "f.c", tmp_path / "f"
    source.write_text("int crash_here(void) { return 1; }\nint main(void) { return 0; }\n")
    subprocess.run(["cc", "-O0", "-no-pie", "-o", str(program), str(source)], check=True)
    from elftools.elf.elffile import ELFFile

    with open(program, "rb") as f:
        elf = ELFFile(f)
        symbol = elf.get_section_by_name(".symtab").get_symbol_by_name("crash_here")[0]
        lowest = min(s["p_vaddr"] for s in elf.iter_segments()
                     if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1)
    bias = 0x10000  # mapped elsewhere than linked: as a PIE would be
    exe = Executable(str(program), program.stat().st_ino, lowest + bias, lowest + bias + 0x10000)
    address = symbol["st_value"] + bias + 2
    agg = aggregator(resolve_user=lambda pid, addresses: ())
    agg.add(drain(signals=[signal(sig=11, sender=301, target=301, code=1, user=(address,),
                                  exe=exe)]))
    (sent,) = agg.profile().signals
    assert sent.user == ("crash_here+0x2 (f)",)
    other = dataclasses.replace(exe, inode=exe.inode + 1)  # another file at that path now
    agg.add(drain(1.0, signals=[signal(sig=11, code=1, user=(address,), exe=other)]))
    assert agg.profile().signals[0].user == (f"{address:#x}",)


def test_the_csv_and_metrics_say_what_ended():
    from test_export import full_snapshot

    from ktop.exports.openmetrics import SnapshotMetrics
    from ktop.panes.endings.exports import csv_cells, folded_stacks, metric_families

    snapshot = dataclasses.replace(full_snapshot(), endings=endings_profile())
    assert csv_cells(snapshot, False) == [3, 2, 2, 1, 302, "segv", "SIGSEGV (core dumped)",
                                          "segv 302"]
    families = {f.name: f for f in metric_families(SnapshotMetrics(), snapshot)}
    assert {s.labels["signal"]: s.value for s in families["ktop_signals"].samples} == {
        "SIGKILL": 1.0, "SIGSEGV": 1.0}
    assert families["ktop_oom_kills"].samples[0].value == 1.0
    stacks = dict((";".join(s), w) for s, w in folded_stacks(snapshot, False))
    assert any(s.startswith("bash;kill_builtin;kill;entry_SYSCALL_64_after_hwframe") and
               s.endswith("__send_signal_locked;[SIGKILL]") for s in stacks), stacks
    assert KILL.sender_comm == "bash"
