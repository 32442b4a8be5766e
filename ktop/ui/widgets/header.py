"""The header bar: what the screen shows (filters, pause, replay, recording) first, then the
machine, the CPU time split, samples against expected, and the losses (details on L)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ktop.losses import BPF_CACHE_REPLACED, counts_intact, reason
from ktop.model import PANE_FUNCTIONS, Pressure, SelfCostRow, Snapshot
from ktop.registry import PANES, PaneDef
from ktop.text import printable
from ktop.ui.widgets.fit import MUST, Item, fit_items, item
from ktop.units import format_span


class Badge(NamedTuple):
    """A state the user must not miss (a filter, pause, replay, a recording): shown first on
    the top line, where no width cuts it. The text is escaped here, never markup."""

    text: str
    style: str = "bold reverse yellow"


# Losses that cost no count (what they dropped is counted all the same) are told apart from
# those that do (ktop.losses: counts_intact), or a busy disk's dropped list entries read as
# thousands of lost samples.
def _counts_intact(key: str) -> bool:
    """Of a loss keyed as losses() keys it: "io.ringbuf_full"."""
    prefix, _, name = key.partition(".")
    spec = _pane_of_prefix().get(prefix)
    return spec is not None and counts_intact(spec.name, name)


def _pane_of_prefix() -> dict[str, PaneDef]:
    return {spec.loss_prefix: spec for spec in PANES if spec.loss_prefix}


def losses(snapshot: Snapshot) -> dict[str, int]:
    """Every loss in the window, as "cpu.kstack_collision": count (none that counted 0)."""
    lost: dict[str, int] = {}
    for spec in PANES:
        profile = getattr(snapshot, spec.field) if spec.loss_prefix else None
        if profile is not None:
            for name, count in profile.lost.items():
                if count:
                    lost[f"{spec.loss_prefix}.{name}"] = count
    return lost


def loss_lines(snapshot: Snapshot | None) -> list[tuple[str, str, int, str, bool]]:
    """(pane, loss name, count, why it happens, whether counts are intact) for each loss in
    the window: those that cost counts first."""
    if snapshot is None:
        return []
    rows = []
    pane_of_loss = _pane_of_prefix()
    for key, count in losses(snapshot).items():
        prefix, name = key.split(".", 1)
        spec = pane_of_loss[prefix]
        rows.append((spec.numbered_title, name, count, reason(spec.name, name),
                     counts_intact(spec.name, name)))
    rows.sort(key=lambda row: row[4])  # stable: each pane's order kept
    cost = snapshot.cost
    if cost is not None and cost.budget_steps:  # the budget's steps: what they drop, first
        rows.insert(0, ("ktop", "over --max-cost", len(cost.budget_steps), budget_text(cost),
                        True))
    return rows


def budget_text(cost: SelfCostRow) -> str:
    """What the cost budget's steps in force do, for L."""
    spent = cost.cpu_percent + (cost.bpf_percent or 0.0)
    return (f"ktop's cost ({spent:.1f}% of one CPU, process and BPF) went past --max-cost "
            f"{cost.max_cost:g}%; in force, in order: "
            + "; ".join(printable(step) for step in cost.budget_steps)
            + ". Every total stays exact; the waits walked stand for the rest (scaled, "
            "sampled_every in the stacks). Undone when the load falls.")


def header_text(
    snapshot: Snapshot | None,
    badges: Sequence[Badge] = (),
    *,
    filtered: bool = False,
    idle_hidden: bool = True,
    width: int | None = None,
) -> Text:
    """badges: first on the top line. filtered: the panes show one process or cgroup, while
    the CPU split and samples here are the whole machine's (said so). width: each line fits
    it by dropping whole items, the least useful first (ktop.ui.widgets.fit)."""
    return Text("\n").join(fit_items(line, width) for line in header_items(
        snapshot, badges, filtered=filtered, idle_hidden=idle_hidden))


