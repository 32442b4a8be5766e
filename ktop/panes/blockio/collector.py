"""Block I/O: bpf/blockio.bpf.c on the block layer's raw tracepoints, drained every interval.

Per-process counters, latency histograms and stack counts are kept in the kernel, so they
stay exact when the stream of individual requests (a ring buffer) drops events. The
program reads struct request and struct bio at offsets taken from the kernel's BTF.
"""

from __future__ import annotations

import ctypes as ct
import errno
import time
from dataclasses import dataclass
from typing import TypeVar

from ktop.cgroups import CgroupNames, shared_names
from ktop.collectors.bpfload import (
    Unavailable,
    check_privileges,
    ensure_tracefs,
    load_program,
    require_tracepoints,
    tracepoint_exists,
)
from ktop.collectors.bpfsys import RingBuffer
from ktop.collectors.btf import BTF_PATH, BtfError, KernelBtf
from ktop.collectors.disks import bio_based_devices, in_flight_counts
from ktop.collectors.maps import TwoGenerationProgram
from ktop.losses import kernel_names

PROGRAM = "blockio.bpf.c"
# Map names, as bpf/blockio.bpf.c declares them.
MAP_INFLIGHT = "inflight"
MAP_BIO_DEVICES = "bio_devices"
MAP_TOTALS = ("totals_0", "totals_1")
MAP_HIST = ("latency_hist_0", "latency_hist_1")
MAP_STACK_COUNTS = ("stack_counts_0", "stack_counts_1")
MAP_STACKS = ("stacks_0", "stacks_1")
MAP_COMPLETIONS = "completions"
LOST_NAMES = kernel_names("blockio")  # its `lost` array, as its C enum orders it
RW_NAMES = ("R", "W", "F")  # enum blk_rw: BLK_RW_READ, BLK_RW_WRITE, BLK_RW_FLUSH

REQUIRED_TRACEPOINTS = [
    "block:block_rq_insert",
    "block:block_rq_issue",
    "block:block_rq_complete",
    "block:block_rq_merge",
    "block:block_bio_queue",
    "block:block_bio_complete",
]
# -D macro -> (struct, member path): the fields bpf/blockio.bpf.c reads, and their sizes.
STRUCT_FIELDS = {
    "RQ_Q": ("request", "q", 8),
    "RQ_CMD_FLAGS": ("request", "cmd_flags", 4),
    "RQ_DATA_LEN": ("request", "__data_len", 4),
    "RQ_SECTOR": ("request", "__sector", 8),
    "Q_DISK": ("request_queue", "disk", 8),
    "DISK_MAJOR": ("gendisk", "major", 4),
    "DISK_FIRST_MINOR": ("gendisk", "first_minor", 4),
    "BIO_BDEV": ("bio", "bi_bdev", 8),
    "BIO_OPF": ("bio", "bi_opf", 4),
    "BIO_SECTOR": ("bio", "bi_iter.bi_sector", 8),
    "BIO_SIZE": ("bio", "bi_iter.bi_size", 4),
    "BDEV_DEV": ("block_device", "bd_dev", 4),
}
# -D macro -> (raw tracepoint, struct its argument points to).
TRACEPOINT_ARGS = {
    "RQ_INSERT_ARG": ("block_rq_insert", "request"),
    "RQ_ISSUE_ARG": ("block_rq_issue", "request"),
    "RQ_COMPLETE_ARG": ("block_rq_complete", "request"),
    "RQ_MERGE_ARG": ("block_rq_merge", "request"),
    "BIO_QUEUE_ARG": ("block_bio_queue", "bio"),
    "BIO_COMPLETE_ARG": ("block_bio_complete", "bio"),
}
STALE_AFTER_S = 60.0  # older than any block layer timeout with retries: never completing
SWEEP_EVERY_S = 5.0
# On a busy disk, a request is held against the kernel's in-flight count once this old: past
# mq-deadline's write_expire (5 s), the longest a request waits in the scheduler, which the
# kernel's count (issued requests) leaves out.
BUSY_SETTLED_S = 15.0
BIO_DEVICES_EVERY_S = 10.0  # zram/dm devices come and go

K = TypeVar("K")  # an in-flight map key


