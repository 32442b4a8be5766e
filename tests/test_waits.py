"""The waits pane without root: reasons, the fold, replay's merge, the views, the pane and
its drill-down, the exports, --offcpu-min, PSI and RUNQ% parsing."""

from __future__ import annotations

import dataclasses
import gzip
import os

import pytest
from conftest import run_app

from ktop.aggregate.waits import WaitAggregator, interrupt_of, merge_profiles, reason_of
from ktop.cli import parse_args
from ktop.collectors.pressure import parse_pressure
from ktop.collectors.procfiles import KeptFds
from ktop.collectors.runqueue import RunDelays, parse_run_delay
from ktop.collectors.waits import (
    HIST_SLOTS,
    NOT_WALKED,
    STILL_WAITING,
    BlockedStack,
    ProcessTimes,
    WaitDrain,
    WalkMinimums,
    parse_min_walk,
)
from ktop.engine import RecordedSource
from ktop.exports.folded import to_folded
from ktop.exports.openmetrics import to_prom
from ktop.exports.pprof import PROFILES, profile_class
from ktop.model import EXITED_PID, WAKER_WAITING, UserFrame
from ktop.symbolize.kernel import Kallsyms
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.waitviews import by_command, by_process, by_reason, hist_buckets_us, pressure_line

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81100000 T __schedule
ffffffff81100800 T schedule
ffffffff81100900 T io_schedule
ffffffff81101000 T do_nanosleep
ffffffff81102000 T hrtimer_nanosleep
ffffffff81103000 T folio_wait_bit_common
ffffffff81104000 T filemap_read
ffffffff81105000 T futex_do_wait
ffffffff81106000 T try_to_wake_up
ffffffff81107000 T hrtimer_wakeup
ffffffff81108000 T asm_sysvec_apic_timer_interrupt
ffffffff81109000 T do_idle
ffffffff8110a000 T futex_wake
ffffffff8110b000 T do_futex
ffffffff8110c000 T bpf_trace_run4
ffffffff8110d000 T __traceiter_sched_switch
ffffffff8110e000 T oom_kill_process
ffffffff8110f000 T out_of_memory
ffffffff81110000 T handle_mm_fault
ffffffff81111000 T exc_page_fault
ffffffff81112000 T asm_exc_page_fault
ffffffff81113000 T asm_common_interrupt
ffffffff81114000 T asm_exc_nmi
ffffffff81115000 T handle_softirqs
ffffffff82000000 T _etext
"""
A = {name: int(addr, 16) + 0x10 for addr, _, name in map(str.split, KALLSYMS.splitlines())}
WALL_NS = 1_000_000_000


def stack(*names: str) -> tuple[int, ...]:
    return tuple(A[n] for n in names)


def hist(slot: int, count: int) -> tuple[int, ...]:
    slots = [0] * HIST_SLOTS
    slots[slot] = count
    return tuple(slots)


def blocked(pid=10, comm="sleeper", state="S", kernel=(), kernel_error=0, total=900_000_000,
            count=90, waker_pid=0, waker_comm="swapper/0", waker_kernel=(), tid_comm=None):
    return BlockedStack(
        pid=pid, comm=tid_comm or comm, cgroup="/app", state=state, kernel=kernel,
        kernel_error=kernel_error, user=(), user_error=-14, waker_pid=waker_pid,
        waker_comm=waker_comm, waker_kernel=waker_kernel, waker_error=0, total_ns=total,
        count=count, max_ns=total // count, hist=hist(14, count))


def times(pid=10, comm="sleeper", on_cpu=50_000_000, runq=50_000_000, s=900_000_000, d=0,
          other=0):
    return ProcessTimes(pid=pid, comm=comm, cgroup="/app", on_cpu_ns=on_cpu, runq_ns=runq,
                        runq_count=90, blocked_ns=(s, d, other), blocked_count=(90, 0, 0),
                        runq_hist=hist(6, 90))


def drain(start: float, stacks=(), processes=()) -> WaitDrain:
    return WaitDrain(start, start + 1.0, tuple(processes), tuple(stacks),
                     lost={"wait_stacks_full": 0}, notes={"unseen_start": 3})


NANOSLEEP = stack("bpf_trace_run4", "__traceiter_sched_switch", "__schedule", "schedule",
                  "do_nanosleep", "hrtimer_nanosleep")
TIMER_WAKE = stack("try_to_wake_up", "hrtimer_wakeup", "asm_sysvec_apic_timer_interrupt",
                   "do_idle")


def aggregator() -> WaitAggregator:
    return WaitAggregator(Kallsyms.from_text(KALLSYMS), window_s=5.0)


def test_the_reason_is_the_first_frame_past_the_scheduler():
    assert reason_of(["__schedule+0x618", "schedule+0x23", "do_nanosleep+0x4a",
                      "hrtimer_nanosleep+0x9c"]) == "do_nanosleep"
    assert reason_of(["__schedule+0x1", "schedule+0x2", "io_schedule+0x42",
                      "folio_wait_bit_common+0x13c", "filemap_read+0x1"]) \
        == "io_schedule ← folio_wait_bit_common"
    assert reason_of(["bpf_trace_run4+0x1", "__schedule+0x1", "schedule+0x2",
                      "futex_do_wait+0x46"]) == "futex_do_wait"


def test_a_fold_names_stacks_cuts_tracing_frames_and_tells_interrupts_from_tasks():
    agg = aggregator()
    agg.add(drain(0.0, [
        blocked(kernel=NANOSLEEP, waker_kernel=TIMER_WAKE, waker_pid=77, waker_comm="bash"),
        blocked(pid=11, comm="idler", kernel=(), kernel_error=NOT_WALKED, total=1000, count=1),
    ], [times()]))
    profile = agg.profile()
    first = profile.stacks[0]
    assert first.reason == "do_nanosleep"
    assert first.frames[0].startswith("__schedule")  # the tracing frames are cut
    (waker,) = first.wakers
    # bash was only interrupted: the timer interrupt woke the sleeper
    assert (waker.pid, waker.comm) == (0, "[hardirq]")
    assert waker.frames[-1].startswith("asm_sysvec_apic_timer_interrupt")  # do_idle cut
    assert profile.stacks[1].reason == "[not walked: a short wait]"
    (row,) = profile.processes
    assert row.reason == "do_nanosleep" and row.blocked_s_ns == 900_000_000


def test_the_bpf_programs_own_frame_is_cut_when_the_kernel_does_not_name_it():
    """Without BPF symbols in kallsyms (the program loaded after ktop read it) the stack's
    innermost frame is the program's hex address: every process's reason read
    0xffffffffc002cf4d, and every drill-down began with it."""
    program = 0xFFFFFFFFC002CF4D
    agg = aggregator()
    agg.add(drain(0.0, [blocked(kernel=(program, *NANOSLEEP))], [times()]))
    first = agg.profile().stacks[0]
    assert first.reason == "do_nanosleep"
    assert first.frames[0].startswith("__schedule")
    assert not any(frame.startswith("0x") for frame in first.frames)


def test_a_waker_in_task_context_is_the_task():
    wake = stack("try_to_wake_up", "futex_wake", "do_futex")
    assert interrupt_of(["try_to_wake_up+0x1", "futex_wake+0x1", "do_futex+0x1"]) == ""
    agg = aggregator()
    agg.add(drain(0.0, [blocked(kernel=NANOSLEEP, waker_kernel=wake, waker_pid=77,
                                waker_comm="ponger")]))
    (waker,) = agg.profile().stacks[0].wakers
    assert (waker.pid, waker.comm) == (77, "ponger")


def test_replay_merges_recorded_intervals_as_the_live_window_sums_them():
    drains = [
        drain(0.0, [blocked(kernel=NANOSLEEP, waker_kernel=TIMER_WAKE)], [times()]),
        drain(1.0, [blocked(kernel=NANOSLEEP, waker_kernel=TIMER_WAKE, total=500, count=5),
                    blocked(pid=12, comm="dd", state="D", kernel=stack(
                        "__schedule", "schedule", "io_schedule", "folio_wait_bit_common"))],
              [times(), times(pid=12, comm="dd", d=300)]),
    ]
    live = aggregator()
    recorded = []
    for d in drains:
        live.add(d)
        recorded.append(live.profile(latest=True))
    merged = merge_profiles(recorded)
    window = live.profile()
    assert merged == window
    assert merged.stacks[0].count == 95 and merged.processes[0].runq_ns == 100_000_000


def test_views_sum_threads_per_process_and_time_per_reason():
    agg = aggregator()
    agg.add(drain(0.0, [blocked(kernel=NANOSLEEP), blocked(kernel=NANOSLEEP, tid_comm="worker")],
                  [times(), times(comm="worker", on_cpu=10)]))
    profile = agg.profile()
    (process,) = by_process(profile)
    assert process.pid == 10 and process.on_cpu_ns == 50_000_010 and process.runq_ns == 100_000_000
    assert {g.comm for g in by_command(profile)} == {"sleeper", "worker"}
    (reason,) = by_reason(profile)
    assert (reason.reason, reason.count, reason.processes) == ("do_nanosleep", 180, 1)
    assert hist_buckets_us(hist(6, 2))[0].low == 32  # slot 6: 32-63 us
    assert "sleeper 10" in pressure_line(profile, 1.0)  # 10% in the run queue


def snapshot_with_waits(recorded_snapshot):
    agg = aggregator()
    agg.add(drain(0.0, [blocked(kernel=NANOSLEEP, waker_kernel=stack("try_to_wake_up", "futex_wake"),
                                waker_pid=77, waker_comm="ponger")], [times()]))
    return dataclasses.replace(recorded_snapshot, waits=agg.profile())


def test_the_pane_shows_shares_of_wall_time_and_drills_into_stacks_and_wakers(recorded_snapshot):
    seen = {}
    snapshot = snapshot_with_waits(recorded_snapshot)

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("5")
        await pilot.pause(0.2)
        seen["pane"] = screen_text(app)
        pane = app.main_screen.pane("waits")
        key = pane.row_named("10")
        seen["drill"] = pane.drill(key)

    run_app(build_app(RecordedSource([snapshot])), scenario, size=(160, 50))
    text = seen["pane"]
    assert "Waits (off-CPU)" in text and "do_nanosleep" in text and "sleeper" in text
    # 900 ms blocked in S over the 1 s the profile spans: 90% of one thread's time
    assert "90.0" in text and "of a thread's time, cumulative 1.0s" in text  # as the file's CPU
    assert seen["drill"] is not None


def test_drill_down_lists_the_blocking_stack_and_who_woke_it(recorded_snapshot):
    from ktop.ui.screens.waits import WaitStacksScreen, selected_stacks

    snapshot = snapshot_with_waits(recorded_snapshot)
    (found,) = selected_stacks(snapshot, ("pid", "10"))
    assert found.wakers[0].comm == "ponger"
    assert any(f.startswith("futex_wake") for f in found.wakers[0].frames)
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        screen = WaitStacksScreen(("pid", "10"), snapshot, app)
        await app.push_screen(screen)
        await pilot.pause(0.2)
        seen["text"] = screen_text(app)

    run_app(build_app(RecordedSource([snapshot])), scenario, size=(160, 50))
    assert "woken by ponger 77" in seen["text"] and "do_nanosleep+0x10" in seen["text"]


def test_a_wait_that_has_not_ended_shows_no_max(recorded_snapshot):
    """A thread blocked all through the window has time but no wait ended yet: its max is
    not "0 ns" (read as a wait of no length), in the reasons view or its drill-down."""
    from ktop.ui.screens.waits import WaitStacksScreen

    agg = aggregator()
    asleep = blocked(pid=12, comm="hwrng", kernel=NANOSLEEP, total=1_000_000_000, count=1)
    asleep = asleep._replace(waker_error=STILL_WAITING, waker_comm=WAKER_WAITING)
    agg.add(drain(0.0, [asleep._replace(count=0, max_ns=0, hist=hist(0, 0))],
                  [times(pid=12, comm="hwrng", on_cpu=0, runq=0, s=1_000_000_000)]))
    snapshot = dataclasses.replace(recorded_snapshot, waits=agg.profile())
    seen = {}

    async def scenario(pilot):
        app = pilot.app
        await pilot.press("5", "v")
        await pilot.pause(0.2)
        seen["pane"] = screen_text(app)
        await app.push_screen(WaitStacksScreen(("pid", "12"), snapshot, app))
        await pilot.pause(0.2)
        seen["drill"] = screen_text(app)

    run_app(build_app(RecordedSource([snapshot])), scenario, size=(160, 50))
    assert "by blocking functions (v)" in seen["pane"]  # the view, named as its column is
    (row,) = [line for line in seen["pane"].splitlines() if "do_nanosleep" in line]
    assert "1.00 s" in row and "0 ns" not in row and " - " in row, row
    assert "0 waits, total 1.00 s (100.0%), none ended yet" in seen["drill"], seen["drill"]
    # Its waker is no one yet: not "woken by [still waiting]  0 times".
    assert "still waiting at an interval's end: 1.00 s of waiting so far" in seen["drill"]
    assert "0 times" not in seen["drill"]


def test_exports_carry_off_cpu_time(recorded_snapshot):
    snapshot = snapshot_with_waits(recorded_snapshot)
    folded = to_folded(snapshot, "offcpu")
    assert folded.splitlines()[0] == "sleeper;hrtimer_nanosleep;do_nanosleep;schedule;__schedule 900000"
    profile = profile_class()()
    from ktop.exports.pprof import to_pprof

    profile.ParseFromString(gzip.decompress(to_pprof(snapshot, of="offcpu")))
    names = [profile.string_table[t.type] for t in profile.sample_type]
    assert names == [kind for kind, _unit in PROFILES["offcpu"]] == ["runqueue", "off_cpu"]
    off_cpu = names.index("off_cpu")
    assert sum(s.value[off_cpu] for s in profile.sample) == 900_000_000
    prom = to_prom(snapshot)
    assert 'ktop_offcpu_seconds_total{state="S"} 0.9' in prom
    assert "ktop_runqueue_latency_seconds_bucket" in prom


def test_offcpu_min_is_checked_in_one_line(capsys):
    assert parse_args([]).offcpu_min == WalkMinimums(s_us=1000, d_us=10)  # the default
    assert parse_args(["--offcpu-min", "0"]).offcpu_min == WalkMinimums(0, 0)  # one for all
    assert parse_min_walk("250") == WalkMinimums(250, 250)
    assert parse_min_walk("S=500,D=20") == parse_min_walk(" d=20, s=500 ") == WalkMinimums(500, 20)
    assert parse_min_walk("S=100") == WalkMinimums(100, 10)  # D keeps its default
    assert parse_min_walk("D=0") == WalkMinimums(1000, 0)
    assert str(WalkMinimums(1000, 10)) == "S=1000,D=10"  # as --help and the README give it
    for bad in ("-1", "ten", "99999999999", "S=", "S=-5", "D=x", "R=10", "S=1,S=2", "S=1,,D=2",
                "10,D=2", "S:10", ""):
        with pytest.raises(SystemExit):
            parse_args(["--offcpu-min", bad])
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) >= 1 and "Traceback" not in "\n".join(error)
        assert error[-1].startswith("ktop: error: argument --offcpu-min:"), (bad, error)


def test_pressure_and_run_delay_files_parse():
    some, full = parse_pressure(b"some avg10=12.50 avg60=1.00 avg300=0.00 total=10\n"
                                b"full avg10=3.25 avg60=0.00 avg300=0.00 total=5\n")
    assert (some, full) == (12.5, 3.25)
    assert parse_pressure(b"some avg10=1.00 avg60=0 avg300=0 total=1\n") == (1.0, None)
    with pytest.raises(ValueError):
        parse_pressure(b"garbage")
    assert parse_run_delay(b"123 456 7\n") == 456
    assert parse_run_delay(b"") is None


def test_run_delays_sum_threads_and_count_a_new_process_from_zero(tmp_path):
    task = tmp_path / "5" / "task"
    for tid, delay in ((5, 100), (6, 200)):
        (task / str(tid)).mkdir(parents=True)
        (task / str(tid) / "schedstat").write_text(f"1 {delay} 1\n")
    delays = RunDelays(str(tmp_path))
    assert delays.delta_ns(5, 1, threads=2) is None  # the first ask sets the baseline
    (task / "6" / "schedstat").write_text("1 700 1\n")
    (task / "7").mkdir()
    (task / "7" / "schedstat").write_text("1 50 1\n")
    assert delays.delta_ns(5, 1, threads=3) == 500 + 50
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "schedstat").write_text("1 40 1\n")
    assert delays.delta_ns(9, 2, threads=1, born=True) == 40
    delays.close()


def test_run_delays_keep_a_descriptor_per_live_thread_and_no_more(tmp_path):
    """Each thread's schedstat stays open for the next read, within the budget; a thread
    gone, or a process gone, closes its descriptors: a long run under thread churn does
    not run out of them."""
    task = tmp_path / "5" / "task"

    def threads(delays: dict[int, int]) -> None:
        for tid in [p.name for p in task.iterdir()] if task.exists() else []:
            if int(tid) not in delays:
                (task / tid / "schedstat").unlink()
                (task / tid).rmdir()
        for tid, delay in delays.items():
            (task / str(tid)).mkdir(parents=True, exist_ok=True)
            (task / str(tid) / "schedstat").write_text(f"1 {delay} 1\n")

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    delays = RunDelays(str(tmp_path), KeptFds(room=3))
    threads({5: 100, 6: 200})
    assert delays.delta_ns(5, 1, threads=2) is None
    assert open_fds() == before + 2
    for round_ in range(1, 30):  # a worker thread replaced at every refresh
        threads({5: 100 + round_, 6: 200 + round_, 100 + round_: 10})
        assert delays.delta_ns(5, 1, threads=3) == 1 + 1 + 10
        assert open_fds() == before + 3
    threads({5: 200, 6: 300, 7: 10, 8: 10, 9: 10})  # more threads than the budget
    assert delays.delta_ns(5, 1, threads=5) == 71 + 71 + 30  # all read, not all kept
    assert open_fds() == before + 3
    delays.forget(set())  # the process exited
    assert open_fds() == before
    delays.close()


def test_a_process_gone_in_the_middle_is_not_a_user_frame_crash():
    frames = (UserFrame("main+0x1", "/bin/app"),)
    agg = WaitAggregator(Kallsyms.from_text(KALLSYMS), resolve_user=lambda pid, addrs: frames)
    row = blocked(kernel=NANOSLEEP)._replace(user=(0x401000,))
    agg.add(drain(0.0, [row]))
    assert agg.profile().stacks[0].user == frames


def test_header_shows_pressure_and_bpf_time_per_pane(recorded_snapshot):
    from ktop.collectors.selfcost import pane_of_program
    from ktop.model import Pressure, SelfCostRow
    from ktop.ui.widgets.header import header_text

    names = {"on_sched_switch": "waits", "waits_flip": "waits", "on_cpu_sample": "functions",
             "on_contention_b": "locks", "block_rq_issue": "blockio", "something": ""}
    assert {name: pane_of_program(name) for name in names} == names
    snapshot = dataclasses.replace(
        recorded_snapshot,
        pressure=Pressure(cpu_some=35.5, cpu_full=0.0, io_some=12.25, io_full=3.5,
                          memory_some=0.0, memory_full=0.0),
        cost=SelfCostRow(cpu_percent=0.5, bpf_percent=0.4,
                         bpf_panes={"waits": 0.3, "functions": 0.1}),
    )
    text = header_text(snapshot).plain
    assert "PSI cpu 35.5 io 12.2/3.5 mem 0.0/0.0" in text
    assert "BPF 0.4% (waits 0.3  functions 0.1)" in text


def test_drill_picture_of_a_waiting_process(recorded_snapshot):
    import asyncio

    from ktop.ui.headless import render_screen

    snapshot = snapshot_with_waits(recorded_snapshot)
    text = asyncio.run(render_screen(RecordedSource([snapshot]), (160, 50), ".txt",
                                     drill="waits:10"))
    assert text.startswith("blocked waits of pid 10")
    assert "woken by ponger 77" in text and "run-queue wait" in text


def test_on_cpu_time_is_split_into_user_and_system_as_proc_splits_it(recorded_snapshot):
    from ktop.model import ProcessRow

    snapshot = snapshot_with_waits(recorded_snapshot)
    row = ProcessRow(10, "sleeper", "root", "S", 4.0, 1.0, 1, 4096, user_percent=3.0)
    snapshot = dataclasses.replace(snapshot, processes=(*snapshot.processes, row))
    seen = {}

    async def scenario(pilot):
        await pilot.press("5", "z")  # zoomed: the pane shares its row with the endings pane
        await pilot.pause(0.2)
        seen["text"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([snapshot])), scenario, size=(160, 50))
    lines = [" ".join(line.strip("│┃ ").split()) for line in seen["text"].splitlines()]
    # 50 ms on the CPU in 1 s: 5.0%, three quarters user as /proc says
    assert any(line.startswith("10 5.0 3.8 1.2 ") for line in lines), lines


def test_wakers_that_differ_in_offsets_show_as_one_until_o():
    from ktop.model import WaitWaker
    from ktop.ui.screens.waits import merged_wakers

    irq = ("try_to_wake_up+0x3a4", "hrtimer_wakeup+0x1e", "sysvec_apic_timer_interrupt+0x2c")
    wakers = (WaitWaker(0, "[hardirq]", irq, 5, 50),
              WaitWaker(0, "[hardirq]", (*irq[:2], "sysvec_apic_timer_interrupt+0x60"), 3, 30),
              WaitWaker(0, "[hardirq]", irq[1:], 1, 10),  # stored without its innermost frame
              WaitWaker(77, "ponger", ("try_to_wake_up+0x1", "futex_wake+0x2"), 2, 100))
    merged = merged_wakers(wakers)
    assert [(w.comm, w.count, w.total_ns) for w in merged] == [("ponger", 2, 100),
                                                                ("[hardirq]", 9, 90)]
    assert merged[1].frames == irq  # the most frequent's frames


def test_hostile_names_are_escaped_in_the_pane_note_and_the_drill_down(recorded_snapshot):
    import asyncio

    from ktop.ui.headless import render_screen

    evil = "\x1b[2Jevil"
    agg = aggregator()
    agg.add(drain(0.0, [blocked(kernel=NANOSLEEP, comm=evil)],
                  [times(comm=evil, runq=500_000_000)]))
    snapshot = dataclasses.replace(recorded_snapshot, waits=agg.profile())
    seen = {}

    async def scenario(pilot):
        await pilot.press("5")
        await pilot.pause(0.2)
        seen["text"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([snapshot])), scenario, size=(160, 50))
    drill = asyncio.run(render_screen(RecordedSource([snapshot]), (160, 50), ".txt",
                                      drill="waits:10"))
    for text in (seen["text"], drill):
        assert "\x1b" not in text and "\\x1b[2Jevil" in text
    assert "pressure from  cpu: \\x1b[2Jevil 10" in seen["text"]


def test_the_wakers_of_a_long_wait_fold_when_they_exit():
    """A shell waiting for its children is woken by each one as it exits: 10,000 children
    leave one waker row per command in the totals since start, every wait still counted."""
    agg = aggregator()
    wait4 = stack("__schedule", "schedule", "do_nanosleep")
    for second in range(100):
        agg.add(drain(float(second), stacks=[
            blocked(pid=10, comm="sh", kernel=wait4, total=100_000, count=1,
                    waker_pid=1000 + second * 100 + child, waker_comm="true")
            for child in range(100)]))
        if second % 10 == 9:
            agg.fold_exited(lambda pid: pid == 10)
    (waits,) = [s for s in agg.profile(cumulative=True).stacks if s.pid == 10]
    assert len(waits.wakers) == 1
    assert (waits.wakers[0].pid, waits.wakers[0].comm) == (EXITED_PID, "true")
    assert waits.wakers[0].count == waits.count == 10_000


def test_a_cgroups_own_pressure_is_read_from_its_files_and_shown_after_the_machines(
        tmp_path, recorded_snapshot):
    from ktop.collectors.pressure import PressureReader
    from ktop.model import Pressure
    from ktop.ui.widgets.header import header_text

    own = tmp_path / "system.slice" / "web.service"
    own.mkdir(parents=True)
    for resource, some in (("cpu", 33.0), ("io", 1.5), ("memory", 0.0)):
        (own / f"{resource}.pressure").write_text(
            f"some avg10={some:.2f} avg60=0.00 avg300=0.00 total=1\n"
            "full avg10=0.50 avg60=0.00 avg300=0.00 total=1\n")
    reader = PressureReader.of_cgroup("/system.slice/web.service", str(tmp_path))
    pressure = reader.read()
    reader.close()
    assert pressure == Pressure(cpu_some=33.0, cpu_full=0.5, io_some=1.5, io_full=0.5,
                                memory_some=0.0, memory_full=0.5)
    machine = Pressure(cpu_some=2.0, cpu_full=0.0, io_some=0.0, io_full=0.0, memory_some=0.0,
                       memory_full=0.0)
    snapshot = dataclasses.replace(recorded_snapshot, pressure=machine, cgroup_pressure=pressure,
                                   cgroup_pressure_of="/system.slice/web.service")
    text = header_text(snapshot).plain
    assert ("PSI cpu 2.0 io 0.0/0.0 mem 0.0/0.0   "
            "PSI of /system.slice/web.service cpu 33.0 io 1.5/0.5 mem 0.0/0.5") in text


def test_a_stack_is_named_and_its_reason_found_once_however_often_it_waits(monkeypatch):
    # Named once per distinct stack, not per drained row: an idle machine's waits are the same
    # few dozen stacks every interval, and naming each row again was most of folding them.
    import ktop.aggregate.waits as waits  # noqa: PLC0415

    calls = {"reason_of": 0, "interrupt_of": 0}
    for name in calls:
        real = getattr(waits, name)

        def counted(frames, real=real, name=name):
            calls[name] += 1
            return real(frames)
        monkeypatch.setattr(waits, name, counted)
    agg = aggregator()
    for second in range(5):
        agg.add(drain(float(second), [
            blocked(pid=pid, kernel=NANOSLEEP, waker_kernel=TIMER_WAKE) for pid in range(10, 30)
        ], [times(pid=pid) for pid in range(10, 30)]))
        agg.profile()
    assert calls == {"reason_of": 1, "interrupt_of": 1}
    profile = agg.profile()
    assert len(profile.stacks) == 20 and all(s.reason == "do_nanosleep" for s in profile.stacks)
    assert all(s.wakers[0].comm == "[hardirq]" for s in profile.stacks)


def test_the_window_sums_its_intervals_alike_however_often_it_is_read():
    # Each interval's counts are copied into the window's sum, never shared with it: reading
    # the window again must not add an interval's counts or its wakers twice.
    agg = aggregator()
    wake = stack("try_to_wake_up", "futex_wake", "do_futex")
    for second in range(3):
        agg.add(drain(float(second), [blocked(kernel=NANOSLEEP, waker_kernel=wake, waker_pid=77,
                                              waker_comm="ponger")], [times()]))
    first, again = agg.profile(), agg.profile()
    assert first == again
    (stack_,) = first.stacks
    assert stack_.count == 270 and stack_.wakers[0].count == 270
    assert stack_.hist[14] == 270 and first.processes[0].runq_hist[6] == 270
    assert agg.profile(latest=True).stacks[0].wakers[0].count == 90


def test_a_busy_refresh_of_the_waits_pane_makes_fewer_young_objects_than_ktop_collects_at():
    # A refresh's rows live until the next one: each young collection walks them all. Past
    # ktop's threshold, every refresh of a busy machine paid one or more (17 ms each under
    # churn) and found almost nothing to free.
    import gc  # noqa: PLC0415

    from ktop.cli import GC_THRESHOLDS  # noqa: PLC0415

    wake = stack("try_to_wake_up", "futex_wake", "do_futex")
    rows = []
    for pid in range(1000, 1400):  # 400 processes, 5 stacks each: a machine under churn
        for i, kernel in enumerate((NANOSLEEP, wake, stack("futex_do_wait", "do_futex"),
                                    stack("io_schedule", "folio_wait_bit_common"),
                                    stack("do_nanosleep"))):
            rows.append(blocked(pid=pid, kernel=kernel, waker_kernel=TIMER_WAKE,
                                waker_pid=pid + i, waker_comm="waker", total=1000 + i))
    busy = [times(pid=pid) for pid in range(1000, 1400)]
    agg = aggregator()
    for second in range(3):  # the window full, as at every refresh after the first seconds
        agg.add(drain(float(second), rows, busy))
        agg.profile()
    gc.disable()
    try:
        gc.collect()
        before = gc.get_count()[0]
        agg.add(drain(3.0, rows, busy))
        by_process(agg.profile())
        made = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert 10_000 < made < GC_THRESHOLDS[0] / 2, made


def test_a_user_stack_is_named_once_a_drain_however_many_wakers_it_has():
    # One thread blocked in one place is a row per waker stack (thousands of rows under
    # churn, ~80 distinct user stacks): each (pid, user stack) is named once a drain.
    asked: list[tuple[int, tuple[int, ...]]] = []

    def resolve_user(pid, addresses):
        asked.append((pid, tuple(addresses)))
        return [UserFrame(f"f{a:x}", "/bin/app") for a in addresses]

    agg = WaitAggregator(Kallsyms.from_text(KALLSYMS), window_s=5.0, resolve_user=resolve_user)
    rows = [blocked(kernel=NANOSLEEP, waker_pid=pid, waker_comm="w",
                    waker_kernel=stack("try_to_wake_up", "futex_wake"))._replace(
                        user=(0x401000, 0x402000))
            for pid in range(100, 150)]
    rows.append(blocked(pid=11, kernel=NANOSLEEP)._replace(user=(0x401000,)))
    agg.add(drain(0.0, rows, [times()]))
    assert sorted(set(asked)) == asked == [(10, (0x401000, 0x402000)), (11, (0x401000,))]
    (first, second) = agg.profile().stacks
    assert [f.symbol for f in first.user] == ["f401000", "f402000"] and first.count == 50 * 90
    assert len(first.wakers) == 50 and second.user == (UserFrame("f401000", "/bin/app"),)


def test_histograms_of_intervals_that_fill_different_slots_sum_slot_by_slot():
    # The window keeps each histogram without its empty high slots (memory per process per
    # interval): intervals that reach different slots still add up slot by slot, shown whole.

    agg = aggregator()
    for second, slot in enumerate((3, 20, 0)):
        agg.add(drain(float(second), [blocked(kernel=NANOSLEEP)._replace(hist=hist(slot + 1, 5))],
                      [times()._replace(runq_hist=hist(slot, 7))]))
    for profile in (agg.profile(), agg.profile(cumulative=True)):
        (process,), (stack_,) = profile.processes, profile.stacks
        assert len(process.runq_hist) == len(stack_.hist) == HIST_SLOTS
        assert [(i, n) for i, n in enumerate(process.runq_hist) if n] == [(0, 7), (3, 7), (20, 7)]
        assert [(i, n) for i, n in enumerate(stack_.hist) if n] == [(1, 5), (4, 5), (21, 5)]


def test_a_drained_histogram_is_cut_after_its_last_used_slot_and_nothing_else():
    import ctypes as ct

    from ktop.collectors.bpfsys import RowLayout
    from ktop.collectors.waits import _trimmed_hists

    class Value(ct.Structure):
        _fields_ = [("total_ns", ct.c_uint64), ("hist", ct.c_uint64 * HIST_SLOTS)]

    cases = [(), (1,), (0, 0, 256), (5, 0, 2**64 - 1), tuple(range(1, HIST_SLOTS + 1)),
             (0,) * 7 + (1 << 56,)]
    values = b"".join(bytes(Value(7, (ct.c_uint64 * HIST_SLOTS)(*slots))) for slots in cases)
    layout = RowLayout(Value)
    rows = list(layout.rows(values))
    read = [row[where] for row, where in zip(rows, _trimmed_hists(layout, "hist", values))]
    assert read == [slots for slots in cases]


def test_a_process_reason_is_the_one_with_most_time_over_all_its_stacks():
    """Two stacks blocked in futex_do_wait (40 ms each) outweigh one in do_nanosleep (60 ms):
    the process's reason, in the profile and in the by-process view, is the futex wait."""
    from ktop.waitviews import by_process

    futex = stack("__schedule", "schedule", "futex_do_wait")
    agg = WaitAggregator(Kallsyms.from_text(KALLSYMS), window_s=5.0)
    agg.add(drain(1.0, [blocked(kernel=futex, state="S", total=40_000_000, count=4),
                        blocked(kernel=futex, state="other", total=40_000_000, count=4),
                        blocked(kernel=NANOSLEEP, total=60_000_000, count=6)],
                  [times()]))
    profile = agg.profile()
    assert [p.reason for p in profile.processes] == ["futex_do_wait"]
    assert [g.reason for g in by_process(profile)] == ["futex_do_wait"]


