"""The live source's start-up and failure paths, with fake collectors (no root, no kernel):
the processes pane is there at once, each BPF pane loads in turn, says what it is doing,
shows data as soon as it attaches, and a pane that fails says why while the others go on."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from ktop import engine
from ktop.collectors import bpfload
from ktop.collectors.bpfload import Unavailable
from ktop.engine import LiveSource, Options, PaneSpec
from ktop.model import PANE_BLOCKIO, PANE_FUNCTIONS, PANE_LOCKS

ALL = frozenset({PANE_FUNCTIONS, PANE_LOCKS, PANE_BLOCKIO})


class FakeCollector:
    def __init__(self, gate: threading.Event | None = None, fail_start: Exception | None = None):
        self.gate = gate
        self.fail_start = fail_start
        self.started = self.closed = False
        self.fail_drain: Exception | None = None

    def start(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(10), "test never opened the gate"
        if self.fail_start:
            raise self.fail_start
        self.started = True

    def drain(self):
        if self.fail_drain:
            raise self.fail_drain
        return "drained"

    def close(self) -> None:
        self.closed = True


class FakeAggregator:
    def __init__(self, name: str) -> None:
        self.name = name
        self.drains = 0

    def add(self, drain) -> None:
        self.drains += 1

    def profile(self, cumulative: bool = False):
        return SimpleNamespace(pane=self.name, drains=self.drains, window_s=1.0)

    def fold_exited(self, is_alive) -> None:
        pass


def spec(name: str, collector: FakeCollector) -> PaneSpec:
    return PaneSpec(name, lambda source: (collector, FakeAggregator(name)))


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


@pytest.fixture
def gates():
    gates = {name: threading.Event() for name in ALL}
    yield gates
    for gate in gates.values():  # never leave a loader thread waiting
        gate.set()


def test_processes_come_at_once_and_each_pane_says_what_it_is_doing(gates):
    collectors = {name: FakeCollector(gates[name]) for name in ALL}
    source = LiveSource(Options(panes=ALL), [spec(n, collectors[n]) for n in
                                             (PANE_FUNCTIONS, PANE_LOCKS, PANE_BLOCKIO)])
    source.start(wait=False)
    try:
        # the panes load side by side: each says it is loading as it begins
        wait_until(lambda: all(source.collect().loading.get(name, "").startswith("loading")
                               for name in (PANE_FUNCTIONS, PANE_LOCKS, PANE_BLOCKIO)))
        first = source.collect()
        assert first.processes, "the processes pane needs no BPF and waits for none"
        assert first.cpu is None and first.locks is None and first.blockio is None
        assert first.loading[PANE_FUNCTIONS].startswith("loading its BPF program... ")
        assert first.loading[PANE_LOCKS].startswith("loading its BPF program... ")
        assert not first.unavailable

        gates[PANE_LOCKS].set()  # locks attach first: their data, while the others load
        wait_until(lambda: PANE_LOCKS not in source.collect().loading)
        second = source.collect()
        assert second.locks.pane == PANE_LOCKS and second.cpu is None
        assert second.loading[PANE_FUNCTIONS].startswith("loading")

        gates[PANE_FUNCTIONS].set()
        gates[PANE_BLOCKIO].set()
        assert source.wait_loaded(10)
        done = source.collect()
        assert done.loading == {} and done.locks.pane == PANE_LOCKS
        assert done.blockio.pane == PANE_BLOCKIO and done.cpu.pane == PANE_FUNCTIONS
    finally:
        source.close()
    assert all(c.closed for c in collectors.values())


def test_a_pane_says_what_its_program_load_is_doing():
    """bpfload tells the pane whether its program comes from the cache or is compiled."""
    told = threading.Event()
    release = threading.Event()

    class Compiling(FakeCollector):
        def start(self) -> None:
            bpfload.say("compiling its BPF program")
            told.set()
            release.wait(10)
            super().start()

    source = LiveSource(Options(panes=ALL), [spec(PANE_FUNCTIONS, Compiling())])
    source.start(wait=False)
    try:
        assert told.wait(10)
        assert source.collect().loading[PANE_FUNCTIONS].startswith("compiling its BPF program")
        release.set()
        assert source.wait_loaded(10)
    finally:
        release.set()
        source.close()


def test_a_patient_start_builds_the_panes_once_the_first_frame_is_drawn():
    """Building hot functions parses the kernel's symbols (0.17 s holding the interpreter's
    lock): the screen's first frame comes first, and the pane says what it waits for."""
    built = threading.Event()
    collector = FakeCollector()

    def build(source):
        built.set()
        return collector, FakeAggregator(PANE_FUNCTIONS)

    source = LiveSource(Options(panes=ALL), [PaneSpec(PANE_FUNCTIONS, build)])
    source.start(wait=False, patient=True)
    try:
        time.sleep(0.3)
        assert not built.is_set(), "built before the first frame"
        assert source.collect().loading[PANE_FUNCTIONS].startswith(
            "reading the kernel's symbols")
        source.hurry_loading()  # the app's first frame is drawn
        assert built.wait(5)
        assert source.wait_loaded(5) and collector.started
    finally:
        source.close()


