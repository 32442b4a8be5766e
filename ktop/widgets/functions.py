"""Hot kernel functions, as perf top shows them: Overhead  Samples  Symbol  Module."""

from __future__ import annotations

from functools import partial

from ktop.model import PANE_FUNCTIONS, HotFunction, Snapshot
from ktop.screens.stacks import FunctionScreen
from ktop.stacktree import hot_functions
from ktop.units import format_span
from ktop.widgets.pane import Display, Drill, Pane, PaneRow, View
from ktop.widgets.table import Cell, Column, num


class FunctionsPane(Pane):
    PANE = PANE_FUNCTIONS
    TITLE = "1 Hot kernel functions"
    KEY_LABEL = "Hot functions"  # in the help screen, beside its number key
    VIEWS = (
        View(
            "functions",
            (
                Column("overhead", "Overhead", 9, right=True),
                Column("samples", "Samples", 8, right=True),
                Column("symbol", "Symbol", None, descending=False),
                Column("module", "Module", None, descending=False),
            ),
            "overhead",
        ),
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._made: dict[tuple, PaneRow] = {}  # a function's figures -> its row last time

    def rows(self, snapshot: Snapshot, display: Display):
        cpu = snapshot.cpu
        if cpu is None:
            return [], "waiting for the first samples...", ""
        functions = cpu.functions
        if display.filtered:  # the sampler's data for that process or cgroup alone
            functions = hot_functions(
                (s for s in cpu.stacks if display.shows(s.pid, s.cgroup)),
                cpu.sample_hz * cpu.window_s * cpu.cpus,
            )
        # At 4000 Hz hundreds of functions: a row whose figures did not move keeps its cells.
        made, self._made = self._made, {}
        rows = []
        for f in functions:
            if f.idle and not display.show_idle:
                continue
            seen = (f.symbol, f.module, f.samples, f.percent, f.idle)
            row = made.get(seen)
            if row is None:
                row = (
                    f"{f.symbol} {f.module}",
                    (
                        num(f"{f.percent:.2f}%", f.percent, _heat(f.percent)),
                        num(str(f.samples), f.samples),
                        Cell(f.symbol, style="dim" if f.idle else ""),
                        Cell(f.module, style="dim"),
                    ),
                    f,
                )
            self._made[seen] = row
            rows.append(row)
        mode = "cumulative" if cpu.cumulative else "last"
        hidden = "" if display.show_idle else "  idle hidden (i)"
        subtitle = f"{mode} {format_span(cpu.window_s)}{hidden}"
        return rows, f"no kernel samples in the {mode} {format_span(cpu.window_s)}", subtitle

    def drill_row(self, row: HotFunction) -> Drill:
        return partial(FunctionScreen, row.symbol, self._snapshot)


def _heat(percent: float) -> str:
    if percent >= 5:
        return "bold red"
    if percent >= 0.5:
        return "green"
    return ""
