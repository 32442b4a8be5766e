"""The header bar: the machine, the CPU time split, samples against expected, every loss."""

from __future__ import annotations

import time

from rich.text import Text
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


def header_text(snapshot: Snapshot | None, paused: bool = False, note: str = "") -> Text:
    if snapshot is None:
        return Text("ktop  starting collectors...", style="bold")
    text = Text()
    text.append("ktop ", style="bold")
    text.append(f"{snapshot.ktop_version}  ")
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
    """Three lines of fixed height, redrawn in place: a Static would ask for a layout pass of
    the whole screen on every update, once a second."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = Text()

    def render(self) -> Text:
        return self._text

    def show(self, snapshot: Snapshot | None, paused: bool = False, note: str = "") -> None:
        text = header_text(snapshot, paused, note)
        if text.plain != self._text.plain or text.spans != self._text.spans:  # else no redraw
            self._text = text
            self.refresh()