def test_a_patient_start_without_a_first_frame_builds_anyway(monkeypatch):
    monkeypatch.setattr(engine, "FIRST_FRAME_WAIT_S", 0.1)
    collector = FakeCollector()
    source = LiveSource(Options(panes=ALL), [spec(PANE_FUNCTIONS, collector)])
    source.start(wait=False, patient=True)
    try:
        assert source.wait_loaded(5) and collector.started
    finally:
        source.close()


def test_a_pane_that_cannot_start_says_why_and_the_others_load(gates):
    for gate in gates.values():
        gate.set()
    broken = FakeCollector(fail_start=Unavailable("kernel lacks tracepoint lock:contention_begin"))
    source = LiveSource(Options(panes=ALL), [
        spec(PANE_FUNCTIONS, FakeCollector()),
        spec(PANE_LOCKS, broken),
        spec(PANE_BLOCKIO, FakeCollector()),
    ])
    source.start()
    snapshot = source.collect()
    source.close()
    assert snapshot.unavailable == {PANE_LOCKS: "kernel lacks tracepoint lock:contention_begin"}
    assert snapshot.locks is None
    assert snapshot.cpu.pane == PANE_FUNCTIONS and snapshot.blockio.pane == PANE_BLOCKIO


def test_a_surprise_while_building_costs_one_pane_not_the_app():
    def explode(source):
        raise RuntimeError("bcc said no")

    source = LiveSource(Options(panes=frozenset({PANE_FUNCTIONS, PANE_BLOCKIO})), [
        PaneSpec(PANE_FUNCTIONS, explode),
        spec(PANE_BLOCKIO, FakeCollector()),
    ])
    source.start()
    snapshot = source.collect()
    source.close()
    assert snapshot.unavailable == {PANE_FUNCTIONS: "failed to start: bcc said no"}
    assert snapshot.blockio.pane == PANE_BLOCKIO


def test_a_collector_failing_later_leaves_its_pane_saying_why_while_the_others_go_on():
    failing, steady = FakeCollector(), FakeCollector()
    source = LiveSource(Options(panes=frozenset({PANE_LOCKS, PANE_BLOCKIO})), [
        spec(PANE_LOCKS, failing), spec(PANE_BLOCKIO, steady)])
    source.start()
    assert source.collect().locks.pane == PANE_LOCKS
    failing.fail_drain = OSError("map vanished")
    after = source.collect()
    later = source.collect()
    source.close()
    assert after.unavailable == {PANE_LOCKS: "stopped: map vanished"}
    assert after.locks is None and later.locks is None
    assert failing.closed
    assert later.blockio.drains == 3  # every refresh, the failure notwithstanding


def test_closing_while_a_pane_compiles_leaves_nothing_attached(gates):
    collector = FakeCollector(gates[PANE_FUNCTIONS])
    source = LiveSource(Options(panes=frozenset({PANE_FUNCTIONS})), [spec(PANE_FUNCTIONS, collector)])
    source.start(wait=False)
    # inside the compile (before it, "waiting for the panes before it")
    wait_until(lambda: source.collect().loading.get(PANE_FUNCTIONS, "").startswith("loading"))
    threading.Timer(0.2, gates[PANE_FUNCTIONS].set).start()  # the compile ends meanwhile
    source.close()  # quit while "compiling"
    assert collector.started  # it did attach,
    assert collector.closed  # and was closed before close() returned


def test_attaching_wakes_the_caller_for_an_early_refresh(gates):
    woken = threading.Event()
    source = LiveSource(Options(panes=frozenset({PANE_LOCKS})), [spec(PANE_LOCKS, FakeCollector(gates[PANE_LOCKS]))])
    source.on_attached = woken.set
    source.start(wait=False)
    try:
        assert not woken.is_set()
        gates[PANE_LOCKS].set()
        assert woken.wait(10)
    finally:
        source.close()


# ---- one record, one span, stamped at its drain (issue 44 item 16) ------------------------


