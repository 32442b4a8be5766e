"""ktop(1), generated from what it documents: the options from the CLI's argparse parser (its
groups are the sections), the keys from the screens' bindings, the panes from ktop.registry,
the examples checked against the parser by tests/test_manpage.py. So it cannot drift.

`python -m ktop.manpage` prints it (roff); `make setup` installs it as
/usr/local/share/man/man1/ktop.1, so `man ktop` works.
"""

from __future__ import annotations

import argparse
import sys
import time

from ktop import __version__
from ktop.cli import OPTION_GROUPS, build_parser
from ktop.config import default_panes
from ktop.record.dump import csv_columns
from ktop.registry import PANES

# (command, what it does): each is parsed by the CLI in the tests, so none names an option
# that does not exist.
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("sudo ktop", "The live screen."),
    ("sudo ktop -F 999 -d 2", "Sample at 999 Hz, refresh every 2 seconds."),
    ("sudo ktop --pid 1234", "Every pane filtered to one process."),
    ("sudo ktop --cgroup /system.slice/docker.service",
     "Every pane filtered to a cgroup v2 subtree (or the name the CGROUP column shows)."),
    ("sudo ktop --panes functions,waits,processes",
     "Only these panes, in this order (their number keys 1, 2, 3); the others are not loaded."),
    ("sudo ktop --layout io", "A named choice of panes (default, cpu, io, all)."),
    ("sudo ktop --snapshot top.svg", "Headless: collect 3 seconds, write the screen."),
    ("sudo ktop --snapshot read.svg --drill functions:chacha_permute",
     "A picture of the callers of one hot function."),
    ("sudo ktop --snapshot cpu.folded --duration 10", "Folded CPU stacks, for flamegraph.pl."),
    ("sudo ktop --snapshot offcpu.folded --folded-of offcpu",
     "Folded blocked stacks (off-CPU time, microseconds)."),
    ("sudo ktop --snapshot locks.pb.gz --pprof-of locks",
     "A pprof profile of lock waits, for go tool pprof."),
    ("sudo ktop --serve 0.0.0.0:9464 --top 10", "Serve Prometheus metrics at /metrics."),
    ("sudo ktop --record day.krec --max-size 500",
     "Record one record a second, in a ring of 500 MB."),
    ("ktop --replay day.krec --at 03:12:00", "Travel through a recording, no root needed."),
    ("ktop --replay day.krec --baseline 03:05:00 --snapshot diff.svg",
     "Compare the window at the end with the one ending at 03:05."),
    ("ktop --replay day.krec --dump csv", "Every record as a CSV row, for scripts."),
)

FILES: tuple[tuple[str, str], ...] = (
    ("/usr/lib/debug/boot/vmlinux-$(uname -r)",
     "The running kernel's debug ELF, read for file:line in stacks when present (--vmlinux)."),
    ("/var/cache/ktop",
     "Debian's two halves of a kernel headers package merged into one tree of links, "
     "root's alone, for bcc to compile against."),
    ("$XDG_CONFIG_HOME/ktop/ktop.conf",
     "The panes shown, as key p chose them (default ~/.config/ktop/ktop.conf; one line, "
     "panes = NAME,...), read at the next start unless --panes or --layout choose; a file "
     "ktop cannot use is said in one line and the default panes shown. Headless runs read "
     "none."),
    ("ktop-YYYYmmdd-HHMMSS.krec",
     "A recording started with the R key, beside where s saves its pictures."),
    ("$TMPDIR/ktop-crash-*.txt",
     "The traceback of an unexpected error, mode 0600; the terminal gets one line."),
)

SEE_ALSO = ("perf-top(1)", "perf-lock(1)", "perf-sched(1)", "htop(1)", "top(1)",
            "iostat(1)", "biotop(8)", "offcputime(8)")

DOCS = ("README.md", "docs/numbers.md", "docs/exports.md", "docs/recording.md",
        "docs/compare.md", "docs/security.md", "docs/design.md", "bench/RESULTS.md")