def struct_offset_flags(btf: KernelBtf) -> list[str]:
    """-D flags with what bpf/blockio.bpf.c needs to read requests and bios on this kernel."""
    flags = []
    for macro, (struct_name, path, size) in STRUCT_FIELDS.items():
        offset, actual = btf.member(struct_name, path)
        if actual != size:
            raise BtfError(f"{struct_name}.{path} is {actual} bytes, not {size}")
        flags.append(f"-D{macro}={offset}")
    # A flush is an empty write with this flag (its bit has moved between kernels).
    flags.append(f"-DREQ_PREFLUSH={1 << btf.enumerator('__REQ_PREFLUSH')}u")
    # Which argument is the request (bio): before 5.11 most of these took the queue first.
    for macro, (tracepoint, struct_name) in TRACEPOINT_ARGS.items():
        flags.append(f"-D{macro}={btf.tracepoint_arg(tracepoint, struct_name)}")
    return flags


class BlkEvent(ct.Structure):
    """struct blk_event in bpf/ktop.h."""

    _fields_ = [
        ("ts_ns", ct.c_uint64),
        ("sector", ct.c_uint64),
        ("latency_ns", ct.c_uint64),
        ("queue_ns", ct.c_uint64),
        ("pid", ct.c_uint32),
        ("dev", ct.c_uint32),
        ("bytes", ct.c_uint32),
        ("rw", ct.c_uint32),
        ("cgroup", ct.c_uint64),
        ("comm", ct.c_char * 16),
    ]


assert ct.sizeof(BlkEvent) == 72, "keep BlkEvent in step with struct blk_event"


@dataclass(frozen=True, slots=True)
class IoTotal:
    """Requests completed in the interval by one (process, disk, direction)."""

    pid: int
    comm: str
    dev: int  # kernel dev_t: major << 20 | minor
    rw: str  # "R", "W" or "F"
    requests: int
    bytes: int
    latency_ns: int  # summed: issue (or submission, if never issued) to completion
    queue_ns: int  # summed: insert to issue
    cgroup: str = ""  # the submitter's cgroup v2 path


@dataclass(frozen=True, slots=True)
class LatencyBucket:
    """Completions of one (process, disk, direction) whose latency fell in log2 slot `slot`."""

    pid: int
    comm: str
    dev: int
    rw: str
    slot: int  # slot k holds latencies in [2^(k-1), 2^k) us; slot 1 holds [0, 2) us
    count: int
    cgroup: str = ""


@dataclass(frozen=True, slots=True)
class IoStack:
    """Requests submitted in the interval from one code path."""

    pid: int
    comm: str
    dev: int
    rw: str
    requests: int
    kernel: tuple[int, ...]  # innermost first
    user: tuple[int, ...]
    cgroup: str = ""


@dataclass(frozen=True, slots=True)
class CompletedRequest:
    time: float  # time.monotonic() of completion
    pid: int
    comm: str
    dev: int
    rw: str
    sector: int
    bytes: int
    latency_ns: int
    queue_ns: int
    cgroup: str = ""


@dataclass(frozen=True, slots=True)
class BlockDrain:
    origin: float  # time.monotonic() when the collector started
    start: float  # time.monotonic() of the interval's start
    end: float
    totals: tuple[IoTotal, ...]
    histogram: tuple[LatencyBucket, ...]
    stacks: tuple[IoStack, ...]
    requests: tuple[CompletedRequest, ...]  # as streamed; oldest first
    lost: dict[str, int]  # cumulative since start, by reason


def _comm(raw: bytes) -> str:
    return raw.decode(errors="replace")


def _rw(code: int) -> str:
    return RW_NAMES[code] if 0 <= code < len(RW_NAMES) else "?"