class SpanCollector:
    """Ends its interval when told (or when drained, as a collector without end_interval
    does), then takes `read_s` to read it, as a saturated machine makes a drain slow."""

    def __init__(self, name: str, log: list[str], read_s: list[float]) -> None:
        self.name, self.log, self.read_s = name, log, read_s
        self.last = self.ended = 0.0

    def start(self) -> None:
        self.last = time.monotonic()

    def end_interval(self) -> None:
        self.ended = time.monotonic()
        self.log.append(f"end {self.name}")

    def drain(self) -> tuple[float, float]:
        end, self.ended = self.ended or time.monotonic(), 0.0
        self.log.append(f"read {self.name}")
        time.sleep(self.read_s.pop(0) if self.read_s else 0.0)
        start, self.last = self.last, end
        return start, end

    def close(self) -> None:
        pass


class SpanAggregator(FakeAggregator):
    def add(self, drain) -> None:
        self.start, self.end = drain

    def profile(self, cumulative: bool = False, latest: bool = False):
        return SimpleNamespace(pane=self.name, window_s=self.end - self.start, lost={})


def test_a_record_is_stamped_at_its_drain_and_its_panes_cover_one_span(monkeypatch):
    """Under `perf bench sched messaging -g 20` records were stamped up to 19.6 s after their
    drain (time.time() after the slow process scan), so they overlapped, and one record's
    panes covered 1.27 s (CPU), 3.48 s (waits) and 20.85 s (iostat). Here the first pane's
    maps take from 0.05 to 0.5 s to read and the process scan from 0.1 to 0.8 s."""
    log: list[str] = []
    cpu = SpanCollector(PANE_FUNCTIONS, log, [])
    locks = SpanCollector(PANE_LOCKS, log, [])
    source = LiveSource(Options(panes=frozenset({PANE_FUNCTIONS, PANE_LOCKS})), [
        PaneSpec(PANE_FUNCTIONS, lambda source: (cpu, SpanAggregator(PANE_FUNCTIONS))),
        PaneSpec(PANE_LOCKS, lambda source: (locks, SpanAggregator(PANE_LOCKS)))])
    monkeypatch.setattr(engine, "wait_for_programs", lambda: log.append("wait"))
    scan_s = [0.1]
    scanned_at: list[float] = []
    real_scan = source._processes.collect

    def slow_scan(ran=None):
        scanned_at.append(time.time())
        time.sleep(scan_s[0])
        return real_scan(ran)

    monkeypatch.setattr(source._processes, "collect", slow_scan)
    read_disks = source._diskstats.read
    disks_read_at: list[float] = []
    monkeypatch.setattr(source._diskstats, "read",
                        lambda: disks_read_at.append(time.time()) or read_disks())
    source.start(wait=True)
    records = []
    try:
        source.collect(latest=True)
        for cpu_read_s, scan_s[0] in [(0.05, 0.1), (0.5, 0.8), (0.05, 0.1), (0.05, 0.1)]:
            time.sleep(0.2)
            log.clear()
            cpu.read_s = [cpu_read_s]
            record = source.collect(latest=True)
            records.append(record)
            # Every pane's interval ended before any pane's maps were read, and nothing was
            # read while a program might still add to what is read (wait_for_programs).
            assert log == [f"end {PANE_FUNCTIONS}", f"end {PANE_LOCKS}", "wait",
                           f"read {PANE_FUNCTIONS}", f"read {PANE_LOCKS}"], log
            # Stamped at the drain, before the process scan began; the disks read there too.
            assert disks_read_at[-1] <= scanned_at[-1]
            assert scanned_at[-1] - cpu_read_s - 0.5 <= record.taken_at <= scanned_at[-1]
            # One span: the panes', the disks' and the record's own are the same seconds.
            # (Before, they differed by the changes in the CPU pane's read time: 0.45 s.)
            assert record.locks.window_s == pytest.approx(record.cpu.window_s, abs=0.1)
            assert record.iostat.span_s == pytest.approx(record.cpu.window_s, abs=0.1)
            assert record.duration_s == record.cpu.window_s
    finally:
        source.close()
    # Each record begins where the one before ended: none overlaps the next.
    for before, after in zip(records, records[1:]):
        assert after.taken_at - after.duration_s == pytest.approx(before.taken_at, abs=0.1)
    # What a late scan means is said: the processes were read that long after the drain.
    lates = [r.tasks.read_late_s for r in records]
    assert 0.5 + 0.8 <= lates[1] < 2.5, lates
    assert all(late < 0.9 for i, late in enumerate(lates) if i != 1), lates


