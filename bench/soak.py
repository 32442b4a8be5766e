"""Soak: ktop's screen with all five panes under heavy mixed load for N minutes (default 10),
its memory (RSS) and losses every 30 s. Run as root: `make bench-soak` or
`.venv/bin/python bench/soak.py --minutes 10 [--tracemalloc]`.

The load: two dd (one reading /dev/urandom, kernel-bound; one writing a file with O_DIRECT,
for block I/O), four loops creating and unlinking files, 100 short processes a second
(bench/churn.py). ktop runs as users run it, in a terminal (a private tmux server, 160x50),
each pane focused in turn (keys 1-5, one a second) so all five are drawn; its RSS is read
from /proc, its losses from the header's "lost N" line.

--headless runs the app in a child process instead, driven by Textual's test pilot, for what
a terminal cannot give: --objects (the object types whose counts grow, every 30 s) and
--tracemalloc (where Python's allocations grew between the first minute and the end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from churn import churning  # noqa: E402

SPAWNS_PER_S = 100
EVERY_S = 30.0
GOAL_MIB = 100.0


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def resident(pid: int) -> str:
    """The RSS split as /proc/PID/smaps_rollup gives it: anonymous (the heap, Python's arenas)
    against file-backed (the interpreter and libraries)."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    return (f"anonymous {fields.get('Anonymous', 0) / 1024:.1f} MiB, file "
            f"{(fields.get('Rss', 0) - fields.get('Anonymous', 0)) / 1024:.1f} MiB")


def heap() -> str:
    """glibc's heap as mallinfo2() sees it: in use (Python's objects over 512 bytes, the
    big tables' hash arrays, buffers) against free but kept (fragmentation)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return ""
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return (f"glibc: in use {(info.uordblks + info.hblkhd) / 2**20:.1f} MiB (mmapped "
            f"{info.hblkhd / 2**20:.1f}), free in its arenas {info.fordblks / 2**20:.1f} MiB")


def allocated_mib() -> float:
    """pymalloc's bytes in allocated blocks, MiB."""
    match = re.search(r"bytes in allocated blocks ([\d.]+)", arenas())
    return float(match.group(1)) if match else 0.0


def arenas() -> str:
    """pymalloc's arenas in use (256 KiB each) and how full their pools are."""
    import sys as system

    if not hasattr(system, "_debugmallocstats"):
        return ""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        system._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    found = {}
    for name in ("arenas allocated current", "# bytes in allocated blocks",
                 "# bytes in available blocks", "# bytes lost to pool headers",
                 "# bytes lost to quantization", "# bytes lost to arena alignment"):
        match = re.search(re.escape(name) + r"\s*=\s*([\d,]+)", text)
        if match:
            found[name.lstrip("# ")] = int(match.group(1).replace(",", ""))
    return ", ".join(f"{name} {value / 2**20 if 'bytes' in name else value:.1f}"
                     for name, value in found.items())


# What another ktop (or any bcc tool) starting beside does: clang and LLVM compiling a BPF
# program, in a fresh process each time. ktop's CPU pane samples them, and names their frames
# from libclang-cpp's and libLLVM's symbol tables (the largest a machine like this maps).
_COMPILE = """import sys, time
from bcc import BPF
while True:
    BPF(text=sys.argv[1])
"""
_COMPILED = """#include <linux/sched.h>
BPF_HASH(counts, u32, u64);
int count(void *ctx) {
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    u32 key = task->tgid;
    counts.increment(key);
    return 0;
}
"""


@contextlib.contextmanager
def compiling(from_minute: float | None) -> Iterator[None]:
    """From `from_minute` on (None: never), a loop that starts a process compiling a BPF
    program with bcc, one after the other."""
    if from_minute is None:
        yield
        return
    from ktop.collectors import bpfload

    source = bpfload.kernel_headers().source
    command = (f"sleep {from_minute * 60:.0f}; while :; do /usr/bin/python3 -c "
               f"{shlex.quote(_COMPILE.replace('while True:', 'for _ in range(3):'))} "
               f"{shlex.quote(_COMPILED)}; done")
    loop = subprocess.Popen(["sh", "-c", command], stdin=subprocess.DEVNULL,
                            start_new_session=True,
                            env={**os.environ, **({"BCC_KERNEL_SOURCE": source} if source else {})})
    try:
        yield
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()


