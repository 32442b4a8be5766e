"""The block I/O pane's drill-down: a process's I/O (its stacks, latencies, recent requests)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ktop.model import IoProcess, IoRequest, Snapshot
from ktop.stackmerge import merge_io_stacks
from ktop.text import format_pid, human_bytes, printable
from ktop.ui.screens.details import _histogram_table
from ktop.ui.screens.drill import (
    DetailScreen,
    DrillHost,
    frame_line,
    heading,
    merged_note,
    offsets_title,
)
from ktop.ui.widgets.fit import MUST, Item, item
from ktop.units import count_of, format_ns

RECENT_REQUESTS = 50  # of one process, newest first


class IoProcessScreen(DetailScreen):
    """A process doing block I/O: the kernel stacks that submitted it, latencies, requests."""

    TITLE = "Block I/O of a process: stacks, latency, requests"

    def __init__(self, process: IoProcess, snapshot: Snapshot, host: DrillHost) -> None:
        super().__init__(snapshot, host)
        self.process = process

    def still_present(self, snapshot: Snapshot) -> bool:
        p = self.process
        found = next(
            (x for x in (snapshot.blockio.processes if snapshot.blockio else ())
             if (x.pid, x.disk, x.rw) == (p.pid, p.disk, p.rw)),
            None,
        )
        if found is not None:
            self.process = found
        return found is not None

    def _recent(self) -> list[IoRequest]:
        p = self.process
        return [r for r in (self.snapshot.blockio.requests if self.snapshot.blockio else ())
                if (r.pid, r.disk, r.rw) == (p.pid, p.disk, p.rw)][:RECENT_REQUESTS]

    def shown(self) -> object:
        window = self.snapshot.blockio.window_s if self.snapshot.blockio else 0.0
        return self.process, self._recent(), self.window_label(window)

    def header_items(self) -> list[Item]:
        p = self.process
        title = Text("block I/O of ", style="bold")
        title.append(f"{format_pid(p.pid)} ", style="bold")
        title.append(printable(p.comm), style="bold cyan")
        window = self.snapshot.blockio.window_s if self.snapshot.blockio else 0.0
        what = f"{printable(p.disk)} {'reads' if p.rw == 'R' else 'writes'}"
        return [Item(title, MUST),
                item(f"{what} {self.window_label(window)}:", 85, short=f"{what}:"),
                item(f"{count_of(p.requests, 'request')}", 90, gap=" "),
                item(f"{human_bytes(p.bytes)}B", 80, gap=", "),
                item(f"avg size {human_bytes(p.bytes / p.requests if p.requests else 0)}B", 30,
                     gap=", "),
                item(f"avg {format_ns(p.avg_lat_ms * 1e6)}", 70, gap=", "),
                item(f"(queue {format_ns(p.avg_queue_ms * 1e6)})", 40, gap=" ")]

    def draw(self) -> None:
        p = self.process
        self.header_widget().update(self.header())

        lines = [offsets_title("kernel stacks that submitted the I/O", self.merge_offsets)]
        stacks = (merge_io_stacks(p.stacks) if self.merge_offsets
                  else [(s, 1) for s in sorted(p.stacks, key=lambda s: -s.requests)])
        for s, variants in stacks:
            head = Text(f"  {count_of(s.requests, 'request')}", style="bold")
            head.append(merged_note(variants), style="dim")
            lines.append(head)
            lines.extend(frame_line(frame) for frame in s.frames)
        if not p.stacks:
            lines.append(Text("  no kernel stacks kept for this process", style="dim"))
        lines.append(Text(""))
        requests = Table(box=None)
        for name in ("TIME(s)", "DISK", "T", "SECTOR", "BYTES", "QUE(ms)", "LAT(ms)"):
            requests.add_column(name, justify="left" if name in ("DISK", "T") else "right")
        recent = self._recent()
        for r in recent:
            requests.add_row(f"{r.time_s:.6f}", Text(printable(r.disk)), Text(printable(r.rw)),
                             str(r.sector), str(r.bytes),
                             f"{r.queue_ms:.3f}", f"{r.lat_ms:.3f}")
        parts = [*lines, _histogram_table("latency distribution of this process", p.hist_us, 1000),
                 heading("recent requests of this process"), requests]
        if not recent:
            parts.append(Text("  none completed in the window", style="dim"))
        self.query_one("#stack-list-text", Static).update(Group(*parts))

