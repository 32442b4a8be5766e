"""The header bar: the machine, the CPU time split, samples against expected, every loss."""

from __future__ import annotations

import time

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ktop.model import PANE_FUNCTIONS, Snapshot
from ktop.text import printable
from ktop.units import format_span


def _losses(snapshot: Snapshot) -> dict[str, int]:
    lost: dict[str, int] = {}
    for prefix, profile in (("cpu", snapshot.cpu), ("lock", snapshot.locks), ("io", snapshot.blockio)):
        if profile is not None:
            for name, count in profile.lost.items():
                if count:
                    lost[f"{prefix}.{name}"] = count
    return lost


def header_text(
    snapshot: Snapshot | None, paused: bool = False, note: str = "", badge: str = ""
) -> Text:
    """badge: what must not be missed, first on the top line (a recording under way)."""
    if snapshot is None:
        return Text("ktop  starting collectors...", style="bold")
    text = Text()
    text.append("ktop ", style="bold")
    text.append(f"{snapshot.ktop_version}  ")
    if badge:
        text.append(f" {badge} ", style="bold reverse red")
        text.append("  ")
    text.append(printable(snapshot.hostname), style="bold cyan")
    text.append(f"  {snapshot.kernel}  ")
    cpu = snapshot.cpu
    if cpu:
        text.append(f"{cpu.cpus} CPUs  {cpu.sample_hz} Hz  ")
    text.append(time.strftime("%H:%M:%S", time.localtime(snapshot.taken_at)))
    cost = snapshot.cost
    if cost is not None:  # what the observer costs, so the user can judge it
        bpf = "n/a" if cost.bpf_percent is None else f"{cost.bpf_percent:.1f}%"
        text.append(f"   ktop CPU {cost.cpu_percent:.1f}%  BPF {bpf}", style="dim")
    if paused:
        text.append("  PAUSED (space resumes)", style="bold reverse yellow")
    text.append("\n")
    if cpu:
        t = cpu.times
        text.append("CPU ")
        text.append(f"kernel {t.kernel:5.1f}%", style="bold red")
        text.append(f"  user {t.user:5.1f}%", style="green")
        text.append(f"  idle {t.idle:5.1f}%", style="dim")
        if t.steal >= 0.05:
            text.append(f"  steal {t.steal:.1f}%")
        text.append(
            f"   samples {cpu.total_samples}/{cpu.expected_samples} expected"
            f" in {format_span(cpu.window_s)}{' (cumulative)' if cpu.cumulative else ''}"
            f"  kernel {cpu.kernel_samples}  user {cpu.user_samples}  idle {cpu.idle_samples}"
        )
    elif PANE_FUNCTIONS in snapshot.loading:
        text.append(f"CPU sampling: {snapshot.loading[PANE_FUNCTIONS]}", style="dim")
    else:
        text.append("CPU sampling unavailable", style="yellow")
    text.append("\n")
    lost = _losses(snapshot)
    if lost:
        text.append("lost: " + "  ".join(f"{k} {v}" for k, v in lost.items()), style="bold yellow")
    else:
        text.append("lost: none", style="dim")
    text.append(f"   headers: {snapshot.headers}", style="dim")
    if note:
        text.append(f"   {note}", style="bold")
    return text


class HeaderBar(Widget):
    """Three lines of fixed height, drawn with the line API: the clock and the CPU split
    change every second, and only the lines that changed are rebuilt and repainted (a
    Rich renderable would be laid out whole each time; a Static would re-lay the screen)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: list[Text] = []
        self._strips: dict[int, tuple[tuple, Strip]] = {}

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        line = self._lines[y] if y < len(self._lines) else Text()
        key = (line.plain, tuple(line.spans), width, base)
        cached = self._strips.get(y)
        if cached is None or cached[0] != key:
            strip = Strip(list(line.render(self.app.console))).crop(0, width).apply_style(base)
            # The fill takes the background alone, as Textual's padding beside it does.
            fill = Style(bgcolor=base.bgcolor)
            cached = self._strips[y] = (key, strip.adjust_cell_length(width, fill))
        return cached[1]

    def show(
        self, snapshot: Snapshot | None, paused: bool = False, note: str = "", badge: str = ""
    ) -> None:
        lines = list(header_text(snapshot, paused, note, badge).split("\n"))
        for y in range(max(len(lines), len(self._lines))):
            old = self._lines[y] if y < len(self._lines) else None
            new = lines[y] if y < len(lines) else None
            if old is None or new is None or old.plain != new.plain or old.spans != new.spans:
                self.refresh(Region(0, y, self.size.width or 1000, 1))
        self._lines = lines