def test_wakers_in_one_interrupt_path_are_named_alike_whatever_they_interrupted(monkeypatch):
    """A timer interrupt landing on a new instruction each time is a new stack each time:
    all are the same waker, named once, down to the interrupt's entry; a task's wake-up
    through the same first frames is still a task's."""
    import ktop.aggregate.waits as waits  # noqa: PLC0415
    from ktop.aggregate.waits import KernelNamer

    named = []
    real = waits.interrupt_of
    monkeypatch.setattr(waits, "interrupt_of", lambda frames: named.append(frames) or real(frames))
    namer = KernelNamer(Kallsyms.from_text(KALLSYMS))
    entry = ("bpf_trace_run4", "try_to_wake_up", "hrtimer_wakeup", "hrtimer_wakeup",
             "futex_wake", "do_futex", "asm_sysvec_apic_timer_interrupt")
    first = namer.waker((*stack(*entry), A["do_idle"], A["do_idle"] + 4))
    assert first[1] == "[hardirq]" and first[0][-1].startswith("asm_sysvec")
    for interrupted in (A["do_idle"] + 8, A["filemap_read"], A["schedule"] + 1):
        assert namer.waker((*stack(*entry), interrupted, A["_stext"])) == first
    assert len(named) == 1
    task = namer.waker(stack(*entry[:6], "do_nanosleep"))
    assert task[1] == "" and task[0][-1].startswith("do_nanosleep")
    other = namer.waker(stack(*entry[:5], "do_idle", "asm_sysvec_apic_timer_interrupt",
                              "do_futex"))
    assert other[1] == "[hardirq]" and other[0][-2].startswith("do_idle")


