"""Shared fixtures: recorded data for the UI, a kallsyms fixture, the JSON contract, root checks.

tests/fixtures/recorded.json is a real `ktop --snapshot recorded.json --duration 3` taken on
the 2-CPU VM while `dd if=/dev/urandom of=/dev/null bs=1M` ran, then edited by hand: fixed
hostname, version and time; 39 user samples turned into idle-task samples (the busy
recording had none); hostile process names; a plausible lock and block I/O section so all
four panes render. tests/fixtures/kallsyms.txt is lines of this kernel's /proc/kallsyms
plus module lines as a Debian kernel shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# The header shows snapshot.taken_at in local time: pin the zone so SVG baselines match.
os.environ["TZ"] = "UTC"
time.tzset()

FIXTURES = Path(__file__).parent / "fixtures"
SCREEN_SIZE = (160, 50)
PANE_TITLES = ("Hot kernel functions", "Lock contention", "Block I/O", "Processes",
               "Waits (off-CPU)", "Endings (signals, exits)")

# Live tests load BPF programs; a few unit tests mount, chattr or chown in tmp_path.
NEEDS_ROOT = "needs root"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT)


@pytest.fixture
def shared_dir():
    """A directory an unprivileged user may write into (tmp_path's parents are root-only)."""
    directory = tempfile.mkdtemp(prefix="ktop-nobody-")
    os.chmod(directory, 0o777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def as_nobody(home: str) -> list[str]:
    """A command prefix that runs what follows as nobody, without any capability."""
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
            "env", f"HOME={home}"]


# ---- live tests on a shared machine ----------------------------------------------------

AUTOGROUP = "/proc/self/autogroup"


def bpf_programs_of(pid: int) -> set[int]:
    """Ids of the BPF programs a process holds open, read from its fds: a test's own ktop, told
    apart from any other BPF user on the machine (a diff of `bpftool prog show` is not)."""
    ids = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:  # the process is gone
        return ids
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                match = re.search(r"^prog_id:\s+(\d+)$", f.read(), re.M)
        except OSError:  # the fd closed while we read
            continue
        if match:
            ids.add(int(match.group(1)))
    return ids


def loaded_bpf_programs() -> dict[int, str]:
    """{id: name} of every BPF program loaded in the kernel, as `bpftool prog show` lists them."""
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: p.get("name", "") for p in json.loads(out)}


