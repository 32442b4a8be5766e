"""What a pane is: the descriptor types every pane's entry in ktop.registry fills, and the narrow
services a pane's build gets from the live source. The list itself (PANES) is here, empty
until ktop.registry fills it, so `spec.number` needs no import of the registry.

No ktop import at run time: a pane's parts, the engine, the exporters and the UI all read
these types, and none of them is imported back from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from ktop.model import Snapshot, UserFrame
    from ktop.symbolize.kernel import Kallsyms


class Collector(Protocol):
    """Loads and attaches its BPF program in start(); drain() empties what it counted."""

    def start(self) -> None: ...
    def drain(self) -> Any: ...
    def close(self) -> None: ...


class Aggregator(Protocol):
    """Folds drains into a window and builds the pane's profile from it: the window's, the
    totals since start (cumulative), or the newest interval's alone (latest, for a record)."""

    def add(self, drain: Any) -> None: ...
    def profile(self, cumulative: bool = False, latest: bool = False) -> Any: ...
    def fold_exited(self, is_alive: Callable[[int], bool]) -> None: ...


@dataclass(frozen=True)
class Figure:
    """One figure of each recorded interval, drawn as a sparkline on the replay's timeline."""

    label: str
    short: str  # the label on a narrow screen
    value: Callable[[Snapshot], float]  # NaN when the interval has no data for it
    unit: str  # after the scale's top value: "%", "ms"
    per_second: bool = False  # drawn divided by the interval's length


# A row filter: does the row of this pid and cgroup show (--pid, --cgroup, G)?
Shows = Callable[[int, str], bool]
# A stack as the folded exports write it, root first, and its weight in the pane's count.
WeightedStack = tuple[list[str], float]


@dataclass(frozen=True)
class Comparison:
    """How a pane's rows compare between two windows (ktop.compare: one diff for every
    pane). Each row is named by a key that means the same row in both windows, and measured
    by one figure a second of its window, so windows of different lengths compare."""

    label: str  # the figure's column: "CPU%", "wait ms/s"
    unit: str  # how ktop.compare formats it: "%", "ms/s", "B/s"
    rows: Callable[[Snapshot, Shows | None], Sequence[Any]]  # the rows, filtered
    key: Callable[[Any], tuple]
    name: Callable[[Any], str]  # what the row is called on screen and in the JSON
    amount: Callable[[Any], float]  # in the window, in the pane's own count
    scale: Callable[[Snapshot], float]  # amount x scale = the figure a second
    # The stacks behind a row, weighed in the count stack_scale makes the row's figure of.
    stacks: Callable[[Snapshot, Any], Iterable[WeightedStack]]
    stack_scale: Callable[[Snapshot], float]
    folded_of: str  # the folded stacks (--folded-of) of this pane's weights
    # Rows of processes matched by command instead (m), and so named: their pids are not
    # the same processes in another file.
    command_key: Callable[[Any], tuple] | None = None
    command_name: Callable[[Any], str] | None = None


# (snapshot, include_idle) -> the stacks of one folded export, each with its weight.
StackSource: TypeAlias = "Callable[[Snapshot, bool], Iterable[WeightedStack]]"


@dataclass(frozen=True)
class FoldedExport:
    """One kind of folded stacks a pane writes (`--snapshot FILE.folded --folded-of NAME`)."""

    name: str  # --folded-of NAME
    weight: str  # what a stack's number counts, for --help and the man page
    stacks: StackSource


@dataclass(frozen=True)
class PprofExport:
    """The pane's pprof profile (`--snapshot FILE.pb.gz --pprof-of NAME`), one per pane."""

    name: str  # --pprof-of NAME
    what: str  # for --help and the man page
    sample_types: tuple[tuple[str, str], ...]  # (type, unit) of each value, in sample order
    default_type: str  # what pprof shows unless told (-sample_index)
    add: Callable[[Any, Snapshot, bool], None]  # (exports.pprof's tables, snapshot, include_idle)


@dataclass(frozen=True)
class CsvColumns:
    """The pane's columns of `--dump csv`: one row of figures per recorded interval."""

    names: tuple[str, ...]
    cells: Callable[[Snapshot, bool], list[object]]  # (snapshot, show_idle), "" where none


class BuildOptions(Protocol):
    """What a pane's build reads of the command line's options (engine.Options)."""

    @property
    def hz(self) -> int: ...
    @property
    def interval_s(self) -> float: ...
    @property
    def window_s(self) -> float: ...
    @property
    def offcpu_min(self) -> Any: ...


class PaneServices(Protocol):
    """What a pane's build may ask of the live source: the options, kernel symbols and
    lines, user symbols. Not the source itself: an aggregator never calls back into the
    engine for anything else."""

    @property
    def options(self) -> BuildOptions: ...
    def kallsyms(self) -> Kallsyms: ...
    def kernel_lines(self) -> tuple[Any, str]: ...
    def resolve_user(self, pid: int, addresses: Any) -> tuple[UserFrame, ...]: ...


@dataclass(frozen=True)
class PaneDef:
    """One pane. Building may raise collectors.bpfload.Unavailable: the pane then says why."""

    name: str  # --drill NAME:..., keys of Snapshot.unavailable and .loading, widget ids
    field: str  # the Snapshot field holding its profile
    title: str  # its border title, after its number
    key_label: str  # beside its number key in the help and on the tabs
    short_label: str  # on the tabs, when the full labels do not fit
    drill_by: str  # the field of its rows `--drill NAME:WHAT` names one by
    widget: Callable[[], type[Any]]  # imports the widget class (a ktop.ui.widgets.pane.Pane)
    build: Callable[[PaneServices], tuple[Collector, Aggregator]] | None = None  # None: no BPF
    merge: Callable[[Sequence[Any]], Any] | None = None  # records -> one window's profile
    figure: Figure | None = None
    loss_prefix: str = ""  # the header's and L's name for its losses ("cpu.kstack_collision")
    # Its BPF programs, by the start of their names as the kernel keeps them (15 characters):
    # their run time is shown per pane in the header and on L.
    bpf_programs: tuple[str, ...] = ()
    rounding: Mapping[type, Mapping[str, int]] = dataclass_field(default_factory=dict)  # JSON digits
    compare: Comparison | None = None  # against a baseline window (key b, --baseline)
    folded: tuple[FoldedExport, ...] = ()  # its folded stacks, one per weight
    pprof: PprofExport | None = None
    csv: CsvColumns | None = None
    # A reader of /proc the engine makes once, starts, and collects at every refresh instead
    # of a BPF build: its rows are the pane's field (the processes'). See engine.ProcReader.
    reader: Callable[[], Any] | None = None
    # Its Prometheus / OpenMetrics families: (exports.openmetrics.SnapshotMetrics, snapshot).
    metrics: Callable[[Any, Snapshot], list[Any]] | None = None

    def window_s(self, snapshot: Snapshot) -> float:
        """The seconds its profile in the snapshot covers (0 for none, or no window of its
        own: the processes'); the BPF panes attach one after the other, so each has its own."""
        return getattr(getattr(snapshot, self.field, None), "window_s", 0.0) or 0.0

    @property
    def number(self) -> int:
        return PANES.index(self) + 1

    @property
    def numbered_title(self) -> str:
        return f"{self.number} {self.title}"


# Every pane, in screen order: ktop.registry fills it (a pane's number is its place here).
PANES: list[PaneDef] = []
