"""The live data source: starts every collector, and turns each interval into a Snapshot.

The processes pane needs no BPF, so it is ready at once; the BPF panes load one after the
other in a background thread (hot functions first: it is what a user looks at first), and
each pane shows data as soon as its own collector is attached. `collect()` runs in one
worker thread (or the headless snapshot loop) and never touches the UI. A collector that
cannot start, or fails later, makes its pane unavailable with a reason; the others go on.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from ktop import __version__
from ktop.aggregate.diskstats import IostatWindow
from ktop.cgroups import cgroup2_mount
from ktop.collectors import bpfload, loader
from ktop.collectors.bpfload import Unavailable, trim_heap
from ktop.collectors.diskstats import DiskStatsReader
from ktop.collectors.maps import wait_for_programs
from ktop.collectors.pressure import PressureReader
from ktop.collectors.procfiles import task_exists
from ktop.collectors.procstat import CpuTicks, read_cpu_ticks
from ktop.collectors.selfcost import DEFAULT_MAX_COST, CostBudget, SelfCost
from ktop.collectors.waits import DEFAULT_MIN_WALK, DEFAULT_WALK_EVERY, WalkMinimums
from ktop.losses import BPF_CACHE_REPLACED
from ktop.model import (
    PANE_FUNCTIONS,
    CpuTimes,
    ProcessRow,
    SelfCostRow,
    Snapshot,
    TaskCounts,
    UserFrame,
)
from ktop.registry import Aggregator, Collector, bpf_panes, process_reader
from ktop.symbolize.kernel import Kallsyms, hidden_reason
from ktop.units import format_span

if TYPE_CHECKING:
    from ktop.record.fileformat import RecordIndex
    from ktop.record.replay import TimelineView
    from ktop.symbolize.user import UserSymbolizer


@dataclass(frozen=True)
class Options:
    hz: int = 99
    interval_s: float = 1.0
    window_s: float = 5.0
    cumulative: bool = False
    vmlinux: str | None = None  # debug ELF of the kernel for file:line (default: distro path)
    offcpu_min: WalkMinimums = DEFAULT_MIN_WALK  # waits pane: stacks of waits predicted this long
    cgroup: str | None = None  # --cgroup, as resolved: the header shows its own PSI too
    panes: frozenset[str] = frozenset(spec.name for spec in bpf_panes())
    max_cost: float = DEFAULT_MAX_COST  # --max-cost: % of one CPU, 0 for no budget


class ProcReader(Protocol):
    """The /proc reader of the pane whose rows it reads (PaneDef.reader: the processes')."""

    tasks: TaskCounts | None  # the kernel's task counts at the last collect

    def start(self) -> None: ...
    def collect(self, ran: frozenset[int] | set[int] | None = None) -> tuple[ProcessRow, ...]: ...
    def close(self) -> None: ...


class Timeline(Protocol):
    """A recording as a data source moves through time (ktop.record.replay.ReplaySource): what the
    app's timeline keys and bar need of it."""

    records: RecordIndex
    interval_s: float  # a record's typical span

    def view(self) -> TimelineView: ...
    def go_to(self, index: int) -> None: ...
    def step(self, records: int) -> None: ...
    def step_seconds(self, seconds: float) -> None: ...
    # Raises ValueError, with a message for the user, for a time the recording does not hold.
    def go_to_time(self, text: str) -> None: ...
    def set_window(self, records: int) -> None: ...
    def collect(self) -> Snapshot: ...


class DataSource(Protocol):
    """What the app and the snapshot writer need: live collectors or recorded data."""

    cumulative: bool
    live: bool  # False for recorded data: its window cannot change
    timeline: Timeline | None  # a recording's, which the user moves through
    # Called (from any thread) when a pane's collector has attached: worth a refresh soon.
    on_attached: Callable[[], None] | None

    # time.monotonic() when start() began (0 before): the first refresh measures from it.
    started_at: float

    def start(self, wait: bool = True, patient: bool = False) -> None: ...
    def collect(self) -> Snapshot: ...
    def close(self) -> None: ...
    # The first screen is up: loading may now take the CPU it was yielding to it.
    def hurry_loading(self) -> None: ...


@dataclass(frozen=True)
class PaneSpec:
    """A BPF pane as the engine loads it: its name and how to build its collector and
    aggregator (ktop.registry gives each pane's; tests hand the engine their own)."""

    name: str
    build: Callable[[LiveSource], tuple[Collector, Aggregator]]


# glibc keeps what each thread frees in that thread's arena: hand it back now and then, or
# the collect thread's garbage of every refresh stays resident.
TRIM_EVERY = 30  # refreshes
# Totals since start fold exited processes once crowded; looking for them walks every entry,
# so not on every refresh.
FOLD_EVERY = 10  # refreshes


# Quitting during start-up waits this long for the loader to close what it just attached
# (a cancelled compile returns at once; the process exiting would close it anyway).
LOADER_JOIN_S = 2.0

# The compiler's niceness while the first screen is drawn: competing for the one free CPU,
# a compile makes the first screen later and itself no sooner (README: Start-up).
COMPILE_NICE = 10
# Building the first pane parses the kernel's symbols, holding the interpreter's lock: a
# patient start builds it once the first frame is drawn (README: Start-up), or after this
# long without one.
FIRST_FRAME_WAIT_S = 1.0

def bpf_specs() -> list[PaneSpec]:
    """Every BPF pane of ktop.registry, in load order."""
    return [PaneSpec(spec.name, spec.build) for spec in bpf_panes() if spec.build is not None]


class LiveSource:
    live = True
    timeline = None

    def __init__(self, options: Options = Options(), specs: Iterable[PaneSpec] | None = None) -> None:
        self.options = options
        specs = bpf_specs() if specs is None else specs
        self.cumulative = options.cumulative
        self.on_attached: Callable[[], None] | None = None
        self._all_specs = list(specs)  # what set_panes() may add
        self._specs = [spec for spec in self._all_specs if spec.name in options.panes]
        # Said as soon as known: the first compile finds them.
        self.headers = "looking for them" if self._specs else "not needed (no BPF pane)"
        self._processes: ProcReader = process_reader()
        # The processes the kernel saw run since the processes were last read (a drain's
        # `ran`, the waits pane's), or None while not known for the whole span.
        self._ran: set[int] | None = None
        self._ran_known = False  # the last drains had one
        self._pressure = PressureReader()
        mount = cgroup2_mount() if options.cgroup else None
        self._cgroup_pressure = (PressureReader.of_cgroup(options.cgroup, mount)
                                 if options.cgroup and mount else None)
        self._diskstats = DiskStatsReader()  # the block pane's disks view: needs no root
        self._iostat = IostatWindow(options.window_s)
        self._self_cost = SelfCost()
        self._budget = CostBudget(options.max_cost)
        self._loading_seen_at = -math.inf  # when a refresh last saw a pane loading
        self._cost_measured_at: float | None = None
        # /proc/stat at the start, then at each collect without a CPU profile to split it.
        self._ticks = CpuTicks()
        self._proc_stat_split()
        self.started_at = 0.0
        self._patient = False
        self._kallsyms: Kallsyms | None = None
        # Made at the first user stack: pyelftools is not imported before the first screen.
        self._user_symbols: UserSymbolizer | None = None
        # Shared with the loader thread, under _lock.
        self._lock = threading.Lock()
        self._unavailable: dict[str, str] = {}
        self._loading: dict[str, tuple[str, float]] = {}  # pane -> (what, since monotonic)
        self._cache_replaced: dict[str, int] = {}  # pane -> its cached programs replaced
        self._kallsyms_lock = threading.Lock()  # the panes load side by side
        self._running: dict[str, tuple[Collector, Aggregator]] = {}
        self._to_close: list[Collector] = []  # panes left out (set_panes), closed at a drain
        self._closed = False
        self._loaded = threading.Event()
        self._drawn = threading.Event()  # hurry_loading(): the first screen is up
        self._loader: threading.Thread | None = None
        self._collects = 0
        self._last_collect = 0.0
        self._span_start = 0.0  # restart_span(): when the panes' counts begin (0: at start)
        self._last_span = 0.0
        self._drained_at = (0.0, 0.0)  # the last drain's end of interval: monotonic, wall
        self._scan_late_s = 0.0  # how long after it the processes were read

    @property
    def unavailable(self) -> dict[str, str]:
        with self._lock:
            return dict(self._unavailable)

    # ---- start-up -------------------------------------------------------------------------

    def start(self, wait: bool = True, patient: bool = False) -> None:
        """Start the processes pane, then load the BPF panes in a background thread.
        With wait, return once every BPF pane is attached or has said why it cannot be.
        Patient: the compiler runs niced, and the panes are built (kernel symbols parsed),
        only after hurry_loading() (the CLI starts loading before Textual, and the first
        screen must wait neither for clang nor for the symbols).
        Once started, starting again only waits."""
        if self.started_at:
            if wait:
                self._loaded.wait()
            return
        self.started_at = time.monotonic()
        self._patient = patient
        self._processes.start()
        self._diskstats.restart()
        self._self_cost.start()
        with self._lock:
            now = time.monotonic()
            for spec in self._specs:
                self._loading[spec.name] = ("reading the kernel's symbols", now)
        if self._specs:
            self._loader = threading.Thread(target=self._load_all, name="ktop-loader", daemon=True)
            self._loader.start()
        else:
            self._loaded.set()
        if wait:
            self._loaded.wait()

    def hurry_loading(self) -> None:
        self._drawn.set()
        if self._patient:
            self._patient = False
            loader.hurry()

    def wait_loaded(self, timeout: float | None = None) -> bool:
        return self._loaded.wait(timeout)

    def _load_all(self) -> None:
        try:
            with loader.shared_compiler(COMPILE_NICE if self._patient else 0):
                if self._patient:
                    self._drawn.wait(FIRST_FRAME_WAIT_S)
                # Side by side: a program from the cache is mostly the verifier's time, out
                # of the interpreter's lock; compiles run as the machine has CPUs to spare.
                threads = [threading.Thread(target=self._load, args=(spec,), daemon=True,
                                            name=f"ktop-load-{spec.name}")
                           for spec in self._specs]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if self._closed:
                    return
            self.headers = bpfload.headers_description()
            # What start-up made (kernel symbols, widgets, map descriptions) lives as long
            # as ktop: out of the collector's sight, a full collection no longer walks it.
            gc.freeze()
            # What ktop costs from here on: the next figure no longer counts compiling.
            self._self_cost.start_span()
        finally:
            self._loaded.set()

    def _load(self, spec: PaneSpec) -> None:
        if self._closed:
            return

        def doing(what: str) -> None:
            with self._lock:
                if spec.name in self._loading:
                    self._loading[spec.name] = (what, time.monotonic())

        bpfload.on_status(doing)
        pair = None
        try:
            pair = spec.build(self)
            doing("loading its BPF program")  # bpfload says more: from the cache, compiling
            pair[0].start()
            reason = ""
        except Unavailable as e:
            reason = str(e)
        except Exception as e:  # a bcc surprise must cost one pane, never the app
            reason = f"failed to start: {e}"
        replaced = len(bpfload.take_notes())
        if bpfload.headers_looked_for():  # said once the first compile found them
            self.headers = bpfload.headers_description()
        with self._lock:
            self._loading.pop(spec.name, None)
            if spec.name not in self.options.panes or spec.name in self._running:
                # Left out (key p) while it loaded, or loaded meanwhile by another choice.
                if pair is not None and not reason:
                    pair[0].close()
                return
            if replaced:
                self._cache_replaced[spec.name] = replaced
            if reason:
                self._unavailable[spec.name] = reason
            elif pair is None:
                raise AssertionError("built without a reason or a pair")
            elif self._closed:  # quit while this one compiled
                pair[0].close()
            else:
                self._running[spec.name] = pair
                # In the registry's order, whichever loaded first.
                self._running = {s.name: self._running[s.name] for s in self._specs
                                 if s.name in self._running}
                self._self_cost.programs_changed()
        if not reason and self.on_attached:
            self.on_attached()

    # ---- the panes chosen, changed live (key p) ---------------------------------------------

    def set_panes(self, names: frozenset[str]) -> None:
        """Load only these BPF panes from now on: a pane left out is detached (its collector
        closed: its programs unloaded, its maps freed), one added loads in a thread of its
        own, as at start-up. A pane not chosen costs nothing."""
        all_specs = {spec.name: spec for spec in self._all_specs}
        with self._lock:
            if self._closed:
                return
            self.options = replace(self.options, panes=frozenset(names))
            dropped = [name for name in list(self._running) + list(self._unavailable)
                       + list(self._loading) if name not in names]
            # Closed by the collecting thread at its next drain: never under a drain.
            self._to_close += [self._running.pop(name)[0] for name in dropped
                               if name in self._running]
            for name in dropped:
                self._unavailable.pop(name, None)
                self._loading.pop(name, None)
                self._cache_replaced.pop(name, None)
            added = [all_specs[name] for name in names
                     if name in all_specs and name not in {s.name for s in self._specs}]
            self._specs = [spec for spec in self._all_specs if spec.name in names]
            now = time.monotonic()
            for spec in added:
                self._loading[spec.name] = ("reading the kernel's symbols", now)
        self._wake()
        if not self.started_at:
            return
        for spec in added:
            threading.Thread(target=self._load, args=(spec,), daemon=True,
                             name=f"ktop-load-{spec.name}").start()

    def kallsyms(self) -> Kallsyms:
        with self._kallsyms_lock:  # read once, whichever pane asks first
            if self._kallsyms is None:
                bpfload.check_privileges()  # "needs root" says more than "addresses hidden"
                self._kallsyms = Kallsyms.load()
        if self._kallsyms.hidden:
            raise Unavailable(hidden_reason())
        return self._kallsyms

    def kernel_lines(self):
        """The debug vmlinux line table, or None and why (said once, in the stacks view)."""
        from ktop.symbolize.lines import KernelLineTable  # noqa: PLC0415

        table = KernelLineTable.open(path=self.options.vmlinux)
        if table is not None:
            return table, f"file:line from {self.options.vmlinux or 'the debug vmlinux'}"
        where = self.options.vmlinux or f"/usr/lib/debug/boot/vmlinux-{platform.release()}"
        return None, f"no kernel file:line: no debug vmlinux at {where} (--vmlinux PATH)"

    def resolve_user(self, pid: int, addresses) -> tuple[UserFrame, ...]:
        """User frames named while the process lives; a process that exited keeps the names
        resolved before (the aggregate holds them), later addresses show as hex."""
        if self._user_symbols is None:
            from ktop.symbolize.user import UserSymbolizer  # noqa: PLC0415

            self._user_symbols = UserSymbolizer()
        return tuple(self._user_symbols.resolve(pid, addresses))

    # ---- each interval --------------------------------------------------------------------

    def collect(self, latest: bool = False) -> Snapshot:
        """The window (or totals since start) after draining every collector; with latest,
        the newest interval alone, as `ktop --record` keeps each one."""
        read_at_the_end: list[Any] = []

        def read_files() -> None:
            # Read as the panes' intervals end, not after the maps are read and the processes
            # scanned (seconds on a saturated machine: the iostat view covered 20.85 s beside
            # the CPU pane's 1.27 s): one record, one span.
            disk_interval = self._diskstats.read()
            if disk_interval is not None:
                self._iostat.add(disk_interval)
            read_at_the_end.extend((
                self._proc_stat_split(), self._pressure.read(),
                self._cgroup_pressure.read() if self._cgroup_pressure else None))

        running = self._drain_all(read_files)
        drained_at, taken_at = self._drained_at
        split, pressure, cgroup_pressure = read_at_the_end
        profiles: dict[str, Any] = {}
        for name, (collector, aggregator) in running:
            try:
                profiles[name] = (aggregator.profile(latest=True) if latest
                                  else aggregator.profile(self.cumulative))
            except Exception as e:
                self._stopped(name, collector, e)
        processes = self._processes.collect(self._ran)
        self._ran = set() if self._ran_known else None  # known from the drain just done
        # How long after the drain the processes were read: their rows are that much later
        # than the rest of the record (each process's rates are over its own interval).
        self._scan_late_s = time.monotonic() - drained_at
        if self._user_symbols is not None:
            self._user_symbols.retain(p.pid for p in processes)
        for name, count in self._cache_replaced.items():  # said in L (bpfload.note)
            if profiles.get(name) is not None:
                profiles[name] = dataclasses.replace(profiles[name], lost={
                    **profiles[name].lost, BPF_CACHE_REPLACED: count})
        cpu_profile = profiles.get(PANE_FUNCTIONS)  # its span is the window's
        if cpu_profile and self._user_symbols is not None and self._user_symbols.unread:
            # Binaries whose symbols were past what is read: their frames are [unknown].
            cpu_profile = profiles[PANE_FUNCTIONS] = dataclasses.replace(cpu_profile, lost={
                **cpu_profile.lost, "binary_unread": self._user_symbols.unread})
        # Without CPU samples, a record's span is the time since the last drain.
        self._last_span = drained_at - (self._last_collect or self.started_at)
        self._last_collect = drained_at
        cpu_times = None
        if cpu_profile:
            duration = cpu_profile.window_s
        else:
            duration = (self._last_span if latest
                        else drained_at - (self._span_start or self.started_at))
            cpu_times = split
        if self._collects % TRIM_EVERY == 0:
            trim_heap()
        with self._lock:
            unavailable = dict(self._unavailable)
            loading = self._loading_text()
        return Snapshot(
            ktop_version=__version__,
            kernel=platform.release(),
            hostname=socket.gethostname(),
            taken_at=taken_at,  # the drain's: a record ends where the next begins
            duration_s=duration,
            headers=self.headers,
            processes=processes,
            **self._profile_fields(profiles),
            unavailable=unavailable,
            loading=loading,
            cost=self._measure_cost(),
            tasks=(dataclasses.replace(self._processes.tasks, read_late_s=self._scan_late_s)
                   if self._processes.tasks is not None else None),
            cpu_times=cpu_times,
            pressure=pressure,
            cgroup_pressure=cgroup_pressure,
            cgroup_pressure_of=(self.options.cgroup or "") if self._cgroup_pressure else "",
            iostat=self._iostat.profile(self.cumulative, latest),
            cumulative=self.cumulative and not latest,
        )

    def _measure_cost(self) -> SelfCostRow | None:
        """What ktop cost over the last refresh, and the budget's steps past --max-cost,
        taken or undone on it (applied to the collectors at once)."""
        cost = self._self_cost.measure()
        budget = self._budget
        load = budget.load()
        if cost is None or budget.max_percent <= 0:
            return cost
        # Loading a pane (kernel symbols, compiling or verifying its programs) is a one-off
        # cost, not one to degrade for: a refresh that saw any of it is not held to the budget.
        now = time.monotonic()
        with self._lock:
            if self._loading:
                self._loading_seen_at = now
        began, self._cost_measured_at = self._cost_measured_at, now
        steady = began is not None and began > self._loading_seen_at
        if steady and budget.observe(cost.cpu_percent + (cost.bpf_percent or 0.0), load):
            with self._lock:
                running = list(self._running.values())
            for collector, _ in running:
                walks = getattr(collector, "set_walk_every", None)
                if walks is not None:
                    walks(*(budget.walk_every or DEFAULT_WALK_EVERY))
        return dataclasses.replace(cost, max_cost=budget.max_percent,
                                   budget_steps=budget.steps)

    def _drain_all(self, at_the_end: Callable[[], None] | None = None,
                   ) -> list[tuple[str, tuple[Collector, Aggregator]]]:
        """Every running collector drained into its aggregator (those that fail stop, their
        pane says why), exited processes folded now and then; the panes still running.
        `at_the_end` runs as soon as every interval has ended, before any is read."""
        self._close_left_out()
        with self._lock:
            running = list(self._running.items())
        # Every collector's interval ended (its maps flipped) before any is read, and every
        # one read before any drain is folded: their intervals end together (reading the CPU
        # pane's maps under load took seconds, which the next pane's interval gained).
        # Stamped as the first pane's interval ends (the CPU pane's, whose span is the
        # record's): the waits pane's end settles every thread, 0.2 s under heavy load.
        self._drained_at = (time.monotonic(), time.time())
        ended = False
        for name, (collector, _aggregator) in running:
            end_interval = getattr(collector, "end_interval", None)
            if end_interval is not None:
                try:
                    end_interval()
                    ended = True
                except Exception as e:
                    self._stopped(name, collector, e)
        if at_the_end is not None:
            at_the_end()
        if ended:  # no program still adds to the maps about to be read
            wait_for_programs()
        with self._lock:
            running = [(name, pair) for name, pair in running if name in self._running]
        drains = []
        for name, (collector, aggregator) in running:
            try:
                drains.append((name, collector, aggregator, collector.drain()))
            except Exception as e:
                self._stopped(name, collector, e)
        # What the waits pane's drain says ran: the processes pane need not read the rest.
        ran = [drain.ran for *_, drain in drains if hasattr(drain, "ran")]
        self._ran_known = bool(ran)  # from the end of this drain on
        if not ran or None in ran:
            self._ran = None
        elif self._ran is not None:
            self._ran.update(*ran)
        for name, collector, aggregator, drain in drains:
            try:
                aggregator.add(drain)
            except Exception as e:
                self._stopped(name, collector, e)
        with self._lock:
            running = [(name, pair) for name, pair in running if name in self._running]
        self._collects += 1
        if self._collects % FOLD_EVERY == 0:
            is_alive = functools.cache(task_exists)  # asked once per pid
            for _, (_, aggregator) in running:
                aggregator.fold_exited(is_alive)
        return running

    def _close_left_out(self) -> None:
        """Close the collectors of the panes left out since the last drain: their programs
        unloaded, their maps freed."""
        with self._lock:
            closing, self._to_close = self._to_close, []
        for collector in closing:
            collector.close()
        if closing:
            self._self_cost.programs_changed()

    def _wake(self) -> None:
        if self.on_attached is not None:
            self.on_attached()

    def _stopped(self, name: str, collector: Collector, error: Exception) -> None:
        with self._lock:
            current = self._running.get(name)
            if current is None or current[0] is collector:  # (not a pane added anew)
                if name in self.options.panes:  # (not one left out meanwhile)
                    self._unavailable[name] = f"stopped: {error}"
                self._running.pop(name, None)
        collector.close()
        self._self_cost.programs_changed()

    def keep_up(self) -> None:
        """Drain every collector, without a snapshot: a headless run empties the kernel's
        maps every interval, as the screen does (a map left for the whole run fills)."""
        self._drain_all()

    def restart_span(self) -> float:
        """Every pane counts from now: what was counted before is dropped. A headless
        snapshot starts here once all panes are attached, so they cover the same seconds
        (they attach one after the other). Returns when the span began (monotonic)."""
        with self._lock:
            running = list(self._running.items())
        # Twice: the first drains empty what piled up since each attached (slow, and the
        # panes drained later began that much later: 1.23 s of CPU beside 1.10 s of block
        # I/O under load), the second, quick, starts them all within milliseconds.
        began = 0.0
        for _sweep in range(2):
            began = time.monotonic()
            for name, (collector, _) in running:
                try:
                    collector.drain()
                except Exception as e:
                    self._stopped(name, collector, e)
            running = [(name, pair) for name, pair in running if name in self._running]
        self._processes.collect()
        self._ran = None  # drained apart: what ran since is not known
        self._diskstats.restart()
        self._iostat.clear()
        self._proc_stat_split()
        self._last_collect = self._span_start = began
        return began

    @staticmethod
    def _profile_fields(profiles: dict[str, Any]) -> dict[str, Any]:
        """Each BPF pane's profile by its Snapshot field (None for one not running)."""
        return {spec.field: profiles.get(spec.name) for spec in bpf_panes()}

    def _proc_stat_split(self) -> CpuTimes | None:
        """The CPU split since the last collect, from /proc/stat: without root (or while the
        sampler loads) the header still has it."""
        try:
            ticks = read_cpu_ticks()
        except (OSError, ValueError):
            return None
        before, self._ticks = self._ticks, ticks
        return (ticks - before).shares()

    def interval_snapshot(self, shown: Snapshot) -> Snapshot:
        """The newest interval alone, for recording the live session (`R`): called right after
        collect() returned `shown`, from the same thread, before the next drain."""
        with self._lock:
            running = dict(self._running)
        profiles: dict[str, Any] = {}
        for spec in bpf_panes():
            if getattr(shown, spec.field) is not None and spec.name in running:
                profiles[spec.field] = running[spec.name][1].profile(latest=True)
            else:
                profiles[spec.field] = None
        cpu = profiles.get("cpu")
        return replace(shown, **profiles, duration_s=cpu.window_s if cpu else self._last_span,
                       iostat=self._iostat.profile(latest=True), cumulative=False)

    def _loading_text(self) -> dict[str, str]:
        now = time.monotonic()
        return {
            name: f"{what}... {format_span(now - since)}"
            for name, (what, since) in self._loading.items()
        }

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._drawn.set()  # a loader waiting for the first frame: on to its end
        if self._loader is not None:
            loader.cancel()  # quitting during start-up: stop the compile under way
            self._loader.join(timeout=LOADER_JOIN_S)
        with self._lock:
            running, self._running = list(self._running.values()), {}
        self._close_left_out()
        for collector, _ in running:
            collector.close()
        self._processes.close()
        self._pressure.close()
        if self._cgroup_pressure:
            self._cgroup_pressure.close()
        self._diskstats.close()
        self._self_cost.close()


class RecordedSource:
    """Replays snapshots (from JSON files or tests): the UI without root or a kernel."""

    live = False
    timeline = None

    def __init__(self, snapshots: list[Snapshot]) -> None:
        if not snapshots:
            raise ValueError("no recorded snapshots")
        self._snapshots = snapshots
        self._next = 0
        self.cumulative = False
        self.on_attached = None
        self.started_at = 0.0  # nothing to measure: the first refresh comes at once

    def start(self, wait: bool = True, patient: bool = False) -> None:
        pass

    def hurry_loading(self) -> None:
        pass

    def collect(self) -> Snapshot:
        snapshot = self._snapshots[min(self._next, len(self._snapshots) - 1)]
        self._next += 1
        return snapshot

    def close(self) -> None:
        pass
