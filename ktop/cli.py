"""`ktop`: the live TUI, `ktop --snapshot FILE` or `ktop --record FILE` headless, or
`ktop --replay FILE` of what was saved."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import io
import os
import signal
import stat
import sys
import tempfile
import traceback
from collections.abc import Iterator
from typing import NoReturn

from ktop import __version__
from ktop.collectors.bpfload import pin_mmap_threshold
from ktop.collectors.selfcost import DEFAULT_MAX_COST
from ktop.collectors.waits import DEFAULT_MIN_WALK, WalkMinimums, parse_min_walk
from ktop.config import LAYOUTS
from ktop.engine import Options
from ktop.model import PANE_FUNCTIONS
from ktop.registry import PANES, folded_exports, pprof_exports
from ktop.text import printable
from ktop.units import count_of

MAX_HZ = 10_000  # the kernel's perf_event_max_sample_rate is lower on most machines anyway
GC_THRESHOLDS = (50_000, 10, 10)  # Python's default: (700, 10, 10)


# The longest any duration may be: far beyond use, far within what a timer can wait
# (threading's limit is ~292 years; 1e10 s overflowed it).
MAX_INTERVAL_S = 24 * 3600  # -d and -w
MAX_DURATION_S = 366 * 24 * 3600  # --duration of a --record


def _seconds(limit: float, what: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 0 < value <= limit:  # NaN too
            raise argparse.ArgumentTypeError(
                f"must be a positive number of seconds up to {limit:.0f} ({what}), not {text}")
        return value
    return parse


_positive_float = _seconds(MAX_INTERVAL_S, "a day")
_duration = _seconds(MAX_DURATION_S, "a year")


def _frequency(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_HZ:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_HZ} Hz, not {value}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a process id: {value}")
    return value


def _size(text: str) -> tuple[int, int]:
    cols, sep, rows = text.lower().partition("x")
    try:
        size = (int(cols), int(rows))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected COLSxROWS like 160x50, not {text!r}") from None
    if not sep or not (40 <= size[0] <= 1000 and 10 <= size[1] <= 500):
        raise argparse.ArgumentTypeError(f"expected COLSxROWS from 40x10 to 1000x500, not {text!r}")
    return size


def _readable_file(text: str) -> str:
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"not a readable file: {text!r}")
    return text


def _serve_address(text: str) -> tuple[str, int]:
    from ktop.exports.serve import parse_address

    try:
        host, port = parse_address(text)
        host.encode("idna")  # what getaddrinfo does with it (a bidi mark failed there)
    except UnicodeError:
        raise argparse.ArgumentTypeError(f"not an address: {text!r}") from None
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return host, port


def _series(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be from 1 to 1000 series, not {value}")
    return value


# --snapshot FILE's formats, as --format names them (ktop.writer maps suffixes to them).
FORMAT_NAMES = ("svg", "txt", "json", "folded", "pprof", "prom")
# Every pane's exports, as its PaneDef declares them (ktop.registry; not exports.pprof: protobuf
# loads slowly).
FOLDED_OF = tuple(folded_exports())
PPROF_OF = tuple(pprof_exports())


def _exports_help(exports: dict[str, str]) -> str:
    """cpu: CPU samples (default); locks: ...: each export's name and what it counts."""
    return "; ".join(f"{name}: {what}{' (default)' if i == 0 else ''}"
                     for i, (name, what) in enumerate(exports.items()))


