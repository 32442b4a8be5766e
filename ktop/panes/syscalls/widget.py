"""Syscalls: which calls processes make, how often, failing how, how slow; by syscall, by
process, by errno (v). Never touches the kernel: it draws the Snapshot's profile."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ktop.model import Snapshot
from ktop.panes.syscalls.pane import PANE_SYSCALLS
from ktop.panes.syscalls.views import SyscallGroup, by_errno, by_process, by_syscall
from ktop.text import format_pid
from ktop.ui.widgets.pane import WIDE, Display, Drill, Pane, PaneRow, View, in_window, window_label
from ktop.ui.widgets.table import Cell, Column, num
from ktop.units import format_ns


def _rate(count: int, window_s: float) -> Cell:
    rate = count / window_s if window_s > 0 else 0.0
    text = f"{rate / 1e6:.2f}M" if rate >= 1e6 else f"{rate / 1e3:.1f}k" if rate >= 1e4 else f"{rate:.0f}"
    return num(text, rate)


def _count(n: int) -> Cell:
    text = f"{n / 1e6:.2f}M" if n >= 10_000_000 else str(n)
    return num(text, n)


def _errors(g: SyscallGroup) -> Cell:
    return num(str(g.errors) if g.errors else "", g.errors, "bold red" if g.errors else "")


def _ns(ns: float) -> Cell:
    return num(format_ns(ns), ns)


class SyscallsPane(Pane):
    PANE = PANE_SYSCALLS
    COLUMN_HELP = {
        "calls": "calls made in the window",
        "calls/s": "calls a second",
        "errors": "calls that failed (returned -errno)",
        "total": "time in the calls summed, entry to exit (sleeps included)",
        "avg": "average time a call",
        "max": "the longest call",
        "procs": "processes that made them",
        "top errno": "the commonest errno of its failed calls",
        "SYSCALL": "the call (ia32: a 32-bit compat call)",
        "PID": "the process, its threads summed",
        "top syscall": "the syscall it spent most time in",
        "COMMAND": "its command",
        "ERRNO": "what the failed calls returned",
    }
    VIEWS = (
        View("syscalls", (
            Column("calls", "calls", 9, right=True, priority=8),
            Column("rate", "calls/s", 8, right=True, priority=6),
            Column("errors", "errors", 8, right=True, priority=7),
            Column("total", "total", 9, right=True, priority=6),
            Column("avg", "avg", 9, right=True, priority=7),
            Column("max", "max", 9, right=True, priority=5),
            Column("procs", "procs", 5, right=True, shown_from=WIDE),
            Column("errno", "top errno", 10, descending=False, priority=4),
            Column("syscall", "SYSCALL", None, descending=False, priority=9, min_width=12),
        ), "calls"),
        View("processes", (
            Column("pid", "PID", 7, right=True, descending=False, priority=8),
            Column("calls", "calls", 9, right=True, priority=8),
            Column("rate", "calls/s", 8, right=True, priority=6),
            Column("errors", "errors", 8, right=True, priority=7),
            Column("total", "total", 9, right=True, priority=6),
            Column("comm", "COMMAND", 15, descending=False, priority=9),
            Column("top", "top syscall", None, descending=False, priority=7, min_width=12),
        ), "calls"),
        View("errors", (
            Column("calls", "calls", 9, right=True, priority=8),
            Column("rate", "calls/s", 8, right=True, priority=6),
            Column("avg", "avg", 9, right=True, priority=5),
            Column("procs", "procs", 5, right=True, priority=5),
            Column("errno", "ERRNO", 12, descending=False, priority=9),
            Column("syscall", "SYSCALL", None, descending=False, priority=9, min_width=12),
        ), "calls"),
    )

    def rows(self, snapshot: Snapshot, display: Display) -> tuple[list[PaneRow], str, str]:
        profile = snapshot.syscalls
        if profile is None:
            return [], "waiting for system calls...", ""
        window = profile.window_s or snapshot.duration_s
        shows = display.shows if display.filtered else None
        rows: list[PaneRow]
        if self.view == "processes":
            rows = [
                (g.key, (num(format_pid(g.pid), g.pid), _count(g.count), _rate(g.count, window),
                         _errors(g), _ns(g.total_ns), Cell(g.comm), Cell(g.top)), g)
                for g in by_process(profile, shows)
            ]
        elif self.view == "errors":
            rows = [
                (g.key, (_count(g.count), _rate(g.count, window), _ns(g.avg_ns),
                         num(str(g.processes), g.processes), Cell(g.errno, style="red"),
                         Cell(g.syscall)), g)
                for g in by_errno(profile, shows)
            ]
        else:
            rows = [
                (g.key, (_count(g.count), _rate(g.count, window), _errors(g), _ns(g.total_ns),
                         _ns(g.avg_ns), _ns(g.max_ns), num(str(g.processes), g.processes),
                         Cell(g.top), Cell(g.syscall)), g)
                for g in by_syscall(profile, shows)
            ]
        shown = replace(snapshot, duration_s=window)
        subtitle = f"by {self.view} (v)  {window_label(shown)}"
        lost = sum(profile.lost.values())
        if lost:
            subtitle += f"  lost {lost}"
        empty = "no failed calls" if self.view == "errors" else "no system calls"
        return rows, f"{empty} {in_window(shown)}", subtitle

    def view_description(self) -> str:
        return {"syscalls": "by syscall", "processes": "by process",
                "errors": "failed calls by errno and syscall"}.get(self.view, self.view)

    def drill_row(self, row: SyscallGroup) -> Drill:
        from ktop.panes.syscalls.screens import SyscallDetailScreen  # noqa: PLC0415

        snapshot = self._snapshot
        if snapshot is None:
            return None
        if self.view == "processes":
            return partial(SyscallDetailScreen, ("pid", str(row.pid)), snapshot)
        if self.view == "errors":
            return partial(SyscallDetailScreen, ("errno", f"{row.errno}|{row.syscall}"), snapshot)
        return partial(SyscallDetailScreen, ("syscall", row.syscall), snapshot)
