"""The live data source: starts every collector, and turns each interval into a Snapshot.

Runs in one worker thread (or the headless snapshot loop); never touches the UI.
A collector that cannot start, or fails later, makes its pane unavailable with a reason;
the others go on.
"""

from __future__ import annotations

import functools
import platform
import socket
import time
from dataclasses import dataclass
from typing import Protocol

from ktop import __version__
from ktop.aggregate.cpu import CpuAggregator
from ktop.collectors import bpfload
from ktop.collectors.bpfload import Unavailable
from ktop.collectors.processes import ProcessCollector, task_exists
from ktop.collectors.procstat import CpuTicks, read_cpu_ticks
from ktop.model import PANE_BLOCKIO, PANE_FUNCTIONS, PANE_LOCKS, Snapshot, UserFrame
from ktop.symbols import Kallsyms
from ktop.usersyms import UserSymbolizer


@dataclass(frozen=True)
class Options:
    hz: int = 99
    interval_s: float = 1.0
    window_s: float = 5.0
    cumulative: bool = False
    vmlinux: str | None = None  # debug ELF of the kernel for file:line (default: distro path)
    panes: frozenset[str] = frozenset({PANE_FUNCTIONS, PANE_LOCKS, PANE_BLOCKIO})


class DataSource(Protocol):
    """What the app and the snapshot writer need: live collectors or recorded data."""

    cumulative: bool
    live: bool  # False for recorded data: its window cannot change

    def start(self) -> None: ...
    def collect(self) -> Snapshot: ...
    def close(self) -> None: ...