def _megabytes(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of megabytes: {text!r}") from None
    if not 1 <= value <= 1 << 30:  # NaN too
        raise argparse.ArgumentTypeError(f"must be from 1 to {1 << 30} (MB), not {text}")
    return int(value * 1_000_000)


# PANE:WHAT for each pane, as --drill takes it: functions:SYMBOL, ..., processes:PID.
_DRILL_FORMS = [f"{spec.name}:{spec.drill_by.upper()}" for spec in PANES]


def _max_cost(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give a percent of one "
                                         "CPU, e.g. 10 (0 for no budget)") from None
    if not 0 <= value <= 10000 or value != value:
        raise argparse.ArgumentTypeError(f"{text} is out of range: give 0 (no budget) to "
                                         "10000 (% of one CPU)")
    return value


def _offcpu_min(text: str) -> WalkMinimums:
    try:
        return parse_min_walk(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--offcpu-min ")) from None


def _drill(text: str) -> str:
    pane, sep, what = text.partition(":")
    by = {spec.name: spec.drill_by for spec in PANES}
    if not sep or not what or pane not in by:
        raise argparse.ArgumentTypeError(
            f"expected {', '.join(_DRILL_FORMS[:-1])} or {_DRILL_FORMS[-1]}, not {text!r}"
        )
    if by[pane] == "pid" and not (what.isascii() and what.isdigit()):
        raise argparse.ArgumentTypeError(f"{pane} takes a pid, not {what!r}")
    return text


# --help's sections (as perf's options are grouped), in its order; the man page's too.
OPTION_GROUPS = (
    ("collection", "what is collected, and how often"),
    ("display", "what the panes show, live or replayed"),
    ("snapshot", "run headless for a while and write one file: the screen or its data"),
    ("export", "data for other tools: flame graphs, pprof, Prometheus"),
    ("recording and replay", "record every interval to a file, replay it, compare two moments"),
)


class _Parser(argparse.ArgumentParser):
    """argparse, its every error line escaped: they quote what was typed (`--serve`'s
    address, an unknown option, a choice), which may hold a terminal's escapes."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {printable(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """Every option, grouped (ktop.manpage documents them from here too)."""
    parser = _Parser(
        prog="ktop",
        description="Live view of the Linux kernel: hot functions, lock contention, "
        "block I/O, processes, and waits (where threads' time goes off the CPU, and who "
        "woke them). Run as root.",
    )
    collection, display, snapshot, export, recording = (
        parser.add_argument_group(title, description) for title, description in OPTION_GROUPS)
    collection.add_argument("-F", "--frequency", type=_frequency, default=99, metavar="HZ",
                        help="CPU sampling frequency in Hz (default 99)")
    collection.add_argument("-d", "--interval", type=_positive_float, default=1.0, metavar="SECONDS",
                        help="refresh interval (default 1)")
    collection.add_argument("-w", "--window", type=_positive_float, default=5.0, metavar="SECONDS",
                        help="span of the live window (default 5), or of the window over a "
                        "recording's records with --replay")
    display.add_argument("--panes", metavar="LIST",
                        help="the panes to show, in this order (their number keys follow "
                        "it), e.g. functions,waits,syscalls; --panes list names them. A pane "
                        "not chosen is not loaded. Default: the choice kept by key p in "
                        "$XDG_CONFIG_HOME/ktop/ktop.conf, else the default layout; headless "
                        "runs (--snapshot, --record, --serve) read no file: the default layout "
                        "and any pane --folded-of, --pprof-of or --drill names")
    display.add_argument("--layout", choices=tuple(LAYOUTS), metavar="|".join(LAYOUTS),
                        help="a named choice of panes, as btop's presets: "
                        + "; ".join(f"{name}: {','.join(panes) or 'every pane'}"
                                    for name, panes in LAYOUTS.items()))
    display.add_argument("--cumulative", action="store_true",
                        help="count since start instead of the recent window (key c)")
    display.add_argument("--idle", action="store_true", help="show idle rows (key i)")
    display.add_argument("-p", "--pid", type=_pid, metavar="PID",
                        help="show only this process in every pane")
    display.add_argument("--cgroup", metavar="PATH|NAME",
                        help="show only this cgroup v2 and the cgroups below it in every pane "
                        "(/system.slice/nginx.service, its full path under the mount, or the "
                        "name ktop shows: nginx.service, podman:ace6f0acfc2f; key G)")
    snapshot.add_argument("--snapshot", metavar="FILE",
                        help="run headless and write FILE, then exit: the screen (.svg, .txt), "
                        "its data (.json), flame graph stacks (.folded), pprof (.pb.gz) or "
                        "Prometheus text (.prom); - for standard output with --format")
    snapshot.add_argument("--format", choices=FORMAT_NAMES,
                        help="with --snapshot: the format, whatever FILE's suffix")
    export.add_argument("--folded-of", choices=FOLDED_OF, metavar="|".join(FOLDED_OF),
                        help="with folded stacks, the weight of each stack: "
                        f"{_exports_help({n: e.weight for n, (_, e) in folded_exports().items()})}")
    export.add_argument("--pprof-of", choices=PPROF_OF, metavar="|".join(PPROF_OF),
                        help="with pprof: one pane's profile, over its own seconds: "
                        f"{_exports_help({n: e.what for n, (_, e) in pprof_exports().items()})}")
    export.add_argument("--serve", type=_serve_address, metavar="[ADDR:]PORT",
                        help="run headless and serve Prometheus metrics at /metrics (PORT "
                        "alone: 127.0.0.1 only; 0.0.0.0:PORT for every interface)")
    export.add_argument("--top", type=_series, metavar="N",
                        help="with --serve or .prom: series for the top N functions, lock "
                        "callers, disks and processes, the rest summed as other (default 20)")
    snapshot.add_argument("--duration", type=_duration, metavar="SECONDS",
                        help="how long --snapshot collects (default 3), or --record records "
                        "(default: until SIGINT or SIGTERM)")
    snapshot.add_argument("--size", type=_size, default=(160, 50), metavar="COLSxROWS",
                        help="screen size for --snapshot .svg/.txt (default 160x50)")
    snapshot.add_argument("--drill", type=_drill, metavar="PANE:WHAT",
                        help="with --snapshot .svg/.txt: picture the stacks behind one row, "
                        f"{', '.join(_DRILL_FORMS)} (e.g. {PANE_FUNCTIONS}:vfs_read)")
    collection.add_argument("--vmlinux", type=_readable_file, metavar="PATH",
                        help="debug ELF of the running kernel, for file:line in stacks "
                        "(default /usr/lib/debug/boot/vmlinux-$(uname -r) when present)")
    recording.add_argument("--replay", metavar="FILE",
                        help="show a recording (--record FILE) or a snapshot (--snapshot "
                        "FILE.json) instead of live data, no root needed; with --snapshot, "
                        "picture it")
    recording.add_argument("--record", metavar="FILE",
                        help="run headless and append one record per interval (-d) to FILE, "
                        "for --replay FILE later")
    recording.add_argument("--max-size", type=_megabytes, metavar="MB",
                        help="with --record: keep FILE under MB megabytes, dropping the oldest "
                        "records (a ring)")
    recording.add_argument("--at", metavar="HH:MM:SS",
                        help="with --replay of a recording: the moment to show (the window "
                        "ending there), e.g. with --snapshot out.svg")
    recording.add_argument("--baseline", metavar="HH:MM:SS|FILE",
                        help="compare with a baseline: a time in the --replay recording (the "
                        "window of -w ending there), or a file, a recording (all its records) "
                        "or a snapshot (--snapshot FILE.json). Every pane shows each row's "
                        "figure a second, the baseline's and the change (key b in the TUI); "
                        "with --snapshot, .json adds both figures and the change, .folded "
                        "writes two counts a stack (difffolded.pl, flamegraph.pl)")
    recording.add_argument("--dump", choices=("jsonl", "csv"),
                        help="with --replay of a recording: write every record to stdout, one "
                        "line per interval")
    collection.add_argument("--offcpu-min", type=_offcpu_min, default=DEFAULT_MIN_WALK,
                        metavar="US|S=US,D=US", help="waits pane: walk the stacks of waits "
                        "predicted at least this long, in µs: one minimum for every state, or "
                        "S (and the rest) and D (I/O) apart (default "
                        f"{DEFAULT_MIN_WALK}; every wait's time is counted regardless)")
    collection.add_argument("--max-cost", type=_max_cost, default=DEFAULT_MAX_COST,
                        metavar="PERCENT", help="ktop's cost budget, its process and BPF "
                        "programs together, in %% of one CPU (default "
                        f"{DEFAULT_MAX_COST:g}; 0: none): past it, stacks are walked for fewer "
                        "waits (totals stay exact, the walked scaled), said in the header and L")
    parser.add_argument("--version", action="version", version=f"ktop {__version__}")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_panes(parser, args)
    for option, path in (("--snapshot", args.snapshot), ("--record", args.record),
                         ("--replay", args.replay)):
        if path == "":
            parser.error(f"{option} needs a file name, not an empty one")
    if args.serve is not None:
        _check_serve(parser, args)
    elif args.snapshot is None and (args.size != (160, 50) or args.drill):
        parser.error("--size and --drill go with --snapshot FILE")
    if args.duration is not None and args.snapshot is None and args.record is None:
        parser.error("--duration goes with --snapshot FILE or --record FILE")
    if args.snapshot is None and args.format is not None:
        parser.error("--format goes with --snapshot FILE")
    _check_export_options(parser, args)
    if args.record is not None and (args.snapshot or args.replay or args.serve):
        parser.error("--record runs on its own: not with --snapshot, --replay or --serve")
    if args.max_size is not None and args.record is None:
        parser.error("--max-size goes with --record FILE")
    if (args.at or args.dump) and args.replay is None:
        parser.error("--at and --dump go with --replay FILE")
    if args.dump and args.snapshot:
        parser.error("--dump writes to stdout: not with --snapshot")
    if args.baseline is not None:
        _check_baseline(parser, args)
    if args.replay is not None:
        from ktop.record.fileformat import is_recording

        # A FIFO or a device would block the first read, before anything is shown.
        with contextlib.suppress(OSError):
            if not stat.S_ISREG(os.stat(args.replay).st_mode):
                parser.error(f"--replay {printable(args.replay)}: not a regular file; replay "
                             "a file written by --record FILE or --snapshot FILE.json")

        # A recording's window is chosen on replay (-w); a single snapshot's was fixed.
        recording = is_recording(args.replay)
        live_only = {"-F": args.frequency != 99, "-d": args.interval != 1.0,
                     "-w": args.window != 5.0 and not recording,
                     "--cumulative": args.cumulative, "--vmlinux": args.vmlinux is not None,
                     "--duration": args.duration is not None}
        given = [name for name, changed in live_only.items() if changed]
        if given:
            parser.error(f"{', '.join(given)} shape live collection; --replay shows recorded data")
        if (args.at or args.dump) and not recording:
            try:
                os.stat(args.replay)
            except OSError as e:
                parser.error(f"--replay {printable(args.replay)}: " + (
                    "no such file" if e.errno == errno.ENOENT else f"cannot read it: {e.strerror}")
                    + "; --at and --dump replay a recording (--record FILE)")
            parser.error(f"--at and --dump need a recording (--record FILE); "
                         f"{printable(args.replay)} is not one")
    return args


def _check_panes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--panes names panes that exist (`list` lists them, and ktop exits); with --panes or
    --layout, an export of a pane left out is refused. `args.chosen`: the panes named on the
    command line (None: the screen's kept choice, or a headless run's default)."""
    from ktop.config import ChoiceError, exists_line, initial_choice

    args.chosen = None
    if args.panes is not None and args.panes.strip() == "list":
        print(f"ktop: {exists_line()}")
        parser.exit(0)
    if args.panes is not None and args.layout is not None:
        parser.error("--panes and --layout both choose the panes: give one")
    if args.panes is None and args.layout is None:
        return
    try:
        args.chosen, _ = initial_choice(args.panes, args.layout, None)
    except ChoiceError as e:
        parser.error(f"--{'panes' if args.panes is not None else 'layout'}: {e}")
    given = "--panes" if args.panes is not None else f"--layout {args.layout}"
    for option, name in _named_panes(args):
        if name not in args.chosen:
            parser.error(f"{option} is the {name} pane's, which {given} leaves out: add "
                         f"{name} to --panes")


def _named_panes(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(option, pane) of each export or picture that names one pane's data."""
    named = []
    if args.folded_of is not None:
        named.append((f"--folded-of {args.folded_of}", folded_exports()[args.folded_of][0].name))
    if args.pprof_of is not None:
        named.append((f"--pprof-of {args.pprof_of}", pprof_exports()[args.pprof_of][0].name))
    if args.drill is not None:
        pane = args.drill.partition(":")[0]
        named.append((f"--drill {printable(pane)}:...", pane))
    return named


def headless_panes(args: argparse.Namespace) -> tuple[str, ...]:
    """What --snapshot, --record and --serve collect: the panes named on the command line,
    else the default layout and any pane an export names (no config file: a script's
    output does not depend on what a user chose on their screen)."""
    from ktop.config import default_panes

    if args.chosen is not None:
        return tuple(args.chosen)
    named = [name for _, name in _named_panes(args)]
    return (*default_panes(), *(n for n in dict.fromkeys(named) if n not in default_panes()))


def _check_baseline(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--baseline compares what a screen, a picture, JSON or folded stacks show."""
    if args.baseline == "":
        parser.error("--baseline needs a time HH:MM:SS or a file name, not an empty one")
    if args.record is not None or args.serve is not None or args.dump:
        parser.error("--baseline compares on the screen or in --snapshot FILE: not with "
                     "--record, --serve or --dump")
    fmt = _snapshot_format(args)
    if fmt in ("pprof", "prom"):
        parser.error("--baseline with --snapshot writes .svg, .txt, .json or .folded (two "
                     "counts a stack), not pprof or Prometheus text")


def _check_serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    given = [name for name, used in {
        "--snapshot": args.snapshot is not None, "--duration": args.duration is not None,
        "--size": args.size != (160, 50), "--drill": args.drill is not None,
        "--pid": args.pid is not None, "--cgroup": args.cgroup is not None,
    }.items() if used]
    if given:
        parser.error(f"{', '.join(given)} shape a snapshot or the screen; --serve serves metrics")


def _snapshot_format(args: argparse.Namespace) -> str | None:
    if args.snapshot is None:
        return None
    from ktop.writer import SnapshotError, snapshot_format

    try:
        return snapshot_format(args.snapshot, args.format)
    except SnapshotError:
        return None  # said once, with the fix, when the snapshot is run


def _check_export_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    fmt = _snapshot_format(args)
    if args.folded_of is not None and fmt != "folded":
        parser.error("--folded-of goes with folded stacks: --snapshot FILE.folded")
    if args.pprof_of is not None and fmt != "pprof":
        parser.error("--pprof-of goes with pprof: --snapshot FILE.pb.gz")
    if args.top is not None and args.serve is None and fmt != "prom":
        parser.error("--top goes with --serve or --snapshot FILE.prom")


def _options(args: argparse.Namespace, panes: tuple[str, ...] | None = None) -> Options:
    """The engine's options; it loads the BPF programs of `panes` only (default: the
    headless choice)."""
    from ktop.config import bpf_names

    return Options(
        panes=bpf_names(headless_panes(args) if panes is None else panes),
        hz=args.frequency,
        interval_s=args.interval,
        window_s=max(args.window, args.interval),
        cumulative=args.cumulative,
        vmlinux=args.vmlinux,
        offcpu_min=args.offcpu_min,
        cgroup=args.cgroup,
        max_cost=args.max_cost,
    )


# Where ktop's own one-line messages go: the stderr ktop was started with. While a BPF
# program compiles (in the background, once start-up no longer waits for it), fd 2 is
# pointed at a file that catches clang's and the verifier's output.
_messages = sys.stderr


def _say(message: str) -> None:
    # Every line escaped here too (printable leaves escaped text as it is): a message that
    # quotes what a user typed or a file held can never reach the terminal raw.
    print(f"ktop: {printable(message)}", file=_messages, flush=True)


def _fail(message: str, code: int = 1) -> int:
    _say(message)
    return code


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signum)


def _recording(args: argparse.Namespace):
    """(what to replay: a ReplaySource for a recording, a Snapshot for a JSON file, the
    header's note), or (None, "") for live data. Raises RecordingError, one line."""
    if args.replay is None:
        return None, ""
    from ktop.record.fileformat import Recording, is_recording

    note = f"replay of {printable(args.replay)}"
    if not is_recording(args.replay):
        from ktop.exports.jsonfile import read_snapshot_file

        return read_snapshot_file(args.replay), note
    from ktop.codec import RecordingError
    from ktop.record.replay import ReplaySource, find_time

    recording = Recording(args.replay)
    if recording.dropped:  # cut off by kill -9 or a full disk: say so, replay the rest
        _say(f"{printable(args.replay)}: {recording.dropped}; replaying the "
             f"{count_of(len(recording), 'whole record')} before it")
    source = ReplaySource(recording, window_s=args.window)
    if args.at:
        try:
            source.go_to(find_time(recording.records, args.at))
        except ValueError as e:
            raise RecordingError(f"--at {printable(args.at)}: {e}") from None
    return source, note


def _baseline(args: argparse.Namespace, recorded: object):
    """The Baseline --baseline names (None without one). Raises compare.BaselineError."""
    if args.baseline is None:
        return None
    from ktop.compare import load_baseline

    bar = _ProgressBar(f"--baseline {os.path.basename(args.baseline)}: merging", "records")
    try:
        return load_baseline(args.baseline, recorded, args.window, say=_say, progress=bar)
    finally:
        bar.close()  # (Ctrl-C too: the line it says starts a line of its own)


def _is_recording_file(path: str | None) -> bool:
    """A --baseline naming a recording (not a time, not a JSON snapshot)."""
    if path is None or not os.path.isfile(path):
        return False
    from ktop.record.fileformat import is_recording

    return is_recording(path)


class _ProgressBar:
    """How far a long step is, on stderr: a bar drawn over itself on a terminal; elsewhere
    (a pipe, a log) one line when it starts, if it is long."""

    WIDTH = 30
    LONG = 20  # steps: fewer take no time worth a line

    def __init__(self, what: str, unit: str) -> None:
        self.what, self.unit = printable(what), unit
        self.drawn = False
        self.filled = 0
        try:
            self.terminal = _messages.isatty()
        except (AttributeError, ValueError):
            self.terminal = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.LONG or (self.drawn and not self.terminal):
            return
        if not self.terminal:
            _say(f"{self.what} {total} {self.unit}...")
            self.drawn = True
            return
        filled = self.WIDTH * done // total
        if self.drawn and filled == self.filled and done < total:
            return  # drawn again when it moves
        self.filled = filled
        # \r and erase-line: the bar is drawn over itself.
        _messages.write(f"\r\x1b[2Kktop: {self.what} [{'#' * filled}{'.' * (self.WIDTH - filled)}]"
                        f" {done}/{total} {self.unit}")
        _messages.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn and self.terminal:
            _messages.write("\n")
            _messages.flush()


def run_record(args: argparse.Namespace) -> int:
    import threading

    from ktop.record.session import record

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    from ktop.config import bpf_names

    options = Options(hz=args.frequency, interval_s=args.interval, window_s=args.interval,
                      vmlinux=args.vmlinux, offcpu_min=args.offcpu_min,
                      panes=bpf_names(headless_panes(args)))
    return record(args.record, options, args.duration, args.max_size, say=_say, stop=stop)


def run_dump(args: argparse.Namespace) -> int:
    from ktop.codec import RecordingError
    from ktop.record.dump import dump

    try:
        source, _ = _recording(args)
        return dump(source.recording, args.dump, sys.stdout, show_idle=args.idle,
                    pid=args.pid, cgroup=args.cgroup)
    except RecordingError as e:
        return _fail(str(e))
    except BrokenPipeError:  # | head: the reader has what it wanted
        # Python flushes stdout again on exit: point it at /dev/null, as its docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _export_options(args: argparse.Namespace):
    from ktop.exports import ExportOptions

    return ExportOptions(include_idle=args.idle, folded_of=args.folded_of or "cpu",
                         pprof_of=args.pprof_of or "cpu",
                         top=args.top or 20)


def _check_cgroup(args: argparse.Namespace) -> str:
    """--cgroup PATH made relative to the cgroup v2 mount, or why it cannot be shown. A
    replay's cgroups were on the machine that recorded it: its path is taken as written."""
    from ktop.cgroups import CgroupError, resolve_filter

    if args.replay is not None:
        args.cgroup = "/" + args.cgroup.strip().strip("/") if args.cgroup.strip("/ ") else "/"
        return ""
    try:
        args.cgroup = resolve_filter(args.cgroup)
    except CgroupError as e:
        return printable(str(e))
    return ""


def _check_pid(args: argparse.Namespace) -> str:
    """Why --pid cannot be shown live (no such process: perf top -p refuses it too), or "".
    A thread's id is taken as its process's (every pane's rows are processes), said once.
    A replay's processes were on the machine that recorded it."""
    if args.replay is not None:
        return ""
    try:  # /proc/TID exists for a thread too, though no listing shows it
        with open(f"/proc/{args.pid}/status", encoding="utf-8", errors="replace") as f:
            status = dict(line.partition(":")[::2] for line in f.read(4096).splitlines())
        tgid = int(status["Tgid"])
    except (OSError, KeyError, ValueError):
        return f"no process {args.pid} (--pid): `ps -e` lists those running"
    if tgid != args.pid:
        _say(f"--pid {args.pid} is a thread of process {tgid} "
             f"({status.get('Name', '').strip()}): showing the process")
        args.pid = tgid
    return ""


def run_snapshot(args: argparse.Namespace) -> int:
    from ktop.codec import RecordingError
    from ktop.compare import BaselineError
    from ktop.ui.headless import run_snapshot
    from ktop.writer import STDOUT, SnapshotError, check_writable, snapshot_format

    try:
        fmt = snapshot_format(args.snapshot, args.format)
        if args.snapshot == STDOUT:
            if fmt == "pprof" and sys.stdout.isatty():
                raise SnapshotError("pprof is binary: redirect standard output to a file, "
                                    "or name one: --snapshot FILE.pb.gz")
        else:
            check_writable(args.snapshot)
        recorded, note = _recording(args)
    except (SnapshotError, RecordingError) as e:
        return _fail(str(e))
    try:
        baseline = _baseline(args, recorded)
    except BaselineError as e:
        return _fail(str(e), 2)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        written = run_snapshot(
            args.snapshot, _options(args), args.duration or 3.0, args.size, show_idle=args.idle,
            recorded=recorded, fmt=fmt, exports=_export_options(args), pid=args.pid,
            panes=headless_panes(args),
            cgroup=args.cgroup,
            drill=args.drill, source_note=note, baseline=baseline,
        )
    except (SnapshotError, RecordingError) as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return _fail("interrupted; nothing written", 130)
    except BrokenPipeError:  # `ktop --snapshot - ... | head`
        return 0
    if written != STDOUT:
        _say(f"wrote {printable(written)}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    import threading

    from ktop.codec import RecordingError
    from ktop.engine import LiveSource, RecordedSource
    from ktop.exports.openmetrics import MetricsPage
    from ktop.exports.serve import ServeError, bind, serve

    try:
        recorded, _note = _recording(args)
        page = MetricsPage(top=args.top or 20, include_idle=args.idle)
        host, port = args.serve
        server = bind(host, port, page, _say)
    except (RecordingError, ServeError) as e:
        return _fail(str(e))
    from ktop.model import Snapshot

    if recorded is None:
        source = LiveSource(_options(args))
        source.cumulative = True  # counters since start: Prometheus takes rates itself
    elif isinstance(recorded, Snapshot):
        source = RecordedSource([recorded])
    else:  # a recording: its window at the end (or --at)
        source = recorded
    stop = threading.Event()

    def stop_serving(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stop_serving)
    signal.signal(signal.SIGINT, stop_serving)
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    _say(f"serving http://{shown}:{bound_port}/metrics (Ctrl-C stops)")
    try:
        serve(server, source, args.interval, stop)
    except RecordingError as e:  # a replayed record that is not ktop's
        return _fail(str(e))
    return 0


def run_interactive(args: argparse.Namespace) -> int:
    from ktop.codec import RecordingError
    from ktop.compare import BaselineError

    try:
        recorded, note = _recording(args)
    except RecordingError as e:
        return _fail(str(e))
    if not (sys.stdin.isatty() and sys.__stderr__ and sys.__stderr__.isatty()):
        return _fail("needs a terminal; for a file use --snapshot FILE.svg|.txt|.json", 2)
    loader = None
    try:
        if _is_recording_file(args.baseline):  # merged once the screen is up: a bar there
            from ktop.compare import load_baseline

            def loader(say, progress):
                return load_baseline(args.baseline, recorded, args.window, say, progress)
            baseline = None
        else:
            baseline = _baseline(args, recorded)
    except BaselineError as e:
        return _fail(str(e), 2)
    from ktop.config import config_path, initial_choice
    from ktop.engine import LiveSource, RecordedSource
    from ktop.model import Snapshot

    # The panes shown: --panes or --layout, else the choice kept by key p, else the default.
    kept_in = config_path()
    panes, warning = initial_choice(args.panes, args.layout, kept_in)
    if warning:
        _say(warning)
    if recorded is None:
        source = LiveSource(_options(args, panes))
    elif isinstance(recorded, Snapshot):
        source = RecordedSource([recorded])
    else:
        source = recorded

    # Textual draws on sys.__stderr__. Give it its own descriptor for the terminal and point
    # fd 2 at a private file, so nothing bcc, clang or libbpf prints lands on the screen.
    terminal_fd = os.dup(2)
    original_stderr = sys.__stderr__
    log = tempfile.TemporaryFile(mode="w+b")
    # backslashreplace: a lone surrogate that escaped escaping must not kill Textual's writer
    # thread (the screen then froze and ignored q, Ctrl-C and SIGTERM).
    sys.__stderr__ = os.fdopen(terminal_fd, "w", buffering=1, closefd=False, encoding="utf-8",
                               errors="backslashreplace")
    os.dup2(log.fileno(), 2)
    # Started before Textual is even imported: the processes pane's first CPU% interval and
    # the BPF compile run while Textual loads, and the first screen shows them at once.
    source.start(wait=False, patient=True)
    from rich.console import Console  # noqa: PLC0415 - loaded by Textual anyway, from here on

    from ktop.ui.app import build_app  # noqa: PLC0415

    app = build_app(source, interval_s=args.interval, show_idle=args.idle, pid=args.pid,
                    cgroup=args.cgroup, panes=panes, config_path=kept_in,
                    config_warning=warning,
                    source_note=note, baseline=baseline, baseline_loader=loader)
    # Textual prints an unhandled error's traceback here once the terminal is restored.
    traceback_text = io.StringIO()
    app.error_console = Console(file=traceback_text, width=120, color_system=None,
                                force_terminal=False, markup=False, highlight=False)
    error: BaseException | None = None
    try:
        app.run()
    except Exception as e:  # outside Textual's own handling (start-up, shut-down)
        error = e
        traceback_text.write(traceback.format_exc())
    finally:
        os.dup2(terminal_fd, 2)
        os.close(terminal_fd)
        sys.__stderr__ = original_stderr
        log.close()
    if app.file_error:  # a replayed record that is not ktop's: one line, not a crash
        return _fail(app.file_error)
    if app.baseline_error:  # --baseline FILE, merged on the screen, cannot be compared with
        return _fail(app.baseline_error, 2)
    error = error or getattr(app, "_exception", None)  # Textual keeps the one it handled
    if error is not None or traceback_text.getvalue().strip():
        from ktop.crash import crash_line

        return _fail(crash_line(error, traceback_text.getvalue()))
    return app.return_code or 0


# Modules that load OpenSSL's libraries when imported, which only prometheus_client needs
# (--serve and .prom pictures import ssl): asyncio imports ssl if it can, hashlib _hashlib
# (its builtin SHA-256 gives the same digests).
_OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")


@contextlib.contextmanager
def without_openssl() -> Iterator[None]:
    """Keep OpenSSL out of this process while ktop runs: libcrypto and libssl stay resident
    (their code and initialised tables) for nothing. Entered before asyncio and hashlib are
    first imported; a module already imported is left as it is."""
    blocked = [name for name in _OPENSSL_MODULES if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # an import raises ImportError
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.serve is not None or _snapshot_format(args) == "prom":
            return _run(args)
        with without_openssl():
            return _run(args)
    except KeyboardInterrupt:  # Ctrl-C while a baseline loads, a dump writes...: no traceback
        return _fail("interrupted", 130)


def _run(args: argparse.Namespace) -> int:
    global _messages
    # Collect young objects every 50,000 allocations, not 700: each refresh allocates tens of
    # thousands of rows that live until the next one and builds few cycles, so most
    # collections found nothing and, through the older generations, walked every long-lived
    # object (README: Garbage collection).
    gc.set_threshold(*GC_THRESHOLDS)
    pin_mmap_threshold()
    try:
        _messages = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (OSError, ValueError, AttributeError):  # no real stderr (tests capture it)
        _messages = sys.stderr
    if args.cgroup is not None:
        error = _check_cgroup(args)
        if error:
            return _fail(error)
    if args.pid is not None:
        error = _check_pid(args)
        if error:
            return _fail(error)
    if args.serve is not None:
        return run_serve(args)
    if args.record:
        return run_record(args)
    if args.dump:
        return run_dump(args)
    return run_snapshot(args) if args.snapshot else run_interactive(args)


if __name__ == "__main__":
    sys.exit(main())
