"""What ktop itself costs while it runs: its process's CPU time, and the run time of its BPF
programs, which the kernel charges to whatever task they interrupted, not to ktop.

BPF run time is counted by the kernel only while statistics are enabled (a
BPF_ENABLE_STATS descriptor held open, as bpftop does; the sysctl kernel.bpf_stats_enabled=1
does the same for everyone), and read per program with BPF_OBJ_GET_INFO_BY_FD. While on,
they cost every run of every program on the machine two clock reads: ~45 ns here, 4.5% of a
pipe round trip on one CPU under the waits programs (bench/waits_cost.py). So ktop holds them
one refresh in STATS_EVERY, and its BPF figure is the latest such refresh's (continuous when
the sysctl holds them on anyway).
"""

from __future__ import annotations

import os
import threading
import time

from ktop.collectors.bpfsys import enable_stats, program_info
from ktop.model import SelfCostRow

_STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
# BPF run time is measured over one refresh in this many (see above).
STATS_EVERY = 5
MIN_SAMPLE_S = 0.5


def stats_enabled_by_sysctl(path: str = _STATS_SYSCTL) -> bool:
    try:
        with open(path) as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def bpf_programs() -> dict[int, int]:
    """The BPF programs this process holds: descriptor -> the kernel's program id."""
    programs = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:bpf-prog":
                continue
        except OSError:  # closed between listing and reading
            continue
        info = program_info(int(name))
        if info is not None:
            programs[int(name)] = int(info.id)
    return programs


def bpf_run_time_ns(programs: dict[int, int]) -> int | None:
    """Run time of these programs (descriptor -> id), summed in nanoseconds; None if one of
    them is gone (its descriptor closed, or now naming something else)."""
    by_pane = bpf_run_times(programs)
    return None if by_pane is None else sum(by_pane.values())


def pane_of_program(name: str) -> str:
    """The pane a BPF program serves, by its name (ktop.registry' bpf_programs); "" for none."""
    from ktop.registry import PANES  # noqa: PLC0415

    return next((spec.name for spec in PANES
                 if any(name.startswith(prefix) for prefix in spec.bpf_programs)), "")


def bpf_run_times(programs: dict[int, int]) -> dict[str, int] | None:
    """Run time of these programs by pane, in nanoseconds; None if one is gone."""
    totals: dict[str, int] = {}
    for fd, prog_id in programs.items():
        info = program_info(fd)
        if info is None or info.id != prog_id:
            return None
        pane = pane_of_program(info.name.decode(errors="replace"))
        totals[pane] = totals.get(pane, 0) + info.run_time_ns
    return totals


class SelfCost:
    """ktop's CPU% over the span since the previous measure, and its BPF programs' CPU% over
    the latest sampled span (one in `stats_every`, with the statistics on only then).

    The process's CPU time comes from CLOCK_PROCESS_CPUTIME_ID (every thread, exited ones
    included, in nanoseconds): /proc's clock ticks would read a 0.5% process as 0% or 1%."""

    def __init__(self, stats_every: int = STATS_EVERY) -> None:
        self._stats_every = max(1, stats_every)
        self._lock = threading.Lock()  # start_span() comes from the loader thread
        self._stats_fd: int | None = None
        self._always = False  # the sysctl holds the statistics on for everyone
        self._counting = False  # run time can be counted at all
        self._spans = 0
        self._previous: tuple[float, float] | None = None
        # The sampled span in progress: its start and the run times then, by pane.
        self._sample: tuple[float, dict[str, int]] | None = None
        self._bpf: tuple[float, dict[str, float]] | None = None  # the latest sample's
        # fd -> program id: programs load at start-up, and may stop: listed again then
        self._programs: dict[int, int] = {}

    @property
    def stats_on(self) -> bool:
        """Whether this process holds the kernel's BPF statistics on now."""
        return self._stats_fd is not None

    def start(self) -> None:
        self._always = stats_enabled_by_sysctl()
        self._counting = self._always or self._hold_stats()
        self.start_span()

    def start_span(self) -> None:
        """The next measure covers from now on (and samples BPF run time)."""
        with self._lock:
            now = time.monotonic()
            self._previous = (now, time.process_time())
            self._spans = 0
            self._begin_sample(now)

    def _hold_stats(self) -> bool:
        if self._stats_fd is None:
            self._stats_fd = enable_stats()
        return self._stats_fd is not None

    def _release_stats(self) -> None:
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None

    def _begin_sample(self, now: float) -> None:
        if self._counting and (self._always or self._hold_stats()):
            self._sample = (now, self._bpf_ns())

    def _end_sample(self, now: float) -> None:
        if self._sample is None:
            return
        began, before = self._sample
        self._sample = None
        elapsed = now - began
        if elapsed <= 0:
            return
        # A pane whose programs were reloaded starts again from 0: no negative share.
        panes = {pane: max(0.0, 100.0 * (ns - before.get(pane, 0)) / 1e9 / elapsed)
                 for pane, ns in self._bpf_ns().items()}
        self._bpf = (sum(panes.values()), dict(sorted(
            ((p or "other", round(v, 3)) for p, v in panes.items()), key=lambda kv: -kv[1])))

    def programs_changed(self) -> None:
        """A collector attached or stopped: list the programs again at the next measure."""
        self._programs = {}

    def _bpf_ns(self) -> dict[str, int]:
        """Run time so far by pane."""
        totals = bpf_run_times(self._programs) if self._programs else None
        if totals is None:
            self._programs = bpf_programs()
            totals = bpf_run_times(self._programs) or {}
        return totals

    def measure(self) -> SelfCostRow | None:
        """None before start() or on the first call's zero-length span."""
        with self._lock:
            if self._previous is None:
                return None
            now, cpu = time.monotonic(), time.process_time()
            before_time, before_cpu = self._previous
            self._previous = (now, cpu)
            # A sample shorter than that (a measure right after start) goes on to the next.
            if self._sample is None or now - self._sample[0] >= MIN_SAMPLE_S:
                self._end_sample(now)
                self._spans += 1
                if self._always or self._spans % self._stats_every == 0:
                    self._begin_sample(now)
                else:
                    self._release_stats()
            elapsed = now - before_time
            if elapsed <= 0:
                return None
            cpu_percent = 100.0 * (cpu - before_cpu) / elapsed
            if not self._counting or self._bpf is None:
                return SelfCostRow(cpu_percent=cpu_percent, bpf_percent=None)
            bpf_percent, panes = self._bpf
            return SelfCostRow(cpu_percent=cpu_percent, bpf_percent=bpf_percent,
                               bpf_panes=panes,
                               bpf_every=1 if self._always else self._stats_every)

    def close(self) -> None:
        self._release_stats()