class LiveSource:
    live = True

    def __init__(self, options: Options = Options()) -> None:
        self.options = options
        self.cumulative = options.cumulative
        self.unavailable: dict[str, str] = {}
        self.headers = "not needed"
        self._processes = ProcessCollector()
        self._cpu = None
        self._cpu_aggregate: CpuAggregator | None = None
        self._ticks: CpuTicks | None = None
        self._started = time.monotonic()
        self._kallsyms: Kallsyms | None = None
        self._user_symbols = UserSymbolizer()
        self._locks: tuple | None = None
        self._blockio: tuple | None = None

    def start(self) -> None:
        if PANE_FUNCTIONS in self.options.panes:
            self._start_cpu()
        if PANE_LOCKS in self.options.panes:
            self._locks = self._start_tracer(PANE_LOCKS, self._make_locks)
        if PANE_BLOCKIO in self.options.panes:
            self._blockio = self._start_tracer(PANE_BLOCKIO, self._make_blockio)
        if any(p in self.options.panes for p in (PANE_FUNCTIONS, PANE_LOCKS, PANE_BLOCKIO)):
            self.headers = bpfload.headers_description()
            bpfload.release_compiler_memory()
        # Drain once and discard: every window starts when all collectors are attached, not
        # while later programs were still compiling.
        for collector in self._attached():
            collector.drain()
        self._processes.start()
        self._ticks = read_cpu_ticks()

    def _aggregators(self) -> list:
        pairs = [p[1] for p in (self._locks, self._blockio) if p is not None]
        return ([self._cpu_aggregate] if self._cpu and self._cpu_aggregate else []) + pairs

    def _attached(self) -> list:
        pairs = [p[0] for p in (self._locks, self._blockio) if p is not None]
        return ([self._cpu] if self._cpu else []) + pairs

    def kallsyms(self) -> Kallsyms:
        if self._kallsyms is None:
            bpfload.check_privileges()  # "needs root" says more than "addresses hidden"
            self._kallsyms = Kallsyms.load()
        if self._kallsyms.hidden:
            raise Unavailable(
                    "kernel addresses are hidden (kptr_restrict): run as root, "
                    "or `sysctl kernel.kptr_restrict=0`"
                )
        return self._kallsyms

    def _start_cpu(self) -> None:
        from ktop.collectors.cpu import CpuSampler

        sampler = CpuSampler(self.options.hz, self.options.interval_s)
        try:
            kallsyms = self.kallsyms()
            sampler.start()
        except Unavailable as e:
            self.unavailable[PANE_FUNCTIONS] = str(e)
            return
        except Exception as e:  # a bcc surprise must cost one pane, never the app
            self.unavailable[PANE_FUNCTIONS] = f"sampler failed to start: {e}"
            return
        self._cpu = sampler
        lines, line_info = self._kernel_lines()
        self._cpu_aggregate = CpuAggregator(
            kallsyms, sampler.hz, sampler.cpus, self.options.window_s, self._resolve_user,
            source_line=lines.lookup if lines else None, line_info=line_info,
        )

    def _kernel_lines(self):
        """The debug vmlinux line table, or None and why (said once, in the stacks view)."""
        from ktop.dwarflines import KernelLineTable  # noqa: PLC0415

        table = KernelLineTable.open(path=self.options.vmlinux)
        if table is not None:
            return table, f"file:line from {self.options.vmlinux or 'the debug vmlinux'}"
        where = self.options.vmlinux or f"/usr/lib/debug/boot/vmlinux-{platform.release()}"
        return None, f"no kernel file:line: no debug vmlinux at {where} (--vmlinux PATH)"

    def _make_locks(self):
        from ktop.aggregate.locks import LockAggregator  # noqa: PLC0415
        from ktop.collectors.locks import LockCollector  # noqa: PLC0415

        return LockCollector(self.options.interval_s), LockAggregator(
            self.kallsyms(), self.options.window_s, resolve_user=self._resolve_user
        )

    def _make_blockio(self):
        from ktop.aggregate.blockio import BlockAggregator  # noqa: PLC0415
        from ktop.collectors.blockio import BlockCollector  # noqa: PLC0415

        return BlockCollector(self.options.interval_s), BlockAggregator(
            self.options.window_s, symbols=self.kallsyms()
        )

    def _start_tracer(self, pane: str, make) -> tuple | None:
        """(collector, aggregator) started, or None with the pane's reason recorded."""
        try:
            collector, aggregator = make()
            collector.start()
        except Unavailable as e:
            self.unavailable[pane] = str(e)
            return None
        except Exception as e:  # a bcc surprise must cost one pane, never the app
            self.unavailable[pane] = f"failed to start: {e}"
            return None
        return collector, aggregator

    def _collect_tracer(self, pane: str, pair: tuple | None):
        if pair is None:
            return None, None
        collector, aggregator = pair
        try:
            aggregator.add(collector.drain())
            return aggregator.profile(self.cumulative), pair
        except Exception as e:
            self.unavailable[pane] = f"stopped: {e}"
            collector.close()
            return None, None

    def _resolve_user(self, pid: int, addresses) -> list[UserFrame]:
        """User frames named while the process lives; a process that exited keeps the names
        resolved before (the aggregate holds them), later addresses show as hex."""
        frames = self._user_symbols.resolve(pid, addresses)
        return [UserFrame(f.symbol, f.module) for f in frames]

    def collect(self) -> Snapshot:
        ticks = read_cpu_ticks()
        delta = ticks - self._ticks if self._ticks else CpuTicks()
        self._ticks = ticks
        cpu_profile = None
        if self._cpu and self._cpu_aggregate:
            try:
                self._cpu_aggregate.add(self._cpu.drain(), delta)
                cpu_profile = self._cpu_aggregate.profile(self.cumulative)
            except Exception as e:
                self.unavailable[PANE_FUNCTIONS] = f"sampler stopped: {e}"
                self._cpu.close()
                self._cpu = None
        locks, self._locks = self._collect_tracer(PANE_LOCKS, self._locks)
        blockio, self._blockio = self._collect_tracer(PANE_BLOCKIO, self._blockio)
        processes = self._processes.collect()
        self._user_symbols.retain(p.pid for p in processes)
        is_alive = functools.cache(task_exists)  # asked once per pid per refresh
        for aggregator in self._aggregators():
            aggregator.fold_exited(is_alive)
        duration = cpu_profile.window_s if cpu_profile else time.monotonic() - self._started
        return Snapshot(
            ktop_version=__version__,
            kernel=platform.release(),
            hostname=socket.gethostname(),
            taken_at=time.time(),
            duration_s=duration,
            headers=self.headers,
            cpu=cpu_profile,
            processes=processes,
            locks=locks,
            blockio=blockio,
            unavailable=dict(self.unavailable),
        )

    def close(self) -> None:
        for collector in (self._cpu, self._processes):
            if collector is not None:
                collector.close()
        for pair in (self._locks, self._blockio):
            if pair is not None:
                pair[0].close()
        self._cpu = self._locks = self._blockio = None


class RecordedSource:
    """Replays snapshots (from JSON files or tests): the UI without root or a kernel."""

    live = False

    def __init__(self, snapshots: list[Snapshot]) -> None:
        if not snapshots:
            raise ValueError("no recorded snapshots")
        self._snapshots = snapshots
        self._next = 0
        self.cumulative = False

    def start(self) -> None:
        pass

    def collect(self) -> Snapshot:
        snapshot = self._snapshots[min(self._next, len(self._snapshots) - 1)]
        self._next += 1
        return snapshot

    def close(self) -> None:
        pass