@contextlib.contextmanager
def writing_dd() -> Iterator[None]:
    """A dd writing 64 MiB with O_DIRECT again and again: block I/O the whole time."""
    with tempfile.TemporaryDirectory(prefix="ktop-soak-", dir="/var/tmp") as directory:
        target = os.path.join(directory, "dd.out")
        loop = subprocess.Popen(
            ["sh", "-c", f"while :; do dd if=/dev/zero of={target} bs=1M count=64 "
             "oflag=direct status=none; done"], stdin=subprocess.DEVNULL,
            start_new_session=True)
        try:
            yield
        finally:
            os.killpg(loop.pid, signal.SIGKILL)  # the loop and its dd
            loop.wait()


# ---- the child: ktop's app, headless --------------------------------------------------------


def child(minutes: float, trace: bool, count_objects: bool) -> None:
    if trace:  # started once every pane is loaded: what grows after, at a bearable cost
        import tracemalloc
    import gc

    from ktop import cli
    from ktop.engine import LiveSource
    from ktop.registry import PANES
    from ktop.ui.app import build_app
    from ktop.ui.widgets.header import losses

    cli.without_openssl().__enter__()  # as `ktop` runs (before asyncio is imported)
    import asyncio
    gc.set_threshold(*cli.GC_THRESHOLDS)
    cli.pin_mmap_threshold()
    loads: dict[str, int] = {}  # binaries whose symbol tables were read, how many times
    if count_objects:
        from ktop.symbolize import user as user_symbols

        reading = user_symbols.UserSymbolizer._with_debug_symbols

        def counted(self, probe, path):  # noqa: ANN001, ANN202
            loads[os.path.basename(path)] = loads.get(os.path.basename(path), 0) + 1
            return reading(self, probe, path)

        user_symbols.UserSymbolizer._with_debug_symbols = counted  # type: ignore[method-assign]
    args = cli.parse_args([])
    source = LiveSource(cli._options(args))
    source.start(wait=False, patient=True)
    app = build_app(source, interval_s=args.interval)
    began = time.monotonic()
    first_trace = None

    counted: dict[str, int] = {}

    def type_counts() -> dict[str, int]:
        """Objects by type, counted in a forked copy: gc.get_objects() here would hold a
        reference to a tuple that the engine's thread is still filling from a generator, and
        its resize then fails (SystemError from tupleobject.c; it stopped the waits pane)."""
        read, write = os.pipe()
        child = os.fork()
        if not child:
            os.close(read)
            counts: dict[str, int] = {}
            for thing in gc.get_objects():
                name = type(thing).__qualname__
                counts[name] = counts.get(name, 0) + 1
            with os.fdopen(write, "w") as sent:
                json.dump(counts, sent)
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as received:
            counts = json.load(received)
        os.waitpid(child, 0)
        return counts

    def objects(elapsed: float) -> None:
        """The object types whose counts grew most since the first minute."""
        counts = type_counts()
        if not counted:
            counted.update(counts)
            return
        grown = sorted(((n - counted.get(t, 0), t) for t, n in counts.items()), reverse=True)
        print("  grown since the first minute: " + ", ".join(
            f"{t} {d:+d}" for d, t in grown[:8]), flush=True)
        print("  largest tables: " + ", ".join(
            f"{name} {size}" for size, name in tables()[:10]), flush=True)

    def tables() -> list[tuple[int, str]]:
        """The containers ktop's collectors, aggregators and symbolizers hold, by length."""
        found: list[tuple[int, str]] = []
        seen: set[int] = set()

        def walk(thing: object, name: str, depth: int) -> None:
            if id(thing) in seen or depth > 3:
                return
            seen.add(id(thing))
            if isinstance(thing, (dict, list, set, frozenset, deque)):
                found.append((len(thing), name))
                return
            fields = getattr(thing, "__dict__", None)
            if fields is None and hasattr(thing, "__slots__"):
                fields = {k: getattr(thing, k) for k in thing.__slots__ if hasattr(thing, k)}
            for key, value in (fields or {}).items():
                if not isinstance(value, (int, float, str, bytes, bool, type(None))):
                    walk(value, f"{name}.{key}", depth + 1)

        for pane, (collector, aggregator) in dict(source._running).items():
            walk(collector, f"{pane}.collector", 0)
            walk(aggregator, f"{pane}.aggregator", 0)
        walk(source._user_symbols, "user_symbols", 0)
        walk(source._processes, "processes", 0)
        return sorted(found, reverse=True)

    def sizes() -> None:
        """What each part of ktop holds (MiB), each object counted once, in the first part
        that reaches it: the deep sizes of the collectors, aggregators and symbolizers, then
        of the snapshot shown and of the app's widgets. Walked in a forked copy: the walk's
        own set of a million ids would stay in ktop's arenas and inflate the next figures."""
        import types

        child = os.fork()
        if child:
            os.waitpid(child, 0)
            return
        # Garbage in reference cycles not yet collected (ktop raises the collector's threshold):
        # collected here, in the copy, to see what it holds.
        before = allocated_mib()
        gc.unfreeze()  # garbage can hide in what start-up froze too
        gc.set_debug(gc.DEBUG_SAVEALL)  # kept, to say what made the cycles
        unreachable = gc.collect()
        kinds: dict[str, int] = {}
        for thing in gc.garbage:
            name = type(thing).__qualname__
            kinds[name] = kinds.get(name, 0) + 1
        widgets: dict[str, int] = {}
        for thing in gc.garbage:
            if hasattr(type(thing), "_css_type_name"):  # Textual's nodes: which widgets
                widgets[type(thing).__qualname__] = widgets.get(type(thing).__qualname__, 0) + 1
        if widgets:
            print("  widgets in cycles' garbage: " + ", ".join(
                f"{name} {n}" for name, n in sorted(widgets.items(), key=lambda k: -k[1])[:10]))
        gc.garbage.clear()
        gc.set_debug(0)
        gc.collect()
        print(f"  cycles' garbage: {unreachable} objects, "
              f"{before - allocated_mib():.1f} MiB of pymalloc's blocks; most: " + ", ".join(
                  f"{name} {n}" for name, n in sorted(kinds.items(), key=lambda k: -k[1])[:10]),
              flush=True)

        seen: set[int] = set()
        stop = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                types.CodeType, types.MethodType, threading_types())

        def deep(root: object) -> int:
            total, pending = 0, [root]
            while pending:
                thing = pending.pop()
                if id(thing) in seen or isinstance(thing, stop):
                    continue
                seen.add(id(thing))
                total += sys.getsizeof(thing)
                pending.extend(gc.get_referents(thing))
            return total

        parts: list[tuple[str, object]] = [("kallsyms", source._kallsyms),
                                           ("user symbols", source._user_symbols),
                                           ("processes", source._processes)]
        user_module = sys.modules.get("ktop.symbolize.user")
        if user_module is not None:  # module-level caches of names, outside any part
            parts += [(f"user names cache {name}", getattr(user_module, name))
                      for name in ("_demangle",) if hasattr(user_module, name)]
        for pane, (collector, aggregator) in dict(source._running).items():
            parts += [(f"{pane} collector", collector), (f"{pane} aggregator", aggregator)]
        parts += [("snapshot shown", app.snapshot), ("app and widgets", app)]
        print("  held (MiB): " + ", ".join(
            f"{name} {deep(thing) / 2**20:.1f}" for name, thing in parts), flush=True)
        functions = dict(source._running).get("functions")
        if functions is not None:  # what the hot functions' totals since start hold
            from ktop.model import EXITED_PID

            keys = functions[1]._ids.keys
            kinds: dict[str, int] = {}
            for number in functions[1]._window.total.stacks:
                key = keys[number]
                kind = (("cut" if key.callers_dropped else "whole")
                        + (", exited" if key.pid == EXITED_PID else ", live"))
                kinds[kind] = kinds.get(kind, 0) + 1
            print(f"  functions' totals: {len(keys)} stack numbers; totals by kind: "
                  + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())), flush=True)
            ids = functions[1]._ids
            used = {id(f) for f in ids.functions.values()}
            cached = {id(f): f for f in ids._by_kernel.values()}
            seen.clear()
            print(f"  functions' sets of functions: {len(ids._by_kernel)} kernel stacks named, "
                  f"{len(cached)} distinct sets ({deep(list(cached.values())) / 2**20:.1f} MiB), "
                  f"{len(set(cached) - used)} of them no kept stack holds", flush=True)
        symbols = source._user_symbols
        if symbols is not None:  # the binaries whose symbol tables are loaded, largest first
            tables = sorted(((len(t), key[0], len(getattr(t, "_names", ())))
                             for key, t in symbols._by_stat.items()), reverse=True)
            print("  user symbol tables (functions, names decoded): " + ", ".join(
                f"{os.path.basename(path)} {n} {named}" for n, path, named in tables[:8]),
                flush=True)
        if symbols is not None:  # what the processes' maps and named stacks hold
            procs = list(symbols._procs.values())
            seen.clear()
            seen.update(id(m.table) for p in procs for m in p.maps)  # the tables: above
            split = {part: deep([getattr(p, part) for p in procs])
                     for part in ("maps", "stacks", "frames")}
            print(f"  user symbols' {len(procs)} processes: " + ", ".join(
                f"{part} {sum(len(getattr(p, part)) for p in procs)} "
                f"({size / 2**20:.1f} MiB)" for part, size in split.items()), flush=True)
        print("  symbol tables read (times): " + ", ".join(
            f"{name} {n}" for name, n in sorted(loads.items(), key=lambda kv: -kv[1])[:8]),
            flush=True)
        # Within each collector and aggregator: its largest attributes (walked afresh).
        for name, thing in parts[:-2]:
            if name == "processes" or name.startswith("user names cache"):
                continue
            seen.clear()
            fields = getattr(thing, "__dict__", None)
            if fields is None:  # a class with __slots__
                fields = {k: getattr(thing, k) for k in getattr(thing, "__slots__", ())
                          if hasattr(thing, k)}
            inner = sorted(((deep(value), key) for key, value in fields.items()), reverse=True)
            print(f"    {name}: " + ", ".join(f"{key} {size / 2**20:.1f}"
                                              for size, key in inner[:4]), flush=True)
        os._exit(0)

    def threading_types() -> type:
        import threading

        return type(threading.Lock())

    def line(elapsed: float) -> None:
        snapshot = app.snapshot
        lost = losses(snapshot) if snapshot else {}
        loading = ",".join(sorted(snapshot.loading)) if snapshot and snapshot.loading else ""
        window = snapshot.duration_s if snapshot else 0.0
        print(f"{elapsed:6.0f} s  RSS {rss_mib(os.getpid()):6.1f} MiB  lost in the last "
              f"{window:.0f}s: {sum(lost.values())} {dict(sorted(lost.items()))}"
              f"{'  loading ' + loading if loading else ''}", flush=True)
        for pane, reason in sorted((snapshot.unavailable if snapshot else {}).items()):
            print(f"  {pane} unavailable: {reason}", flush=True)
        if trace and tracemalloc.is_tracing():  # (pymalloc says nothing of itself then)
            traced, _peak = tracemalloc.get_traced_memory()
            print(f"  {resident(os.getpid())}; Python's traced allocations "
                  f"{traced / 2**20:.1f} MiB", flush=True)
        else:
            print(f"  {resident(os.getpid())}; pymalloc: {arenas()}; {heap()}", flush=True)

    async def run() -> None:
        nonlocal first_trace
        async with app.run_test(size=(160, 50)) as pilot:
            following = began + EVERY_S
            pane = 0
            while time.monotonic() < began + minutes * 60:
                await asyncio.sleep(1.0)
                # Each pane focused in turn, as keys 1-5 do (without the pilot's wait for
                # the screen, which a saturated machine can time out).
                pane = (pane + 1) % len(PANES)
                app.main_screen.action_focus_pane(PANES[pane].name)
                if trace and not tracemalloc.is_tracing() and source.wait_loaded(0):
                    print(f"{time.monotonic() - began:6.0f} s  every pane loaded: tracing "
                          "Python's allocations from now", flush=True)
                    tracemalloc.start(3)
                if time.monotonic() >= following:
                    line(time.monotonic() - began)
                    following += EVERY_S
                    if trace and first_trace is None and tracemalloc.is_tracing():
                        first_trace = tracemalloc.take_snapshot()
                    if count_objects and time.monotonic() - began >= 60:
                        objects(time.monotonic() - began)
                    if count_objects:
                        sizes()
            line(time.monotonic() - began)
            if trace:
                now = tracemalloc.take_snapshot().filter_traces(
                    [tracemalloc.Filter(False, tracemalloc.__file__)])
                print("tracemalloc: where Python's allocations are now, by file:line")
                for stat in now.statistics("lineno")[:30]:
                    frame = stat.traceback[0]
                    print(f"  {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks  "
                          f"{frame.filename}:{frame.lineno}")
                print("tracemalloc: the same by call path (innermost last)")
                for stat in now.statistics("traceback")[:20]:
                    print(f"  {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks")
                    for frame in stat.traceback.format():
                        print("     " + frame)
            if trace and first_trace is not None:
                last = tracemalloc.take_snapshot()
                print("tracemalloc: what grew since the first figure after loading, by file:line")
                for stat in last.compare_to(first_trace, "lineno")[:15]:
                    frame = stat.traceback[0]
                    print(f"  {stat.size_diff / 1024:+9.0f} KiB {stat.count_diff:+7d} blocks  "
                          f"{frame.filename}:{frame.lineno}")
            await pilot.exit(None)

    asyncio.run(run())


