"""Folding drained samples into the hot-functions profile: shares, idle, windows.

Drains are built by hand as the CPU sampler would hand them over, with addresses taken from
the kallsyms fixture, so every expectation below is arithmetic on the input.
"""

from __future__ import annotations

import pytest
from cpu_drains import StackCount, cpu_drain

from ktop.aggregate.cpu import CpuAggregator
from ktop.collectors.cpu import CpuDrain
from ktop.collectors.procstat import CpuTicks
from ktop.model import UserFrame

HZ, CPUS = 99, 2


@pytest.fixture
def stacks(addr):
    """Kernel stacks (innermost first) as the stack map returns them."""
    return {
        "urandom": (
            addr("chacha_permute") + 0xDA,
            addr("chacha_block_generic") + 0x73,
            addr("get_random_bytes_user") + 0x74,
            addr("do_syscall_64") + 0x71,
        ),
        "copy": (addr("_copy_to_iter") + 0x1B0, addr("get_random_bytes_user") + 0x9C),
        "halt": (addr("pv_native_safe_halt") + 0xB, addr("default_idle") + 0x9),
        "irq_in_idle": (addr("_raw_spin_lock_irqsave") + 0x2E, addr("default_idle") + 0x9),
        "stray": (addr("_etext") + 0x100, addr("do_syscall_64") + 0x71),
    }


def drain(start: float, seconds: float, *counts: StackCount, lost=None,
          ticks: CpuTicks | None = None) -> CpuDrain:
    return cpu_drain(start, start + seconds, counts, dict(lost or {}), ticks)


def count(pid, comm, samples, kernel=(), user_mode=False) -> StackCount:
    return StackCount(pid, comm, samples, tuple(kernel), (), user_mode)


def user_mode(pid, comm, samples) -> StackCount:
    """Sampled in user space: the kernel stack id is -EFAULT, so no kernel frames."""
    return count(pid, comm, samples, (), user_mode=True)


def by_symbol(profile):
    return {f.symbol: f for f in profile.functions}


def test_percent_is_a_share_of_the_machines_cpu_time(kallsyms, stacks):
    """samples / (Hz x seconds x CPUs) x 100, as the header promises."""
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=5)
    agg.add(drain(100.0, 2.0, count(4242, "dd", 150, stacks["urandom"]),
                  count(4242, "dd", 40, stacks["copy"])))
    profile = agg.profile()
    machine = HZ * 2.0 * CPUS
    functions = by_symbol(profile)
    assert functions["chacha_permute"].samples == 150
    assert functions["chacha_permute"].percent == pytest.approx(100 * 150 / machine)
    assert functions["_copy_to_iter"].percent == pytest.approx(100 * 40 / machine)
    assert profile.expected_samples == round(machine)
    assert [f.symbol for f in profile.functions if f.samples] == ["chacha_permute", "_copy_to_iter"]


def test_under_sampled_idle_cpus_do_not_inflate_shares(kallsyms, stacks):
    """Tickless idle CPUs take few samples: a share of samples would say 100% here."""
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(0.0, 3.0, count(7, "dd", 297, stacks["urandom"])))
    chacha = by_symbol(agg.profile())["chacha_permute"]
    assert chacha.percent == pytest.approx(50.0)  # one CPU of two, busy all along


def test_idle_task_in_an_idle_function_is_flagged_idle(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(
        drain(0.0, 1.0, count(0, "swapper/1", 90, stacks["halt"]),
              count(0, "swapper/0", 6, stacks["irq_in_idle"]),
              count(4242, "dd", 99, stacks["urandom"]))
    )
    profile = agg.profile()
    functions = by_symbol(profile)
    assert functions["pv_native_safe_halt"].idle
    # An interrupt taken while idle is kernel work, not idling.
    assert not functions["_raw_spin_lock_irqsave"].idle
    assert not functions["chacha_permute"].idle
    assert profile.idle_samples == 90
    assert profile.kernel_samples == 6 + 99
    assert [s.idle for s in profile.stacks if s.comm == "swapper/1"] == [True]


def test_user_mode_samples_count_as_user_time_not_functions(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(0.0, 1.0, user_mode(31, "python3", 80), count(31, "python3", 20, stacks["copy"])))
    profile = agg.profile()
    assert profile.user_samples == 80
    assert profile.kernel_samples == 20
    assert profile.total_samples == 100
    assert [f.symbol for f in profile.functions if f.samples] == ["_copy_to_iter"]
    assert all(s.frames for s in profile.stacks)


def test_unresolvable_frame_shows_hex_not_a_neighbours_name(kallsyms, stacks, addr):
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(0.0, 1.0, count(9, "kworker/0:1", 5, stacks["stray"])))
    profile = agg.profile()
    stray = addr("_etext") + 0x100
    assert profile.functions[0].symbol == hex(stray)
    assert profile.functions[0].module == "[unknown]"
    assert profile.stacks[0].frames == (hex(stray), "do_syscall_64+0x71")