class BlockCollector:
    pane = "blockio"

    def __init__(
        self,
        interval_s: float = 1.0,
        user_stacks: bool = False,
        sys_root: str = "/sys",
        cgroups: CgroupNames | None = None,
    ) -> None:
        """user_stacks: also walk the submitter's user stack (costs a little per request)."""
        self._interval_s = interval_s
        self._user_stacks = user_stacks
        self._sys_root = sys_root
        self._program: TwoGenerationProgram | None = None
        self._ended: tuple[int, float] | None = None  # by end_interval(): (generation, end)
        self._completions: RingBuffer | None = None
        self._origin = 0.0
        self._last = 0.0
        self._stale = 0
        self._last_sweep = 0.0
        self._last_bio_refresh = 0.0
        self._pending: list[CompletedRequest] = []
        self._cgroups = cgroups or shared_names()

    def start(self) -> None:
        """Compile, load and attach; Unavailable says why not and what would fix it."""
        check_privileges()  # first: without root, tracefs and BTF checks would mislead
        ensure_tracefs()
        require_tracepoints(REQUIRED_TRACEPOINTS, "Linux 5.0 and later have them")
        try:
            cflags = struct_offset_flags(KernelBtf.load(BTF_PATH))
        except OSError:
            raise Unavailable(
                f"kernel has no BTF ({BTF_PATH}): block I/O needs CONFIG_DEBUG_INFO_BTF=y"
            ) from None
        except BtfError as e:
            raise Unavailable(f"cannot read block requests on this kernel: {e}") from None
        # block_io_start (6.5+) fires where each request is made, in the submitting task;
        # without it, block_rq_insert stands in.
        if tracepoint_exists("block", "block_io_start"):
            cflags.append("-DHAVE_IO_START")
        if self._user_stacks:
            cflags.append("-DUSER_STACKS")
        ringbuf_pages = 256 if self._interval_s <= 1.0 else 1024
        cflags.append(f"-DRINGBUF_PAGES={ringbuf_pages}")
        # bcc attaches every RAW_TRACEPOINT_PROBE itself as it loads the program.
        self._program = TwoGenerationProgram(load_program(PROGRAM, cflags), LOST_NAMES)
        try:
            self._completions = RingBuffer(self._program.table(MAP_COMPLETIONS))
            self.refresh_bio_devices()
        except (OSError, ValueError) as e:
            self.close()
            raise Unavailable(f"cannot open the block I/O ring buffer: {e}") from None
        self._origin = self._last = self._last_sweep = time.monotonic()


    def _on_completion(self, record: memoryview) -> None:
        event = BlkEvent.from_buffer_copy(record)
        self._pending.append(
            CompletedRequest(
                time=event.ts_ns / 1e9,
                pid=event.pid,
                comm=_comm(event.comm),
                dev=event.dev,
                rw=_rw(event.rw),
                sector=event.sector,
                bytes=event.bytes,
                latency_ns=event.latency_ns,
                queue_ns=event.queue_ns,
                cgroup=self._cgroups.name(event.cgroup),
            )
        )

    def end_interval(self) -> None:
        """End the interval now; the next drain() reads it (the engine ends every pane's
        before it reads any, so they cover the same span)."""
        assert self._program is not None, "start() first"
        self._ended = self._program.swap()

    def drain(self) -> BlockDrain:
        """Swap map generations, then read and empty the one the program just left."""
        assert self._program is not None, "start() first"
        old, end = self._ended or self._program.swap()
        self._ended = None
        cgroup_name = self._cgroups.name

        totals = tuple(
            IoTotal(
                pid=key.pid,
                comm=_comm(key.comm),
                dev=key.dev,
                rw=_rw(key.rw),
                requests=value.requests,
                bytes=value.bytes,
                latency_ns=value.latency_ns,
                queue_ns=value.queue_ns,
                cgroup=cgroup_name(key.cgroup),
            )
            for key, value in self._program.table(MAP_TOTALS[old]).drain()
        )
        histogram = tuple(
            LatencyBucket(
                pid=key.pid,
                comm=_comm(key.comm),
                dev=key.dev,
                rw=_rw(key.rw),
                slot=key.slot,
                count=count,
                cgroup=cgroup_name(key.cgroup),
            )
            for key, count in self._program.table(MAP_HIST[old]).drain()
        )
        stacks_map = self._program.table(MAP_STACKS[old])

        def walk(stack_id: int, kernel: bool = False) -> tuple[int, ...]:
            return self._program.stacks.read(stacks_map, stack_id, kernel)

        stacks = tuple(
            IoStack(
                pid=key.pid,
                comm=_comm(key.comm),
                dev=key.dev,
                rw=_rw(key.rw),
                requests=requests,
                kernel=walk(key.kstack, kernel=True),
                user=walk(key.ustack) if key.ustack != -errno.EFAULT else (),
                cgroup=cgroup_name(key.cgroup),
            )
            for key, requests in self._program.table(MAP_STACK_COUNTS[old]).drain()
        )
        self._program.stacks.tidy(stacks_map)

        self._completions.consume(self._on_completion)
        requests, self._pending = tuple(self._pending), []

        now = time.monotonic()
        if now - self._last_sweep >= SWEEP_EVERY_S:
            self._sweep_stale(now)
        if now - self._last_bio_refresh >= BIO_DEVICES_EVERY_S:
            self.refresh_bio_devices()
        drain = BlockDrain(
            self._origin, self._last, end, totals, histogram, stacks, requests, self.lost()
        )
        self._last = end
        return drain

    def _sweep_stale(self, now: float) -> None:
        """Delete in-flight entries that will never complete (their completion went unseen):
        older than STALE_AFTER_S, or more of them older than a while on a disk than the
        kernel says that disk has in flight (a dd's missed completions counted within
        seconds, not a minute later, even while another process keeps the disk busy)."""
        self._last_sweep = now
        inflight = self._program.table(MAP_INFLIGHT)
        entries = inflight.snapshot()  # before the disks are asked: these started before
        in_flight = in_flight_counts({req.dev for _, req in entries}, self._sys_root)
        for key, start_ns in proven_stale(
                [(key, req.start_ns, req.dev) for key, req in entries], in_flight, now):
            try:
                if inflight[key].start_ns != start_ns:
                    continue  # completed meanwhile, and its address holds a new request
                del inflight[key]
                self._stale += 1
            except KeyError:  # completed meanwhile
                pass

    def refresh_bio_devices(self) -> None:
        """Tell the program which devices are bio-based; drain() repeats it now and then."""
        self._last_bio_refresh = time.monotonic()
        table = self._program.table(MAP_BIO_DEVICES)
        wanted = bio_based_devices(self._sys_root)
        present = {key.value for key in table.keys()}
        for dev in wanted - present:
            table[table.Key(dev)] = table.Leaf(1)
        for dev in present - wanted:
            try:
                del table[table.Key(dev)]
            except KeyError:
                pass

    def in_flight(self) -> int:
        """Requests tracked as in flight now (ones whose completion went unseen included)."""
        assert self._program is not None
        return sum(1 for _ in self._program.table(MAP_INFLIGHT).keys())

    def bio_devices(self) -> set[int]:
        """dev_t of the devices timed as bios (for tests and the report)."""
        assert self._program is not None
        return {key.value for key in self._program.table(MAP_BIO_DEVICES).keys()}

    def lost(self) -> dict[str, int]:
        assert self._program is not None
        totals = self._program.lost()
        totals["stale_inflight"] = self._stale
        return totals

    def close(self) -> None:
        if self._completions is not None:
            self._completions.close()
            self._completions = None
        if self._program is not None:
            self._program.close()
            self._program = None