# ---- in a terminal -----------------------------------------------------------------------------


class Terminal:
    """A private tmux server (own socket, no config) running ktop at 160x50."""

    def __init__(self, command: str) -> None:
        self.socket = f"ktop-soak-{os.getpid()}"
        self.tmux("new-session", "-d", "-s", "soak", "-x", "160", "-y", "50", command)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, check=True).stdout

    def pid(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", "soak", "#{pane_pid}").strip())

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "soak")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def in_terminal(minutes: float) -> list[float]:
    """ktop in tmux for `minutes`: a line every 30 s; returns the RSS figures (MiB)."""
    terminal = Terminal(f"exec {shlex.quote(sys.executable)} -m ktop")
    samples: list[float] = []
    try:
        pid = terminal.pid()
        began = time.monotonic()
        following = began + EVERY_S
        pane = 0
        while time.monotonic() < began + minutes * 60:
            time.sleep(1.0)
            pane = pane % 5 + 1
            terminal.tmux("send-keys", "-t", "soak", str(pane))
            if time.monotonic() >= following:
                following += EVERY_S
                mib = rss_mib(pid)
                samples.append(mib)
                header = terminal.screen().splitlines()[:3]
                lost = next((re.search(r"lost (\d+|none)", h) for h in header
                             if re.search(r"lost (\d+|none)", h)), None)
                span = next((re.search(r" in (\d+(?:\.\d)?s)", h) for h in header
                             if re.search(r" in (\d+(?:\.\d)?s)", h)), None)
                print(f"{time.monotonic() - began:6.0f} s  RSS {mib:6.1f} MiB  lost "
                      f"{lost.group(1) if lost else '?'} in the last "
                      f"{span.group(1) if span else '?'}  load {os.getloadavg()[0]:.1f}  "
                      f"({resident(pid)})", flush=True)
        terminal.tmux("send-keys", "-t", "soak", "q")
    finally:
        terminal.close()
    return samples