def test_a_replaced_cache_entry_is_one_line_in_the_panes_losses():
    """bpfload notes a cached program it could not use (and compiled again): the pane's
    profile carries it as a loss that cost no count, which L lists."""
    from dataclasses import dataclass, field  # noqa: PLC0415

    from ktop.ui.widgets.header import header_text, loss_lines  # noqa: PLC0415

    @dataclass(frozen=True)
    class Profile:
        window_s: float = 1.0
        lost: dict = field(default_factory=dict)

    class Replacing(FakeCollector):
        def start(self) -> None:
            bpfload.note("locks.bpf.c: the cached compile was corrupt: truncated")
            super().start()

    class Aggregator(FakeAggregator):
        def profile(self, cumulative: bool = False):
            return Profile(lost={"kstack_collision": 0})

    source = LiveSource(Options(panes=ALL), [
        PaneSpec(PANE_LOCKS, lambda source: (Replacing(), Aggregator(PANE_LOCKS))),
        PaneSpec(PANE_BLOCKIO, lambda source: (FakeCollector(), Aggregator(PANE_BLOCKIO)))])
    source.start()
    try:
        snapshot = source.collect()
        again = source.collect()
    finally:
        source.close()
    assert snapshot.locks.lost == {"kstack_collision": 0, "bpf_cache_replaced": 1}
    assert again.locks.lost["bpf_cache_replaced"] == 1  # for as long as ktop runs
    assert "bpf_cache_replaced" not in snapshot.blockio.lost
    lines = [line for line in loss_lines(snapshot) if line[1] == "bpf_cache_replaced"]
    assert len(lines) == 1
    pane, _, count, why, intact = lines[0]
    assert count == 1 and intact and "replaced" in why
    assert "lost none" in header_text(snapshot).plain  # how it started: no data lost


def test_a_pane_left_out_is_detached_and_one_added_attaches_live():
    """Key p: a pane removed has its collector closed at once (its programs unloaded) and
    is no longer drained; a pane added loads, as at start-up, and shows data."""
    made: dict[str, list[FakeCollector]] = {name: [] for name in ALL}

    def building(name: str) -> PaneSpec:
        def build(source):
            made[name].append(FakeCollector())
            return made[name][-1], FakeAggregator(name)
        return PaneSpec(name, build)

    source = LiveSource(Options(panes=frozenset({PANE_FUNCTIONS, PANE_LOCKS})),
                        [building(n) for n in (PANE_FUNCTIONS, PANE_LOCKS, PANE_BLOCKIO)])
    source.start()
    try:
        assert not made[PANE_BLOCKIO], "a pane not chosen is not even built"
        assert source.collect().locks.pane == PANE_LOCKS
        woken = []
        source.on_attached = lambda: woken.append(True)
        source.set_panes(frozenset({PANE_FUNCTIONS, PANE_BLOCKIO}))
        assert woken, "the collecting thread is woken to detach it"
        source.collect()
        locks = made[PANE_LOCKS][0]
        assert locks.closed, "the pane left out is detached at the next drain"
        wait_until(lambda: source.collect().blockio is not None)
        after = source.collect()
        assert after.locks is None and PANE_LOCKS not in after.loading
        assert PANE_LOCKS not in after.unavailable
        assert after.blockio.pane == PANE_BLOCKIO and made[PANE_BLOCKIO][0].started
        assert after.cpu.pane == PANE_FUNCTIONS and not made[PANE_FUNCTIONS][0].closed
        source.set_panes(frozenset({PANE_FUNCTIONS, PANE_BLOCKIO, PANE_LOCKS}))
        wait_until(lambda: source.collect().locks is not None)
        assert len(made[PANE_LOCKS]) == 2, "added again: a new collector"
    finally:
        source.close()
    assert all(c.closed for cs in made.values() for c in cs)


def test_a_pane_left_out_while_it_loads_is_closed_once_loaded(gates):
    collector = FakeCollector(gates[PANE_LOCKS])
    source = LiveSource(Options(panes=frozenset({PANE_LOCKS})), [spec(PANE_LOCKS, collector)])
    source.start(wait=False)
    try:
        wait_until(lambda: PANE_LOCKS in source.collect().loading)
        source.set_panes(frozenset())
        assert PANE_LOCKS not in source.collect().loading
        gates[PANE_LOCKS].set()
        assert source.wait_loaded(10)
        wait_until(lambda: collector.closed)
        assert source.collect().locks is None
    finally:
        source.close()