def proven_stale(entries: list[tuple[K, int, int]], in_flight: dict[int, int],
                 now: float) -> list[tuple[K, int]]:
    """(key, start_ns) of the in-flight entries whose completion went unseen, from (key,
    start_ns, dev) read before in_flight (the kernel's count per disk, now: every request
    still in flight that began before the read is among the entries). Past STALE_AFTER_S,
    any; on a disk with nothing in flight, any older than a sweep; on a busy one, the
    oldest of those older than BUSY_SETTLED_S beyond the count in flight there (a disk
    the kernel cannot tell of: none)."""
    old_ns = int((now - STALE_AFTER_S) * 1e9)
    stale = [(key, start) for key, start, _ in entries if start < old_ns]
    settled: dict[int, list[tuple[int, K]]] = {}
    for key, start, dev in entries:
        count = in_flight.get(dev)
        if start < old_ns or count is None:
            continue
        before_ns = int((now - (SWEEP_EVERY_S if count == 0 else BUSY_SETTLED_S)) * 1e9)
        if start < before_ns:
            settled.setdefault(dev, []).append((start, key))
    for dev, held in settled.items():
        held.sort(key=lambda entry: entry[0])
        stale.extend((key, start) for start, key in held[:max(0, len(held) - in_flight[dev])])
    return stale