# ---- the parent: the load, then ktop -------------------------------------------------------------


def headless(args: argparse.Namespace) -> list[float]:
    command = [sys.executable, os.path.abspath(__file__), "--child", "--minutes",
               str(args.minutes), *(["--tracemalloc"] if args.tracemalloc else []),
               *(["--objects"] if args.objects else [])]
    errors = tempfile.TemporaryFile(mode="w+")  # what bcc and clang print, and a crash
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, stderr=errors,
                               stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    samples = []
    try:
        for text in process.stdout:
            if " RSS " in text:
                samples.append(float(text.split(" RSS ")[1].split()[0]))
                text = text.rstrip("\n") + f"  load {os.getloadavg()[0]:.1f}\n"
            print(text, end="", flush=True)
    finally:
        if process.poll() is None and sys.exc_info()[0] is not None:  # stopped early
            process.kill()
        process.wait()
    if process.returncode:
        errors.seek(0)
        print("soak: ktop failed:\n" + "".join(errors.readlines()[-20:]), file=sys.stderr)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--headless", action="store_true",
                        help="the app driven by Textual's pilot in a child, not in a terminal")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="with --headless: where Python's allocations grew (slows ktop)")
    parser.add_argument("--objects", action="store_true",
                        help="with --headless: the object types whose counts grow")
    parser.add_argument("--compile-from", type=float, metavar="MINUTE",
                        help="from this minute on, a loop of processes compiling a BPF program "
                             "with bcc (clang and LLVM), as another ktop starting beside does")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.minutes, args.tracemalloc, args.objects)
        return 0
    if os.geteuid() != 0:
        print("soak: run as root (the BPF panes)", file=sys.stderr)
        return 2
    # Stopped by SIGTERM (timeout, kill) or SIGINT (even started in the background, where a
    # shell ignores it): the load, the terminal and ktop are cleaned up on the way out.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda signum, frame: signal.default_int_handler(signum, frame))
    print(f"soak: {args.minutes:g} min of ktop's five panes "
          f"{'headless' if args.headless else 'in a terminal'} under two dd, file churn and "
          f"{SPAWNS_PER_S} processes/s"
          f"{'' if args.compile_from is None else f', bcc compiling from minute {args.compile_from:g}'}"
          f"; RSS and losses every {EVERY_S:.0f} s", flush=True)
    try:
        with churning(SPAWNS_PER_S), writing_dd(), compiling(args.compile_from):
            samples = headless(args) if args.headless else in_terminal(args.minutes)
    except KeyboardInterrupt:
        print("soak: stopped; the load and ktop are gone", file=sys.stderr)
        return 130
    if not samples:
        print("soak: no figure came", file=sys.stderr)
        return 1
    peak = max(samples)
    print(f"soak: RSS first {samples[0]:.1f} MiB, peak {peak:.1f} MiB, end {samples[-1]:.1f} MiB "
          f"(goal <= {GOAL_MIB:.0f} MiB: {'met' if peak <= GOAL_MIB else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
