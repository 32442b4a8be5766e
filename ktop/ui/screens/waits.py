"""The waits pane's drill-down: the blocking stacks of a process, command or blocking
function, with time, count, histogram and who woke them; the run-queue histogram."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Group
from rich.text import Text

from ktop.model import WAKER_WAITING, Snapshot, WaitStack, WaitWaker
from ktop.stacktree import function_name as function_of
from ktop.text import format_pid, printable
from ktop.ui.screens.details import _histogram_table
from ktop.ui.screens.drill import (
    DetailScreen,
    DrillHost,
    escaped,
    frame_line,
    heading,
)
from ktop.ui.widgets.fit import MUST, Item, item
from ktop.units import count_of, format_ns
from ktop.waitviews import hist_buckets_us, percent

STACKS_SHOWN = 30
WAKERS_SHOWN = 5

# What a selection names: ("pid", "1234"), ("comm", "dd"), ("cgroup", "/system.slice"),
# ("reason", "do_nanosleep").
Selection = tuple[str, str]


def _key(kind: str, row: object) -> str:
    return str(getattr(row, kind))


def selected_stacks(snapshot: Snapshot, selection: Selection) -> tuple[WaitStack, ...]:
    waits = snapshot.waits
    if waits is None:
        return ()
    kind, what = selection
    return tuple(s for s in waits.stacks if _key(kind, s) == what)


def selected_runq_hist(snapshot: Snapshot, selection: Selection) -> tuple[int, ...]:
    waits = snapshot.waits
    kind, what = selection
    if waits is None or kind == "reason":
        return ()
    rows = [p for p in waits.processes if _key(kind, p) == what]
    return tuple(map(sum, zip(*(p.runq_hist for p in rows)))) if rows else ()


def merged_wakers(wakers: tuple[WaitWaker, ...]) -> list[WaitWaker]:
    """Wakers that differ only in offsets (or in a frame lost to a stack-map collision at
    the innermost end) as one, with the frames of the most frequent: `o` splits them."""
    merged: dict[tuple, WaitWaker] = {}
    for w in wakers:
        key = (w.pid, w.comm, tuple(function_of(f) for f in w.frames if
                                    function_of(f) != "try_to_wake_up"))
        seen = merged.get(key)
        merged[key] = w if seen is None else replace(
            seen if seen.count >= w.count else w,
            count=seen.count + w.count, total_ns=seen.total_ns + w.total_ns)
    return sorted(merged.values(), key=lambda w: -w.total_ns)


class WaitStacksScreen(DetailScreen):
    """Blocking stacks of one process, command or blocking function, and their wakers."""

    TITLE = "Waits: blocking stacks and who woke them"

    def __init__(self, selection: Selection, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.selection = selection
        self.stacks = selected_stacks(snapshot, selection)

    def still_present(self, snapshot: Snapshot) -> bool:
        found = selected_stacks(snapshot, self.selection)
        if found:
            self.stacks = found
        return bool(found)

    def shown(self) -> object:
        return self.stacks, self.selection

    def _window(self) -> float:
        waits = self.snapshot.waits
        return waits.window_s if waits else 0.0

    def header_items(self) -> list[Item]:
        kind, what = self.selection
        total = sum(s.total_ns for s in self.stacks)
        count = sum(s.count for s in self.stacks)
        title = Text("blocked waits of " if kind != "reason" else "blocked waits in ", style="bold")
        label = {"pid": "pid ", "comm": "command ", "cgroup": "cgroup ", "reason": ""}[kind]
        title.append(label + printable(what), style="bold cyan")
        waits = count_of(count, "wait")
        return [Item(title, MUST),
                item(f"{waits} {self.window_label(self._window())}", 90, short=f"{waits}",
                     gap="   "),
                item(f"total {format_ns(total)}", 80, gap=", ")]

    def draw(self) -> None:
        self.header_widget().update(self.header())
        window = self._window()
        lines: list = []
        for s in self.stacks[:STACKS_SHOWN]:
            longest = f"max {format_ns(s.max_ns)}" if s.count else "none ended yet"
            head = Text(f"{s.state}  {printable(s.reason)}  {count_of(s.count, 'wait')}, total "
                        f"{format_ns(s.total_ns)} ({percent(s.total_ns, window):.1f}%), "
                        f"{longest}   {printable(s.comm)} {format_pid(s.pid)}", style="bold")
            lines.append(head)
            lines.extend(frame_line(frame) for frame in s.frames)
            lines.extend(frame_line(f"[user] {f.symbol}  {f.module}", "green") for f in s.user)
            for w in (merged_wakers(s.wakers) if self.merge_offsets else s.wakers)[:WAKERS_SHOWN]:
                if w.comm == WAKER_WAITING and not w.pid:  # no one woke these: yet
                    lines.append(Text(f"    still waiting at an interval's end: "
                                      f"{format_ns(w.total_ns)} of waiting so far", style="dim"))
                    continue
                who = f"{w.comm} {format_pid(w.pid)}" if w.pid else w.comm
                waker = Text("    woken by ", style="dim")
                waker.append_text(escaped(who, "bold magenta"))
                waker.append(f"  {count_of(w.count, 'time')}, {format_ns(w.total_ns)} of waiting",
                             style="dim")
                lines.append(waker)
                lines.extend(frame_line("  " + frame, "magenta") for frame in w.frames[:12])
            lines.append(_histogram_table("wait time", hist_buckets_us(s.hist), 1000))
        if len(self.stacks) > STACKS_SHOWN:
            lines.append(Text(f"... {len(self.stacks) - STACKS_SHOWN} more stacks", style="dim"))
        if not self.stacks:
            lines.append(Text("no blocked waits kept for this", style="dim"))
        runq = hist_buckets_us(selected_runq_hist(self.snapshot, self.selection))
        if runq:
            lines.append(heading("waiting for a CPU"))
            lines.append(_histogram_table("run-queue wait", runq, 1000))
        self.query_one("#stack-list-text").update(Group(*lines))