def header_items(
    snapshot: Snapshot | None,
    badges: Sequence[Badge] = (),
    *,
    filtered: bool = False,
    idle_hidden: bool = True,
) -> list[list[Item]]:
    """The header's three lines as items, each with its worth (see header_text)."""
    top = [item("ktop", MUST, "bold", gap="")]
    for badge in badges:
        top.append(item(f" {printable(badge.text)} ", MUST, badge.style, gap=" "))
    if snapshot is None:
        top.append(item("starting collectors...", MUST, "bold", gap=" "))
        return [top]
    top.append(item(printable(snapshot.hostname), 8, "bold cyan", gap=" "))
    cpu = snapshot.cpu
    if cpu:
        top.append(item(f"{cpu.cpus} CPUs", 4))
        top.append(item(f"{cpu.sample_hz} Hz", 4))
    top.append(item(time.strftime("%H:%M:%S", time.localtime(snapshot.taken_at)), 9))
    cost = snapshot.cost
    if cost is not None:  # what the observer costs, so the user can judge it
        bpf = "n/a" if cost.bpf_percent is None else f"{cost.bpf_percent:.1f}%"
        top.append(item(f"ktop CPU {cost.cpu_percent:.1f}%  BPF {bpf}", 6, "dim", gap="   "))
        if cost.budget_steps:  # past --max-cost: what is degraded, never silent
            step = printable(cost.budget_steps[-1])
            top.append(item(f"over budget {cost.max_cost:g}%: {step} (L)", MUST - 1,
                            "bold yellow", short=f"over budget {cost.max_cost:g}% (L)"))
        if cost.bpf_panes:
            shown = "  ".join(f"{printable(pane)} {percent:.1f}"
                              for pane, percent in cost.bpf_panes.items())
            top.append(item(f"({shown})", 1, "dim", gap=" "))
    top.append(item(f"v{printable(snapshot.ktop_version)}", 2, "dim"))

    split: list[Item] = []
    times = cpu.times if cpu else snapshot.cpu_times
    if times is not None:
        label = Text("machine " if filtered else "CPU ", style="bold yellow" if filtered else "")
        # kernel as top's sy: hard and soft interrupt time shown apart below.
        label.append(f"kernel {times.system:5.1f}%", style="bold red")
        split.append(Item(label, 10, gap=""))
        split.append(item(f"user {times.user:5.1f}%", 9, "green"))
        split.append(item(f"idle {times.idle:5.1f}%", 8, "dim"))
        # (none to speak of: the first to go on a narrow screen)
        split.append(item(f"iowait {times.iowait:4.1f}%", 7 if times.iowait >= 0.05 else 3,
                          "bold yellow" if times.iowait >= 10 else "dim"))
        # kernel time no process owns, after wa as top puts hi and si
        for name, share in (("irq", times.irq), ("softirq", times.softirq)):
            split.append(item(f"{name} {share:4.1f}%", 7 if share >= 0.05 else 3,
                              "red" if share >= 0.05 else "dim"))
        if times.steal >= 0.05:
            split.append(item(f"steal {times.steal:.1f}%", 5))
    if cpu:
        # "idle-task", not "idle": beside the idle % above, a count of 0 read as a contradiction
        # (the cpu-clock event rarely fires on a tickless idle CPU).
        hidden = " hidden (i)" if idle_hidden else ""
        counted = f"samples {cpu.total_samples}/{cpu.expected_samples}"
        span = f"in {format_span(snapshot.duration_s)}{' (cumulative)' if cpu.cumulative else ''}"
        split.append(item(f"{counted} expected {span}", 6, short=counted, gap="   "))
        split.append(item(f"kernel {cpu.kernel_samples}", 3, gap=":  "))
        split.append(item(f"user {cpu.user_samples}", 3))
        split.append(item(f"idle-task {cpu.idle_samples}{hidden}", 2))
    elif PANE_FUNCTIONS in snapshot.loading:
        split.append(item(f"CPU sampling: {printable(snapshot.loading[PANE_FUNCTIONS])}", 5,
                          "dim", short="CPU sampling: loading", gap="   "))
    elif PANE_FUNCTIONS in snapshot.unavailable:
        split.append(item("CPU sampling unavailable", 5, "yellow", gap="   "))
    else:  # attached, its first drain not yet in
        split.append(item("CPU sampling: waiting for the first samples", 5, "dim",
                          short="CPU sampling: waiting", gap="   "))

    bottom: list[Item] = []
    lost = losses(snapshot)
    lost = {key: count for key, count in lost.items()  # how a pane started: L says it
            if key.partition(".")[2] != BPF_CACHE_REPLACED}
    intact = sum(count for key, count in lost.items() if _counts_intact(key))
    total = sum(lost.values()) - intact
    if total:
        bottom.append(item(f"lost {total} (L lists)", 10, "bold yellow"))
    else:
        bottom.append(item("lost none", 10, "dim"))
    if intact:
        bottom.append(item(f"{intact} not in recent requests, counts intact"
                           f"{'' if total else ' (L lists)'}", 4, "dim",
                           short=f"{intact} not listed"))
    if snapshot.pressure is not None:
        bottom.append(Item(pressure_text(snapshot.pressure), 6, gap="   "))
    if snapshot.cgroup_pressure is not None:  # --cgroup's own: what its user came for
        bottom.append(Item(pressure_text(snapshot.cgroup_pressure, snapshot.cgroup_pressure_of),
                           7, gap="   "))
    bottom.append(item(f"kernel {printable(snapshot.kernel)}", 2, "dim", gap="   "))
    bottom.append(item(f"headers: {printable(snapshot.headers)}", 1, "dim"))
    return [top, split, bottom]