def test_whole_stacks_are_kept_innermost_first(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(0.0, 1.0, count(4242, "dd", 50, stacks["urandom"])))
    (stack,) = agg.profile().stacks
    assert (stack.pid, stack.comm, stack.samples) == (4242, "dd", 50)
    assert stack.frames == (
        "chacha_permute+0xda",
        "chacha_block_generic+0x73",
        "get_random_bytes_user+0x74",
        "do_syscall_64+0x71",
    )
    assert set(stack.modules) == {"[kernel.kallsyms]"}


def test_same_stack_from_two_drains_is_one_row(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(0.0, 1.0, count(4242, "dd", 50, stacks["urandom"])))
    agg.add(drain(1.0, 1.0, count(4242, "dd", 30, stacks["urandom"])))
    profile = agg.profile()
    assert [(s.comm, s.samples) for s in profile.stacks] == [("dd", 80)]
    assert profile.window_s == pytest.approx(2.0)


def seconds_of(agg: CpuAggregator, intervals: int, stacks) -> None:
    """One 1-second drain per interval; interval i's samples come from pid 1000+i."""
    for i in range(intervals):
        agg.add(
            drain(float(i), 1.0, count(1000 + i, f"task{i}", 10 * (i + 1), stacks["urandom"]),
                  ticks=CpuTicks(user=10, kernel=20 * (i + 1), idle=100))
        )


def test_sliding_window_forgets_old_intervals(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=3.0)
    seconds_of(agg, 5, stacks)
    profile = agg.profile()
    assert profile.window_s == pytest.approx(3.0)
    assert not profile.cumulative
    assert sorted(s.pid for s in profile.stacks) == [1002, 1003, 1004]
    chacha = by_symbol(profile)["chacha_permute"]
    assert chacha.samples == 30 + 40 + 50
    assert chacha.percent == pytest.approx(100 * 120 / (HZ * 3.0 * CPUS))


def test_cumulative_keeps_every_interval(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=3.0)
    seconds_of(agg, 5, stacks)
    profile = agg.profile(cumulative=True)
    assert profile.cumulative
    assert profile.window_s == pytest.approx(5.0)
    assert sorted(s.pid for s in profile.stacks) == [1000, 1001, 1002, 1003, 1004]
    assert by_symbol(profile)["chacha_permute"].samples == 10 + 20 + 30 + 40 + 50


def test_window_shorter_than_one_interval_still_shows_the_last_interval(kallsyms, stacks):
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=0.5)
    seconds_of(agg, 3, stacks)
    profile = agg.profile()
    assert [s.pid for s in profile.stacks] == [1002]
    assert profile.window_s == pytest.approx(1.0)


def test_cpu_time_split_follows_the_window(kallsyms, stacks):
    """The header's kernel/user/idle split comes from /proc/stat ticks of the same window."""
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=2.0)
    seconds_of(agg, 4, stacks)
    kernel, user, idle = 20 * 3 + 20 * 4, 10 + 10, 100 + 100
    times = agg.profile().times
    total = kernel + user + idle
    assert times.kernel == pytest.approx(100 * kernel / total)
    assert times.user == pytest.approx(100 * user / total)
    assert times.idle == pytest.approx(100 * idle / total)