def test_a_wake_up_from_a_page_fault_is_the_faulting_task_s_not_an_interrupt_s():
    """An OOM kill is sent from the faulting task's page fault (asm_exc_page_fault, an
    exception in the task's own context): its victim was woken by that task, not
    '[hardirq]'; hard interrupts (asm_common_interrupt, asm_sysvec_*) and NMIs still are."""
    from ktop.aggregate.waits import KernelNamer, interrupt_of

    namer = KernelNamer(Kallsyms.from_text(KALLSYMS))
    oom = ("bpf_trace_run4", "try_to_wake_up", "oom_kill_process", "out_of_memory",
           "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault")
    frames, interrupt = namer.waker(stack(*oom))
    assert interrupt == ""
    assert [f.split("+")[0] for f in frames][-3:] == ["handle_mm_fault", "exc_page_fault",
                                                      "asm_exc_page_fault"]
    # A fault taken inside a syscall (copy_from_user): the stack goes on past the exception.
    in_syscall = namer.waker((*stack(*oom), A["do_futex"]))
    assert in_syscall[1] == "" and in_syscall[0][-1].startswith("do_futex")
    device = ("bpf_trace_run4", "try_to_wake_up", "asm_common_interrupt")
    assert namer.waker((*stack(*device), A["do_idle"]))[1] == "[hardirq]"
    assert interrupt_of(["try_to_wake_up+0x1", "handle_softirqs+0x2",
                         "asm_sysvec_apic_timer_interrupt+0x3"]) == "[softirq]"
    assert interrupt_of(["try_to_wake_up+0x1", "asm_exc_nmi+0x3"]) == "[nmi]"
    assert interrupt_of(["try_to_wake_up+0x1", "asm_exc_int3+0x3"]) == ""