def roff(text: str) -> str:
    """Text as roff reads it literally: backslashes doubled, hyphens as minus signs (options
    stay copyable), no line starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line
                     for line in text.split("\n"))


def option_label(action: argparse.Action) -> str:
    """`-F, --frequency HZ` in roff: options bold, the value italic."""
    names = ", ".join(f"\\fB{roff(s)}\\fR" for s in action.option_strings)
    if action.nargs == 0:
        return names
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "|".join(str(c) for c in action.choices)
    else:
        value = action.dest.upper()
    return f"{names} \\fI{roff(value)}\\fR"


def _keys() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(the panes' screen's keys, the drill-downs' keys), as the help overlays list them."""
    from textual.binding import Binding  # noqa: PLC0415

    from ktop.ui.screens.drill import COMMON_BINDINGS  # noqa: PLC0415
    from ktop.ui.screens.function import FunctionScreen  # noqa: PLC0415
    from ktop.ui.screens.help import bindings_help  # noqa: PLC0415
    from ktop.ui.screens.main import MainScreen, main_keys  # noqa: PLC0415

    main = main_keys([b for b in MainScreen.BINDINGS if isinstance(b, Binding)], False)
    drill = bindings_help([b for b in FunctionScreen.BINDINGS if isinstance(b, Binding)]
                          + [b for b in COMMON_BINDINGS if b not in FunctionScreen.BINDINGS])
    return main, [*drill, ("Up Down PgUp PgDn", "scroll")]


def _tagged(rows: list[tuple[str, str]]) -> list[str]:
    lines = []
    for keys, what in rows:
        lines += [".TP", f"\\fB{roff(keys)}\\fR", roff(what)]
    return lines


def manpage(date: str | None = None) -> str:
    parser = build_parser()
    date = date or time.strftime("%Y-%m-%d")
    out = [
        f'.TH KTOP 1 "{date}" "ktop {roff(__version__)}" "User Commands"',
        ".nh",  # no hyphenation: paths and options stay whole
        ".SH NAME",
        "ktop \\- live view of what the Linux kernel is doing, like perf top",
        ".SH SYNOPSIS",
    ]
    for form in ("", "\\-\\-snapshot \\fIFILE\\fR ", "\\-\\-record \\fIFILE\\fR ",
                 "\\-\\-replay \\fIFILE\\fR ", "\\-\\-serve \\fI[ADDR:]PORT\\fR "):
        out += [f".B ktop\n{form}[\\fIOPTION\\fR]...", ".br"]
    out.pop()
    out += [".SH DESCRIPTION", roff(parser.description or ""), ".PP",
            roff("Its panes, in the registry's order (--layout all). The screen shows those "
                 f"chosen (--panes, --layout, key p; default: {','.join(default_panes())}), "
                 "numbered 1, 2... in the order chosen; a pane not shown is not loaded:")]
    for spec in PANES:
        out += [".TP", f"\\fB{spec.number}\\fR  {roff(spec.title)}",
                roff(f"Enter on a row, or --drill {spec.name}:{spec.drill_by.upper()} with "
                     "--snapshot: the stacks behind it")]
    out += [".PP", roff(
        "Enter on a row drills down into the call stacks behind it. Without root, kernel "
        "headers or a tracepoint, ktop still starts: the processes pane works and each BPF "
        "pane says in one line why it is unavailable and how to fix it.")]

    out.append(".SH OPTIONS")
    groups = {group.title: group for group in parser._action_groups}  # noqa: SLF001
    for title in ["options", *(title for title, _ in OPTION_GROUPS)]:
        group = groups[title]
        out.append(f".SS {roff(title.capitalize() if title != 'options' else 'General')}")
        if group.description:
            out.append(roff(group.description[0].upper() + group.description[1:] + "."))
        for action in group._group_actions:  # noqa: SLF001
            out += [".TP", option_label(action), roff(action.help or "")]
            if action.dest == "dump":  # its columns, as each pane declares them
                out += [".IP", roff("csv columns, one row an interval: "
                                    + ", ".join(csv_columns()) + ".")]

    main, drill = _keys()
    out += [".SH KEYS", ".SS The panes"] + _tagged(main)
    out += [".SS Drill-downs (Enter on a row)"] + _tagged(drill)

    out.append(".SH FILES")
    out += _tagged(list(FILES))
    out.append(".SH EXAMPLES")
    for command, what in EXAMPLES:
        out += [".TP", f"\\fB{roff(command)}\\fR", roff(what)]
    out += [".SH SEE ALSO", ", ".join(f"\\fB{roff(name.split('(')[0])}\\fR({name.split('(')[1]}"
                                      for name in SEE_ALSO) + ".",
            ".PP", roff("The reference, in ktop's source: " + ", ".join(DOCS) + ".")]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    del argv
    sys.stdout.write(manpage())
    return 0


if __name__ == "__main__":
    sys.exit(main())