def test_losses_are_those_of_the_span_shown(kallsyms, stacks):
    """The sampler counts losses since start (3, 5, 11): a record's `lost` only grew over a
    run, while the header and `L` said "in the last 5s". Now each says what it shows."""
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=2.0)
    agg.add(drain(0.0, 1.0, count(1, "a", 1, stacks["copy"]), lost={"kstack_collision": 3}))
    agg.add(drain(1.0, 1.0, lost={"kstack_collision": 5, "counts_map_full": 0}))
    agg.add(drain(2.0, 1.0, lost={"kstack_collision": 11, "counts_map_full": 1}))
    assert dict(agg.profile(latest=True).lost) == {"kstack_collision": 6, "counts_map_full": 1}
    assert dict(agg.profile().lost) == {"kstack_collision": 8, "counts_map_full": 1}  # 2 s
    assert dict(agg.profile(cumulative=True).lost) == {"kstack_collision": 11,
                                                       "counts_map_full": 1}
    agg.add(drain(3.0, 1.0, lost={"kstack_collision": 11, "counts_map_full": 1}))
    # Nothing lost in the newest interval: every reason still named, at 0.
    assert dict(agg.profile(latest=True).lost) == {"kstack_collision": 0, "counts_map_full": 0}


def test_no_samples_gives_an_empty_profile_not_a_division_error(kallsyms):
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(0.0, 0.0))
    profile = agg.profile()
    assert profile.functions == () and profile.total_samples == 0


def test_stacks_named_alike_are_one_stack_and_the_functions_agree_with_them(kallsyms, stacks):
    """Two user stacks whose addresses differ but name the same frames (a binary without
    symbols: every frame [unknown]) are one stack in the profile, their samples added; the
    hot functions counted from the stack numbers equal those folded from the stacks."""
    from ktop.model import UserFrame
    from ktop.stacktree import hot_functions

    unknown = (UserFrame("[unknown]", "/usr/bin/python3.11"),)
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=5, resolve_user=lambda pid, addrs: unknown)
    agg.add(drain(100.0, 1.0,
                  StackCount(7, "python3", 30, stacks["copy"], (0x5000,), False),
                  StackCount(7, "python3", 12, stacks["copy"], (0x6000,), False),
                  count(4242, "dd", 50, stacks["urandom"])))
    profile = agg.profile()
    python = [s for s in profile.stacks if s.pid == 7]
    assert [(s.samples, s.user_frames) for s in python] == [(42, unknown)]
    assert [s.samples for s in profile.stacks] == [50, 42]  # most samples first
    assert profile.functions == hot_functions(profile.stacks, HZ * 1.0 * CPUS)


def test_the_stacks_of_a_profile_are_read_as_a_tuple_and_saved_as_one(kallsyms, stacks):
    """Built when first read: equal to a tuple of them, and pickled and written to JSON as
    one, so a snapshot saved from a live profile reads back the same."""
    import pickle

    from ktop.exports.jsonfile import encode

    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=5)
    agg.add(drain(100.0, 1.0, count(4242, "dd", 50, stacks["urandom"]),
                  count(4242, "dd", 5, stacks["copy"])))
    profile = agg.profile()
    built = tuple(profile.stacks)
    assert profile.stacks == built and len(profile.stacks) == 2 and profile.stacks[1] == built[1]
    assert pickle.loads(pickle.dumps(profile.stacks)) == built
    assert encode(profile)["stacks"] == encode(built)
    unread = agg.profile()
    agg.add(drain(101.0, 1.0, count(4242, "dd", 99, stacks["copy"])))  # the next interval
    assert tuple(unread.stacks) == built  # read later, it holds what it was made from