def pressure_text(p: Pressure, of: str = "") -> Text:
    """PSI avg10 as "PSI cpu 12.0 io 3.1/0.4 mem 0.0/0.0" (some/full), a stall in bold; a
    cgroup's own (of: its path) as "PSI of /its/path cpu ..."."""
    text = Text("PSI", style="bold")
    if of:
        text.append(f" of {printable(of)}", style="bold yellow")
    for name, some, full in (("cpu", p.cpu_some, p.cpu_full), ("io", p.io_some, p.io_full),
                             ("mem", p.memory_some, p.memory_full)):
        shown = f"{some:.1f}" + (f"/{full:.1f}" if full is not None and name != "cpu" else "")
        text.append(f" {name} ")
        text.append(shown, style="bold red" if some >= 10 else "")
    return text


class HeaderBar(Widget):
    """Three lines of fixed height, drawn with the line API: the clock and the CPU split
    change every second, and only the lines that changed are rebuilt and repainted (a
    Rich renderable would be laid out whole each time; a Static would re-lay the screen)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: list[Text] = []
        self._shown: tuple | None = None  # what show() was given: fitted again on a resize
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

    def on_resize(self) -> None:
        if self._shown is not None:
            snapshot, badges, filtered, idle_hidden = self._shown
            self.show(snapshot, badges, filtered=filtered, idle_hidden=idle_hidden)

    def show(
        self,
        snapshot: Snapshot | None,
        badges: Sequence[Badge] = (),
        *,
        filtered: bool = False,
        idle_hidden: bool = True,
    ) -> None:
        self._shown = (snapshot, tuple(badges), filtered, idle_hidden)
        text = header_text(snapshot, badges, filtered=filtered, idle_hidden=idle_hidden,
                           width=self.size.width or None)
        lines = list(text.split("\n"))
        for y in range(max(len(lines), len(self._lines))):
            old = self._lines[y] if y < len(self._lines) else None
            new = lines[y] if y < len(lines) else None
            if old is None or new is None or old.plain != new.plain or old.spans != new.spans:
                self.refresh(Region(0, y, self.size.width or 1000, 1))
        self._lines = lines
