"""The syscalls pane's drill-down: the calls of one syscall, process or (errno, syscall), by
process and thread, their latency histogram, and the stacks of their slow calls (the call
site in user space, where the call slept in the kernel). Takes its data as arguments."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ktop.model import Snapshot
from ktop.panes.syscalls.model import SlowSyscalls, SyscallStat
from ktop.panes.syscalls.views import hist_buckets_ns
from ktop.text import format_pid, printable
from ktop.ui.screens.drill import DetailScreen, DrillHost, frame_line, heading
from ktop.ui.widgets.fit import MUST, Item, item
from ktop.units import count_of, format_bucket, format_ns

STACKS_SHOWN = 30
THREADS_SHOWN = 40

# ("syscall", "openat"), ("pid", "1234"), ("errno", "ENOENT|openat")
Selection = tuple[str, str]


def _selects(selection: Selection, row: SyscallStat | SlowSyscalls) -> bool:
    kind, what = selection
    if kind == "pid":
        return str(row.pid) == what
    if kind == "errno":
        return f"{row.errno}|{row.syscall}" == what
    return row.syscall == what


def selected(snapshot: Snapshot, selection: Selection,
             ) -> tuple[tuple[SyscallStat, ...], tuple[SlowSyscalls, ...]]:
    profile = snapshot.syscalls
    if profile is None:
        return (), ()
    return (tuple(c for c in profile.calls if _selects(selection, c)),
            tuple(s for s in profile.slow if _selects(selection, s)))


def histogram(what: str, slots: list[int] | tuple[int, ...]) -> Group:
    table = Table(box=None)
    table.add_column("range", justify="right")
    table.add_column("count", justify="right")
    table.add_column("distribution")
    buckets = hist_buckets_ns(slots)
    peak = max((count for *_, count in buckets), default=0) or 1
    for low, high, count in buckets:
        table.add_row(format_bucket(low, high), str(count), "█" * round(40 * count / peak))
    return Group(heading(f"{what} (log2 buckets)"), table, Text(""))


def summed_hist(rows: tuple[SyscallStat, ...] | tuple[SlowSyscalls, ...]) -> list[int]:
    return [sum(slots) for slots in zip(*(r.hist for r in rows))] if rows else []


class SyscallDetailScreen(DetailScreen):
    TITLE = "Syscalls: calls by thread, latency, slow calls' stacks"

    def __init__(self, selection: Selection, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.selection = selection
        self.calls, self.slow = selected(snapshot, selection)

    def still_present(self, snapshot: Snapshot) -> bool:
        calls, slow = selected(snapshot, self.selection)
        if calls:
            self.calls, self.slow = calls, slow
        return bool(calls)

    def shown(self) -> object:
        return self.calls, self.slow, self.selection

    def _window(self) -> float:
        profile = self.snapshot.syscalls
        return profile.window_s if profile else 0.0

    def header_items(self) -> list[Item]:
        kind, what = self.selection
        title = Text("calls of ", style="bold")
        label = {"pid": "pid ", "syscall": "", "errno": ""}[kind]
        title.append(label + printable(what.replace("|", " in ")), style="bold cyan")
        count = sum(c.count for c in self.calls)
        total = sum(c.total_ns for c in self.calls)
        calls = count_of(count, "call")
        return [Item(title, MUST),
                item(f"{calls} {self.window_label(self._window())}", 90, short=calls, gap="   "),
                item(f"total {format_ns(total)}", 80, gap=", ")]

    def draw(self) -> None:
        self.header_widget().update(self.header())
        lines: list = [heading("by thread and syscall")]
        table = Table(box=None)
        for name, right in (("PID", True), ("TID", True), ("COMMAND", False),
                            ("SYSCALL", False), ("ERRNO", False), ("calls", True),
                            ("total", True), ("avg", True), ("max", True)):
            table.add_column(name, justify="right" if right else "left")
        for c in self.calls[:THREADS_SHOWN]:
            table.add_row(format_pid(c.pid), format_pid(c.tid), printable(c.comm),
                          printable(c.syscall), c.errno or "-", str(c.count),
                          format_ns(c.total_ns), format_ns(c.total_ns / c.count if c.count else 0),
                          format_ns(c.max_ns))
        lines.append(table)
        if len(self.calls) > THREADS_SHOWN:
            lines.append(Text(f"... {len(self.calls) - THREADS_SHOWN} more", style="dim"))
        lines.append(Text(""))
        lines.append(histogram("latency", summed_hist(self.calls)))
        profile = self.snapshot.syscalls
        slow_from = format_ns(profile.slow_ns) if profile and profile.slow_ns else "the threshold"
        lines.append(heading(f"slow calls (from {slow_from}): where they were made and "
                             "where they slept"))
        for s in self.slow[:STACKS_SHOWN]:
            head = Text(f"{printable(s.syscall)}{' ' + s.errno if s.errno else ''}  "
                        f"{count_of(s.count, 'call')}, total {format_ns(s.total_ns)}, max "
                        f"{format_ns(s.max_ns)}   {printable(s.comm)} {format_pid(s.pid)}"
                        f"/{format_pid(s.tid)}", style="bold")
            lines.append(head)
            lines.extend(frame_line(frame) for frame in s.frames)
            lines.extend(frame_line(f"[user] {f.symbol}  {f.module}", "green") for f in s.user)
            lines.append(histogram("slow calls' latency", s.hist))
        if len(self.slow) > STACKS_SHOWN:
            lines.append(Text(f"... {len(self.slow) - STACKS_SHOWN} more stacks", style="dim"))
        if not self.slow:
            lines.append(Text("no slow calls in the window", style="dim"))
        self.query_one("#stack-list-text").update(Group(*lines))
