"""Hot functions, as perf top -g shows them: Children  Self  Samples  Symbol  Module, in the
kernel (its own samples, counted by the aggregator), in user space, or by command."""

from __future__ import annotations

import os
from functools import partial

from ktop.model import PANE_FUNCTIONS, HotFunction, Snapshot
from ktop.stacktree import comm_functions, hot_functions, user_functions
from ktop.ui.widgets.pane import WIDE, Display, Drill, Pane, PaneRow, View, in_window, window_label
from ktop.ui.widgets.table import Cell, Column, num

_SHARES = (
    Column("children", "Children", 8, right=True, priority=8),
    Column("overhead", "Self", 7, right=True, priority=9),
    Column("samples", "Samples", 8, right=True, shown_from=WIDE, priority=4),
)
# In a narrow pane the symbol needs the room more than its module does: the module goes
# first, the symbol keeps 20 cells.
_NAMES = (
    Column("symbol", "Symbol", None, descending=False, priority=9, min_width=20),
    Column("module", "Module", 17, descending=False, priority=3),  # [kernel.kallsyms]
)
# v cycles these; the subtitle says which.
_VIEW_TITLES = {"kernel": "Hot kernel functions", "user": "Hot user functions",
                "comm": "Hot functions by command"}


class FunctionsPane(Pane):
    PANE = PANE_FUNCTIONS
    COLUMN_HELP = {
        "Children": "share of the machine's CPU time in samples whose stack holds the function "
                    "anywhere (perf's Children)",
        "Self": "share of the machine's CPU time in the function itself (perf top's Overhead): "
                "samples / (Hz x seconds x CPUs)",
        "Samples": "cpu-clock samples that landed in the function",
        "Symbol": "the function (kernel or user-space, as the view says)",
        "Module": "where it is: [kernel.kallsyms], a kernel module, a program or a library",
        "Command": "the command of the processes the samples were taken in",
    }
    VIEWS = (
        View("kernel", (*_SHARES, *_NAMES), "overhead"),
        View("user", (*_SHARES, *_NAMES), "overhead"),
        View(
            "comm",
            (
                Column("overhead", "Self", 7, right=True, priority=9),
                Column("samples", "Samples", 8, right=True, shown_from=WIDE, priority=4),
                Column("comm", "Command", 16, descending=False, priority=7),
                *_NAMES,
            ),
            "overhead",
        ),
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._made: dict[tuple, PaneRow] = {}  # a function's figures -> its row last time

    def cycle_view(self, snapshot: Snapshot | None, display: Display) -> str:
        said = super().cycle_view(snapshot, display)
        self.border_title = f"{self.number} {_VIEW_TITLES[self.view]}"
        return said

    def view_description(self) -> str:
        return {"kernel": "kernel functions", "user": "user-space functions",
                "comm": "functions by command, as perf top --sort comm,sym"}[self.view]

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        cpu = snapshot.cpu
        if cpu is None:
            return [], "waiting for the first samples...", ""
        expected = cpu.sample_hz * cpu.window_s * cpu.cpus
        made, self._made = self._made, {}
        hidden = "" if display.show_idle else "  idle hidden (i)"
        # (the one window label the header and the other panes show too)
        subtitle = f"{self.view} (v)  {window_label(snapshot)}{hidden}"
        if self.view == "kernel":
            functions = cpu.functions
            # A file written before Children was counted: derive them from its stacks.
            stale = bool(functions) and functions[0].children < functions[0].samples
            if display.filtered or stale:  # the sampler's data for that process or cgroup alone
                functions = hot_functions(
                    (s for s in cpu.stacks if display.shows(s.pid, s.cgroup)), expected)
            rows = self._function_rows(functions, display, made)
            empty = f"no kernel samples {in_window(snapshot)}"
        else:
            # Read from the whole stacks: built only while one of these views is shown.
            stacks = [s for s in cpu.stacks if display.shows(s.pid, s.cgroup)]
            if self.view == "user":
                rows = self._function_rows(user_functions(stacks, expected), display, made)
                empty = f"no user-space stacks {in_window(snapshot)}"
            else:
                rows = self._function_rows(comm_functions(stacks, expected), display, made)
                empty = f"no samples {in_window(snapshot)}"
        return rows, empty, subtitle

    def _function_rows(self, functions, display: Display,
                       made: dict[tuple, PaneRow]) -> list[PaneRow]:
        """Rows of these functions (or (comm, function) pairs); at 4000 Hz hundreds: a row
        whose figures did not move keeps the cells it had last time (`made`)."""
        rows: list[PaneRow] = []
        for f in functions:
            comm = ""
            if isinstance(f, tuple):
                comm, f = f
            if f.idle and not display.show_idle:
                continue
            children, children_percent = f.children, f.children_percent
            if not display.show_idle and f.idle_children:
                # The idle task idled under its callers (start_kernel, do_idle...): hidden
                # with the idling itself, so Children says what ran.
                children, children_percent = f.busy_children()
                if not children and not f.samples:
                    continue
            seen = (self.view, comm, f.symbol, f.module, f.samples, children, f.percent, f.idle)
            row = made.get(seen)
            if row is None:
                module = os.path.basename(f.module) if f.module.startswith("/") else f.module
                shares: tuple[Cell, ...] = (
                    num(f"{f.percent:.2f}%", f.percent, _heat(f.percent)),
                    num(str(f.samples), f.samples),
                )
                if self.view != "comm":
                    shares = (num(f"{children_percent:.2f}%", children_percent,
                                  _heat(children_percent)), *shares)
                row = (
                    f"{comm}|{f.symbol} {f.module}" if comm else f"{f.symbol} {f.module}",
                    (
                        *shares,
                        *((Cell(comm),) if self.view == "comm" else ()),
                        Cell(f.symbol, style="dim" if f.idle else ""),
                        Cell(module, f.module.lower(), style="dim"),
                    ),
                    f if not comm else (comm, f),
                )
            self._made[seen] = row
            rows.append(row)
        return rows

    def drill_row(self, row: HotFunction | tuple[str, HotFunction]) -> Drill:
        function = row[1] if isinstance(row, tuple) else row
        if self.view == "user" or (self.view == "comm" and function.module.startswith("/")):
            self.notify("callers are drilled into from kernel functions: their stacks run down "
                        "to user space (v back to the kernel view)")
            return None
        from ktop.ui.screens.function import FunctionScreen  # noqa: PLC0415  (loaded when first opened)

        snapshot = self._snapshot
        if snapshot is None:  # no rows shown yet: nothing to open
            return None
        return partial(FunctionScreen, function.symbol, snapshot)


def _heat(percent: float) -> str:
    if percent >= 5:
        return "bold red"
    if percent >= 0.5:
        return "green"
    return ""