def test_the_waits_fold_names_an_oom_killer_by_its_pid_not_hardirq():
    """Through the aggregator: the victim's waker row keeps the killer's pid and command."""
    oom = stack("bpf_trace_run4", "try_to_wake_up", "oom_kill_process", "out_of_memory",
                "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault")
    agg = WaitAggregator(Kallsyms.from_text(KALLSYMS), window_s=5.0)
    agg.add(drain(1.0, [blocked(kernel=stack("__schedule", "schedule", "futex_do_wait"),
                                waker_pid=77, waker_comm="hog", waker_kernel=oom)],
                  [times()]))
    wakers = [w for s in agg.profile().stacks for w in s.wakers]
    assert [(w.pid, w.comm) for w in wakers] == [(77, "hog")]


# ---- short waits sampled 1 in N ------------------------------------------------------------

FUTEX = stack("bpf_trace_run4", "__traceiter_sched_switch", "__schedule", "schedule",
              "futex_do_wait")


def test_sampled_short_waits_are_scaled_and_leave_the_not_walked_entry():
    """1 in 8 short waits walked: a futex wait of 10 us stands for 8 such; what the scaling
    adds leaves the not-walked entry, so the process's blocked time stays what it was."""
    from ktop.collectors.waits import NOT_WALKED

    sampled = blocked(kernel=FUTEX, total=10_000, count=1)._replace(scale=8)
    lumped = blocked(kernel_error=NOT_WALKED, total=100_000, count=10)
    profile = fold([drain(0.0, [sampled, lumped], [times()])])
    by_reason = {s.reason: s for s in profile.stacks}
    futex, rest = by_reason["futex_do_wait"], by_reason["[not walked: a short wait]"]
    assert (futex.total_ns, futex.count, futex.sampled_every) == (80_000, 8, 8)
    assert (rest.total_ns, rest.count, rest.sampled_every) == (30_000, 3, 0)
    assert futex.total_ns + rest.total_ns == 110_000  # as counted in the kernel


def test_samples_never_stand_for_more_than_was_not_walked():
    """By chance the samples may stand for more than the rest holds: they are scaled by less,
    and the stack views never add up to more than the kernel counted."""
    from ktop.collectors.waits import NOT_WALKED

    sampled = blocked(kernel=FUTEX, total=10_000, count=1)._replace(scale=64)
    lumped = blocked(kernel_error=NOT_WALKED, total=50_000, count=5)
    profile = fold([drain(0.0, [sampled, lumped], [times()])])
    assert [(s.reason, s.total_ns) for s in profile.stacks] == [("futex_do_wait", 60_000)]


def fold(drains):
    aggregate = aggregator()
    for d in drains:
        aggregate.add(d)
    return aggregate.profile()