def test_children_counts_every_stack_through_a_function_once(kallsyms, stacks, addr):
    """perf top -g's Children: the samples whose stack holds the function anywhere, Self
    those that landed in it; a recursive function counts once per stack."""
    recursive = (addr("_copy_to_iter") + 0x1B0, addr("get_random_bytes_user") + 0x9C,
                 addr("get_random_bytes_user") + 0x74, addr("do_syscall_64") + 0x71)
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=5)
    agg.add(drain(0.0, 1.0, count(4242, "dd", 150, stacks["urandom"]),
                  count(4242, "dd", 40, stacks["copy"]), count(4243, "dd", 10, recursive),
                  count(0, "swapper/0", 90, stacks["halt"]), user_mode(31, "python3", 80)))
    functions = by_symbol(agg.profile())
    machine = HZ * 1.0 * CPUS
    assert {name: (f.samples, f.children) for name, f in functions.items()} == {
        "chacha_permute": (150, 150),
        "chacha_block_generic": (0, 150),
        "get_random_bytes_user": (0, 150 + 40 + 10),
        "do_syscall_64": (0, 150 + 10),
        "_copy_to_iter": (50, 50),
        "pv_native_safe_halt": (90, 90),
        "default_idle": (0, 90),
    }
    assert functions["get_random_bytes_user"].children_percent == pytest.approx(100 * 200 / machine)
    assert all(f.children >= f.samples for f in functions.values())
    # A caller only the idle task passed through is idle too; one the busy passed is not.
    assert functions["default_idle"].idle and not functions["do_syscall_64"].idle
    # The replay's path from named stacks agrees with the live one.
    from ktop.stacktree import hot_functions

    profile = agg.profile()
    assert hot_functions(profile.stacks, machine) == profile.functions


def test_functions_samples_only_passed_through_are_listed_from_a_share_up(kallsyms, stacks, addr):
    """At high rates every caller of every stack would be a row: a caller is listed once
    0.1% of the expected samples passed through it (a leaf always is)."""
    agg = CpuAggregator(kallsyms, 4000, CPUS, window_s=5)
    agg.add(drain(0.0, 1.0, count(4242, "dd", 7999, stacks["copy"]),
                  count(4242, "dd", 1, stacks["urandom"])))
    functions = by_symbol(agg.profile())
    assert functions["chacha_permute"].samples == 1  # a leaf, however small
    assert "get_random_bytes_user" in functions  # 8000 samples through it
    assert "chacha_block_generic" not in functions  # 1 of 8000 expected


def test_ktops_own_stacks_say_their_user_stack_was_not_walked(kallsyms, stacks):
    """The sampler walks no user stack for ktop's own processes (itself, its compiler): their
    stacks carry the one frame that says so (a drill-down into ktop shows why it has no user
    frames), with no symbol lookup; another process's user stack is resolved as before."""
    from ktop.model import OWN_USER_STACK

    asked = []

    def resolve(pid, addresses):
        asked.append(pid)
        return [UserFrame("main+0x10", "/usr/bin/other")]

    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=5, resolve_user=resolve)
    agg.add(drain(0.0, 1.0,
                  count(4242, "ktop", 7, stacks["copy"])._replace(own=True),
                  user_mode(4242, "ktop", 5)._replace(own=True),
                  count(4250, "python3", 2, stacks["copy"])._replace(own=True),  # compiler
                  StackCount(77, "other", 3, stacks["copy"], (0x401000,), False)))
    profile = agg.profile()
    by_pid = {}
    for s in profile.stacks:
        by_pid.setdefault(s.pid, []).append(s)
    assert sum(s.samples for s in by_pid[4242]) == 12  # kernel-mode and user-mode alike
    assert all(s.user_frames == (OWN_USER_STACK,) for s in by_pid[4242])
    assert [s.user_frames for s in by_pid[4250]] == [(OWN_USER_STACK,)]
    assert [s.user_frames for s in by_pid[77]] == [(UserFrame("main+0x10", "/usr/bin/other"),)]
    assert asked == [77]


