"""Interrupts: bpf/irqs.bpf.c on the raw tracepoints irq_handler_entry/exit and
softirq_raise/entry/exit, drained every interval. Never imports Textual."""

from __future__ import annotations

import struct
import time
from array import array
from dataclasses import dataclass
from typing import NamedTuple

from ktop.collectors.bpfload import (
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
)
from ktop.collectors.bpfsys import attach_raw_tracepoint, task_name
from ktop.collectors.maps import TwoGenerationProgram
from ktop.losses import kernel_names, note_names
from ktop.panes.irqs.model import HIST_SLOTS

PROGRAM = "irqs.bpf.c"
# Exits before entries: no run is entered unseen by an attached exit (an exit whose entry was
# not seen is counted as such); the raise before the entry it is measured against.
FUNCTIONS = {
    "on_irq_exit": "irq_handler_exit",
    "on_softirq_exit": "softirq_exit",
    "on_softirq_raise": "softirq_raise",
    "on_irq_entry": "irq_handler_entry",
    "on_softirq_entry": "softirq_entry",
}
TRACEPOINTS = [f"irq:{name}" for name in FUNCTIONS.values()]
MAP_COUNTS = ("counts_0", "counts_1")
MAP_NAMES = "names"
LOST_NAMES = kernel_names("irqs")
NOT_LOSSES = note_names("irqs")
KINDS = ("hardirq", "softirq")  # enum irq_kind

_KEY = struct.Struct("<II")  # struct irq_key
_STAT_WORDS = 6 + HIST_SLOTS  # struct irq_stat


class IrqCounts(NamedTuple):
    """One handler's or vector's runs on one CPU in an interval."""

    kind: str  # one of KINDS
    number: int
    cpu: int
    count: int
    total_ns: int
    max_ns: int
    raised: int
    delay_ns: int
    delay_max_ns: int
    delay_hist: tuple[int, ...]  # HIST_SLOTS


@dataclass(frozen=True)
class IrqDrain:
    start: float  # time.monotonic() of the interval's start
    end: float
    counts: tuple[IrqCounts, ...]
    names: dict[int, str]  # hard IRQ -> its action's name
    cpus: int
    lost: dict[str, int]  # cumulative since start, by reason
    notes: dict[str, int]


def per_cpu_rows(keys: list[bytes], values: bytes, cpus: int) -> list[IrqCounts]:
    """A per-CPU hash's drained columns: a row per key and CPU that ran it."""
    words = array("Q", values)
    rows = []
    for i, raw in enumerate(keys):
        kind, number = _KEY.unpack(raw)
        for cpu in range(cpus):
            at = (i * cpus + cpu) * _STAT_WORDS
            count = words[at]
            if not count:
                continue
            rows.append(IrqCounts(KINDS[kind] if kind < len(KINDS) else "hardirq", number, cpu,
                                  count, words[at + 1], words[at + 2], words[at + 3],
                                  words[at + 4], words[at + 5],
                                  tuple(words[at + 6:at + _STAT_WORDS])))
    return rows


class IrqCollector:
    pane = "irqs"

    def __init__(self, map_entries: dict[str, int] | None = None) -> None:
        self._map_entries = dict(map_entries or {})
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float] | None = None
        self._last = 0.0
        self._names: dict[int, str] = {}

    @property
    def programs(self) -> dict[str, int]:
        return dict(self._program.program.programs) if self._program else {}

    def start(self) -> None:
        check_privileges()
        ensure_tracefs()
        require_tracepoints(TRACEPOINTS, "irq tracepoints (CONFIG_TRACE_IRQFLAGS... Linux >= 4.x)")
        program = load_program(
            PROGRAM, [f"-D{name}={int(size)}" for name, size in self._map_entries.items()],
            {name: "RAW_TRACEPOINT" for name in FUNCTIONS})
        self._program = TwoGenerationProgram(program, LOST_NAMES)
        if self._program.table(MAP_COUNTS[0]).key_size != _KEY.size:
            self.close()
            raise Unavailable("bpf/irqs.h and the collector disagree on counts' key")
        try:
            for function, tracepoint in FUNCTIONS.items():
                program.keep(attach_raw_tracepoint(program.programs[function], tracepoint))
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot attach the irq tracepoints: {e.strerror}") from None
        self._last = time.monotonic()

    def end_interval(self) -> None:
        assert self._program is not None, "start() first"
        self._ended = self._program.swap()

    def drain(self) -> IrqDrain:
        assert self._program is not None, "start() first"
        program = self._program
        old, end = self._ended or program.swap()
        self._ended = None
        table = program.table(MAP_COUNTS[old])
        keys, values = table.drain_columns()
        cpus = table.cpus or 1
        counts = per_cpu_rows(keys, values, cpus)
        if any(c.kind == "hardirq" and c.number not in self._names for c in counts):
            for key, value in program.table(MAP_NAMES).items():
                self._names[key.value] = task_name(bytes(value.name))
        lost = self.lost()
        notes = {name: lost.pop(name) for name in NOT_LOSSES}
        drain = IrqDrain(self._last, end, tuple(counts), dict(self._names), cpus, lost, notes)
        self._last = end
        return drain

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals.pop("stack_missing", None)  # no stacks here
        return totals

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
