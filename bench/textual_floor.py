#!/usr/bin/env python3
"""The floor under ktop's drawing: what Textual itself costs to redraw a screen like ktop's.

A bare Textual app with ktop's shape (a 3-line header, a 2x2 grid of bordered panes, a
footer) changes N lines of every pane once a second; nothing is collected. Run in a real
terminal (tmux, 160x50), its CPU% is the least any Textual screen changing that much costs:

    python bench/textual_floor.py --measure [--lines 22] [--seconds 30] [--every 1]
                                  [--ktop-driver]

`--shape nested` draws each pane as ktop did before (a bordered container holding a table
with a scrollbar), `--shape flat` as ktop does now (the table draws its own border).
`--every 2` changes the lines every 2 s (ktop -d 2); `--ktop-driver` runs on ktop's terminal
driver, whose input thread sleeps until a key (Textual's looks ten times a second).
Without --measure it just runs the app (q quits).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.containers import Grid, Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer

ROWS = 22
CELLS = 6


class Lines(ScrollView):
    """A line-API table: one cached Strip per row, rebuilt only when its text changes."""

    DEFAULT_CSS = "Lines { height: 1fr; scrollbar-size-vertical: 1; }"

    def __init__(self, rows: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows = [""] * rows
        self.cache: dict[int, tuple[str, Strip]] = {}

    def on_mount(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows) + 20)  # scrolls, as ktop's do

    def set_rows(self, rows: list[str]) -> None:
        for y, (old, new) in enumerate(zip(self.rows, rows)):
            if old != new:
                self.refresh_lines(y)
        self.rows = rows

    def render_line(self, y: int) -> Strip:
        text = self.rows[y] if y < len(self.rows) else ""
        cached = self.cache.get(y)
        if cached is None or cached[0] != text:
            styles = (Style(bold=True, color="red"), Style(color="green"), Style())
            segments = [Segment(f"{cell:>12}", styles[i % 3]) for i, cell in enumerate(text.split())]
            cached = self.cache[y] = (text, Strip(segments).adjust_cell_length(self.size.width))
        return cached[1]


class Header(Widget):
    DEFAULT_CSS = "Header { height: 3; }"
    text = ""

    def render(self) -> str:
        return self.text


class FloorApp(App[None]):
    CSS = """
    #grid { grid-size: 2 2; height: 1fr; }
    .pane { border: round $panel-lighten-2; height: 1fr; }
    """
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(self, shape: str, lines: int, every: float = 1.0,
                 ktop_driver: bool = False) -> None:
        self.every, self.ktop_driver = every, ktop_driver  # App.__init__ asks for the driver
        super().__init__()
        self.shape, self.lines, self.tick = shape, lines, 0

    def compose(self) -> ComposeResult:
        yield Header()
        with Grid(id="grid"):
            for i in range(4):
                if self.shape == "nested":
                    with Vertical(classes="pane"):
                        yield Lines(ROWS, id=f"t{i}")
                else:
                    yield Lines(ROWS, id=f"t{i}", classes="pane")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(self.every, self.update_panes)

    def get_driver_class(self):
        if not self.ktop_driver:
            return super().get_driver_class()
        from ktop.ui.driver import QuietLinuxDriver  # noqa: PLC0415

        return QuietLinuxDriver

    def update_panes(self) -> None:
        self.tick += 1
        header = self.query_one(Header)
        header.text = f"floor  {self.shape}  tick {self.tick}\nline 2\nline 3"
        header.refresh()
        for i in range(4):
            rows = [
                " ".join(f"{(self.tick if y < self.lines else 0) * (y + c + 1) % 997}.{c}"
                         for c in range(CELLS))
                for y in range(ROWS)
            ]
            self.query_one(f"#t{i}", Lines).set_rows(rows)


def measure(shape: str, lines: int, seconds: float, every: float = 1.0,
            ktop_driver: bool = False) -> float:
    """CPU% of the app running in a private tmux server, after a few seconds' warm-up."""
    socket = f"ktop-floor-{os.getpid()}-{shape}"
    command = (f"{sys.executable} {os.path.abspath(__file__)} --shape {shape} --lines {lines} "
               f"--every {every}" + (" --ktop-driver" if ktop_driver else ""))
    subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-x", "160",
                    "-y", "50", command], check=True)
    try:
        time.sleep(3)
        pid = int(subprocess.run(["tmux", "-L", socket, "display-message", "-p",
                                  "#{pane_pid}"], capture_output=True, text=True).stdout)
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before, started = cpu(), time.monotonic()
        time.sleep(seconds)
        return 100 * (cpu() - before) / (time.monotonic() - started)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("nested", "flat"), default="flat")
    parser.add_argument("--lines", type=int, default=ROWS, help="lines changing per pane per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between changes")
    parser.add_argument("--ktop-driver", action="store_true", help="ktop's terminal driver")
    parser.add_argument("--measure", action="store_true")
    args = parser.parse_args()
    if not args.measure:
        FloorApp(args.shape, args.lines, args.every, args.ktop_driver).run()
        return 0
    for shape in ("nested", "flat"):
        cpu = measure(shape, args.lines, args.seconds, args.every, args.ktop_driver)
        print(f"{shape:7} {args.lines:2} lines/pane every {args.every:g} s: {cpu:.2f}% CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