def test_counts_kept_per_interval_agree_with_the_stacks_as_the_window_slides(kallsyms, stacks):
    """Self, idle and user samples are summed per interval and kept as intervals come and
    go: after every interval, in the window and since start, they equal what the window's
    own stacks and the drains in it add up to."""
    import random

    from ktop.stacktree import hot_functions

    rng = random.Random(7)
    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=3.0)
    drained = []
    for second in range(12):
        rows = [count(rng.choice((100, 200, 300)), "w", rng.randint(1, 40), stacks[name])
                for name in rng.sample(["urandom", "copy", "stray"], 2)]
        rows += [count(0, "swapper/0", rng.randint(1, 90) if second < 6 else 0, stacks["halt"]),
                 count(0, "swapper/1", rng.randint(0, 5), stacks["irq_in_idle"]),
                 user_mode(300, "w", rng.randint(0, 30))]
        if second >= 6:  # the idle function, now in a busy task's stack: not idle any more
            rows.append(count(300, "w", 5, stacks["halt"]))
        agg.add(drain(float(second), 1.0, *rows))
        drained.append(rows)
        for cumulative, intervals in ((False, drained[-3:]), (True, drained)):
            profile = agg.profile(cumulative=cumulative)
            idle = sum(r.samples for rows in intervals for r in rows
                       if r.pid == 0 and r.kernel == stacks["halt"])
            user = sum(r.samples for rows in intervals for r in rows if r.user_mode)
            assert (profile.idle_samples, profile.user_samples) == (idle, user)
            assert profile.total_samples == sum(r.samples for rows in intervals for r in rows)
            assert profile.functions == hot_functions(profile.stacks,
                                                      HZ * profile.window_s * CPUS)


def test_rows_met_again_as_new_objects_or_after_a_fold_count_as_the_same_stack(kallsyms, stacks):
    """The aggregator finds the sampler's rows by identity: the same row object interval
    after interval, a new object for the same stacks (the sampler empties its maps), a row
    not met since a sweep of the rows, and a row whose number a fold of exited processes
    forgot all count where their stacks say."""
    from ktop.aggregate.cpu import ROWS_FORGOTTEN_EVERY
    from ktop.collectors.cpu import StackRow

    agg = CpuAggregator(kallsyms, HZ, CPUS, window_s=1)
    urandom = StackRow(4242, "dd", stacks["urandom"], (), False)
    copy = StackRow(4243, "dd", stacks["copy"], (), False)

    def add(t, *rows_samples):
        rows, samples = zip(*rows_samples)
        agg.add(CpuDrain(float(t), t + 1.0, rows, samples, {}))
        return by_symbol(agg.profile())

    t = 0
    for t in range(2 * ROWS_FORGOTTEN_EVERY + 1):  # through two sweeps
        functions = add(t, (urandom, 10), (copy, 3))
        assert functions["chacha_permute"].samples == 10
        assert functions["_copy_to_iter"].samples == 3
    again = StackRow(*urandom.identity())  # the same stacks, a new object
    functions = add(t + 1, (again, 7), (urandom, 5))
    assert functions["chacha_permute"].samples == 12
    assert len(agg._ids.keys) == 2, "the same stacks were numbered twice"
    # A fold forgets pid 4243's numbers (it exited); its row met again is counted anew.
    crowd = [(StackRow(10**5 + n, "sh", stacks["copy"], (), False), 1) for n in range(6000)]
    add(t + 2, *crowd)  # short-lived processes crowd the totals, so that the fold runs
    agg.fold_exited(lambda pid: pid == 4242)
    functions = add(t + 3, (copy, 4), (urandom, 1))
    assert functions["_copy_to_iter"].samples == 4
    assert {s.pid for s in agg.profile().stacks} == {4242, 4243}


def test_stacks_that_differ_in_instructions_share_their_functions(kallsyms, stacks):
    """At 4000 Hz most new stacks are a new leaf instruction under callers already seen, and
    the totals keep each while its process lives: their functions are one set, and each
    (function, module) one object in every set, not a copy per stack."""
    urandom, copy = stacks["urandom"], stacks["copy"]
    leaves = [(urandom[0] + 4 * i, *urandom[1:]) for i in range(4)]
    agg = CpuAggregator(kallsyms, HZ, CPUS)
    agg.add(drain(100.0, 1.0, *(count(4242, "dd", 10, k) for k in leaves),
                  count(4242, "dd", 5, copy)))
    sets = {agg._ids.keys[n].kernel: s for n, s in agg._ids.functions.items()}
    assert all(sets[k] is sets[leaves[0]] for k in leaves)
    shared = [f for s in (sets[leaves[0]], sets[copy]) for f in s
              if f[0] == "get_random_bytes_user"]
    assert len(shared) == 2 and shared[0] is shared[1]
    functions = by_symbol(agg.profile())
    assert functions["chacha_permute"].samples == 40
    assert functions["get_random_bytes_user"].children == 45