# --- the cost budget (--max-cost) -----------------------------------------------------------

# Of one CPU, ktop's process and its BPF programs together. perf top at its default 4000 Hz
# took 3.5% under `perf bench sched messaging` here and 0.2% idle; ktop, five panes, 1.8%
# idle and 20-28% there (issue 39): 10% leaves the quiet and ordinary machine untouched
# and holds the scheduler-busy one to a tenth of a CPU, past which the steps below apply.
DEFAULT_MAX_COST = 10.0
# The steps past the budget, in the order taken (undone in reverse): what each costs less,
# what it drops. Each keeps every total exact: stacks walked for fewer waits, the walked
# scaled (the waits pane's short waits are 1 in 64 below any step).
BUDGET_STEPS: tuple[tuple[str, tuple[int, int]], ...] = (
    ("wait stacks: short waits 1 in 512", (512, 1)),
    ("wait stacks: short none, long 1 in 8", (0, 8)),
)
OVER_REFRESHES = 2  # refreshes over the budget before a step is taken
UNDER_REFRESHES = 3  # refreshes of less load before a step is undone
LOAD_FALLEN = 0.5  # the load a step was taken at, fallen to this share: undo it


def context_switches(path: str = "/proc/stat") -> int | None:
    """The machine's context switches since boot (the waits pane's events, roughly)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("ctxt "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class CostBudget:
    """Past `max_percent` of one CPU (ktop's process + its BPF programs) for OVER_REFRESHES
    refreshes, take the next of BUDGET_STEPS; undo the last once the load it was taken at
    (context switches a second) has fallen by half, or the cost is under half the budget,
    for UNDER_REFRESHES refreshes. 0 turns the budget off."""

    def __init__(self, max_percent: float = DEFAULT_MAX_COST) -> None:
        self.max_percent = max_percent
        self.step = 0  # steps in force
        self._taken_at: list[float] = []  # the load (switches/s) at each step taken
        self._over = self._under = 0
        self._last: tuple[float, int] | None = None  # (monotonic, switches)

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(name for name, _ in BUDGET_STEPS[:self.step])

    @property
    def walk_every(self) -> tuple[int, int] | None:
        """The waits pane's [short, long] walk periods the steps set (None: its own)."""
        return BUDGET_STEPS[self.step - 1][1] if self.step else None

    def load(self, switches: int | None = None) -> float | None:
        """Context switches a second since the last call."""
        switches = context_switches() if switches is None else switches
        now = time.monotonic()
        last, self._last = self._last, (now, switches) if switches is not None else None
        if last is None or switches is None or now <= last[0]:
            return None
        return (switches - last[1]) / (now - last[0])

    def observe(self, cost_percent: float, load: float | None) -> bool:
        """One refresh's cost (% of one CPU) and load; True when the steps changed."""
        if self.max_percent <= 0:
            return False
        if cost_percent > self.max_percent and self.step < len(BUDGET_STEPS):
            self._under = 0
            self._over += 1
            if self._over >= OVER_REFRESHES:
                self._over = 0
                self.step += 1
                # (The BPF figure is a few refreshes old: a step it takes after the load
                # fell is owed to the load before.)
                self._taken_at.append(max([load or 0.0, *self._taken_at[-1:]]))
                return True
            return False
        self._over = 0
        if not self.step:
            return False
        fallen = load is not None and load <= LOAD_FALLEN * self._taken_at[-1]
        if fallen or cost_percent < self.max_percent / 2:
            self._under += 1
            if self._under >= UNDER_REFRESHES:
                self._under = 0
                self.step -= 1
                self._taken_at.pop()
                return True
        else:
            self._under = 0
        return False