def wait_until_unloaded(ids: set[int], seconds: float = 5.0) -> set[int]:
    """Those of `ids` still loaded after up to `seconds`: the kernel frees a program
    asynchronously once its last reference is gone."""
    deadline = time.monotonic() + seconds
    while (left := ids & loaded_bpf_programs().keys()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class HeldPrograms:
    """The BPF programs one ktop holds, its compiler children's included, gathered by polling
    their fds while it runs; nothing another ktop on the machine loads is counted.

    A program lives while a descriptor (or an attachment made from one) is open, and only
    ktop's own processes open ktop's: once all of them are gone and none of the ids seen is
    loaded any more, nothing of this ktop is (one loaded and handed over between two polls
    is held by the same processes, so their exit frees it too)."""

    def __init__(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self.processes = {self._root}
        self.ids: set[int] = set()

    def poll(self) -> set[int]:
        try:
            self.processes.update(self._root.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        for process in self.processes:
            if process.is_running():  # same pid and start time: not a reused pid
                self.ids |= bpf_programs_of(process.pid)
        return self.ids

    def names(self) -> set[str]:
        self.poll()
        loaded = loaded_bpf_programs()
        return {loaded[i] for i in self.ids if i in loaded}

    def watch_until_exit(self, process: subprocess.Popen, seconds: float = 20.0) -> None:
        """Poll until `process` exits (children it starts while stopping are seen too)."""
        deadline = time.monotonic() + seconds
        while process.poll() is None and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.05)

    def left_behind(self, seconds: float = 5.0) -> tuple[list[int], set[int]]:
        """(pids of ktop's processes still running, ids of its programs still loaded) after
        up to `seconds`: both empty when it left nothing behind."""
        deadline = time.monotonic() + seconds
        while True:
            alive = [p for p in self.processes if p.is_running()]
            for process in alive:  # an orphaned compiler: what it holds counts
                self.ids |= bpf_programs_of(process.pid)
            left = self.ids & loaded_bpf_programs().keys()
            if not alive and not left or time.monotonic() >= deadline:
                return [p.pid for p in alive], left
            time.sleep(0.1)


@contextlib.contextmanager
def live_source(cumulative: bool = False, **options: Any) -> Iterator[Any]:
    """A LiveSource of these Options, started for the block (its panes loaded) and closed
    after, its programs detached: each live test's source."""
    from ktop.engine import LiveSource, Options

    source = LiveSource(Options(**options))
    source.cumulative = cumulative
    source.start()
    try:
        yield source
    finally:
        source.close()


@contextlib.contextmanager
def running(command: list[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """A workload for the block, killed and waited for after (its output dropped unless
    `popen` says where it goes)."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.DEVNULL)
    process = subprocess.Popen(command, **popen)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _autogroup_nice(path: str) -> str | None:
    """The nice value of this session's autogroup, or None when the task is in no autogroup of
    its own: a process that never called setsid (a CI runner started by init) is in the root
    task group, and the file reads empty."""
    try:
        with open(path) as f:
            match = re.fullmatch(r"/autogroup-\d+ nice (-?\d+)\n?", f.read())
    except OSError:  # no autogroup scheduling in this kernel
        return None
    return match.group(1) if match else None


@contextlib.contextmanager
def first_in_line(autogroup: str = AUTOGROUP):
    """This session (pytest and its children) ahead of the rest of the machine, for live tests
    whose assertions need a workload to own a CPU. With autogroup scheduling every session
    gets an equal share whatever its tasks' nice values, so the session's autogroup is
    raised to nice -20, and put back after; outside any autogroup nice alone decides."""
    before = _autogroup_nice(autogroup)
    if before is not None:
        try:
            with open(autogroup, "w") as f:
                f.write("-20")
        except OSError:
            before = None
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if before is None:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
    try:
        yield
    finally:
        if before is not None:
            with open(autogroup, "w") as f:
                f.write(before)
        else:
            os.setpriority(os.PRIO_PROCESS, 0, nice)


@pytest.fixture(scope="session")
def recorded_data() -> dict[str, Any]:
    with open(FIXTURES / "recorded.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture
def recorded_json(recorded_data: dict[str, Any]) -> dict[str, Any]:
    """A private copy of the recorded JSON, free to edit in the test."""
    return copy.deepcopy(recorded_data)


@pytest.fixture
def recorded_snapshot(recorded_data: dict[str, Any]):
    from ktop.exports.jsonfile import from_json

    return from_json(copy.deepcopy(recorded_data))


@pytest.fixture(scope="session")
def kallsyms_text() -> str:
    return (FIXTURES / "kallsyms.txt").read_text()


def fixture_address(text: str, name: str) -> int:
    """A symbol's address read straight from the fixture text (not through ktop's parser)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == name:
            return int(parts[0], 16)
    raise KeyError(name)


@pytest.fixture
def kallsyms(kallsyms_text: str):
    from ktop.symbolize.kernel import Kallsyms

    return Kallsyms.from_text(kallsyms_text)


@pytest.fixture
def addr(kallsyms_text: str) -> Callable[[str], int]:
    return lambda name: fixture_address(kallsyms_text, name)


def run_app(app, scenario: Callable[[Any], Awaitable[None]], size=SCREEN_SIZE, **kwargs) -> None:
    """Run `app` headless, wait until it shows its first snapshot, run the scenario, quit.

    The app is left by exit(), as a user's `q` does, not by tearing the screen down under a
    live collect loop (that race is tested on its own in test_ui.py)."""

    if kwargs.get("notifications"):
        # Toasts a test reads stay until read: at load 19 the 5 s of Textual's default
        # passed between a key and the test's look at the screen.
        app.NOTIFICATION_TIMEOUT = 120

    async def main() -> None:
        async with app.run_test(size=size, **kwargs) as pilot:
            await wait_for_data(pilot)
            await scenario(pilot)
            if app.is_running:
                await pilot.exit(None)

    asyncio.run(main())


async def drill_into(pilot, screen_type: type) -> Any:
    """Enter on the focused row, then the drill-down screen of `screen_type` once it is on
    top (it opens in a moment: up to 2 s)."""
    await pilot.press("enter")
    for _ in range(100):
        if isinstance(pilot.app.screen, screen_type):
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)
    return pilot.app.screen


async def wait_for_data(pilot) -> None:
    for _ in range(500):
        if pilot.app.snapshot is not None:
            break
        await pilot.pause(0.01)
    assert pilot.app.snapshot is not None, "the app never received a snapshot"
    await pilot.pause()


# ---- the JSON contract from issue 2 ------------------------------------------------------

FRAME = re.compile(r"^([A-Za-z_.$][\w.$]*\+0x[0-9a-f]+|0x[0-9a-f]+)$")


def _check_types(obj: dict[str, Any], spec: dict[str, type | tuple[type, ...]], where: str) -> None:
    for key, kind in spec.items():
        assert key in obj, f"{where}: missing {key!r}"
        value = obj[key]
        assert isinstance(value, kind) and not (
            isinstance(value, bool) and kind in (int, float, (int, float))
        ), f"{where}.{key} = {value!r} is not {kind}"


def check_contract(d: dict[str, Any]) -> None:
    """The keys and types the issue promises to tools that read `--snapshot X.json`."""
    number = (int, float)
    _check_types(
        d,
        {
            "ktop_version": str, "kernel": str, "hostname": str, "duration_s": number,
            "sample_hz": int, "cpus": int, "processes": list, "unavailable": dict,
        },
        "snapshot",
    )
    for pane, reason in d["unavailable"].items():
        assert isinstance(pane, str) and isinstance(reason, str) and "\n" not in reason
    cpu = d.get("cpu")
    if cpu is None:
        assert "functions" in d["unavailable"], "no cpu data and no reason given"
    else:
        _check_types(
            cpu,
            {
                "total_samples": int, "idle_samples": int, "kernel_samples": int,
                "user_samples": int, "lost": dict, "functions": list, "stacks": list,
            },
            "cpu",
        )
        for name, count in cpu["lost"].items():
            assert isinstance(name, str) and isinstance(count, int) and count >= 0
        for f in cpu["functions"]:
            _check_types(
                f, {"symbol": str, "module": str, "samples": int, "percent": number}, "function"
            )
        samples = [f["samples"] for f in cpu["functions"]]
        assert samples == sorted(samples, reverse=True), "functions not sorted by samples"
        for s in cpu["stacks"]:
            _check_types(
                s, {"pid": int, "comm": str, "samples": int, "frames": list}, "stack"
            )
            for frame in s["frames"]:
                assert isinstance(frame, str) and FRAME.match(frame), f"bad frame {frame!r}"
    for p in d["processes"]:
        _check_types(
            p,
            {
                "pid": int, "comm": str, "user": str, "state": str, "cpu_percent": number,
                "sys_percent": number, "threads": int, "rss_bytes": int,
            },
            "process",
        )


def _needs_the_machine(item: pytest.Item) -> bool:
    """A test that runs the real kernel's collectors, starts ktop as root or times a workload:
    run alone (`make test` runs the others two at a time first)."""
    # A pane's live tests are named after it, as its others are (test_<pane>_live.py).
    live_file = item.path.name.startswith("test_live_") or item.path.stem.endswith("_live")
    if item.get_closest_marker("live") or live_file:
        return True
    # Not a skip: root_only tests are told apart by their marker, to run them alone.
    return any(mark.kwargs.get("reason") == NEEDS_ROOT for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _needs_the_machine(item):
            item.add_marker(pytest.mark.machine)
