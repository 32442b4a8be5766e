"""The Block I/O pane's figures, built from drained rows without a kernel."""

from __future__ import annotations

import json
import os
import struct

import pytest

from ktop.collectors.btf import BTF_PATH, BtfError, KernelBtf
from ktop.collectors.disks import kernel_dev
from ktop.model import Bucket, IoSubmitStack
from ktop.panes.blockio.aggregate import BlockAggregator, bucket_bounds, histogram
from ktop.panes.blockio.collector import (
    STRUCT_FIELDS,
    TRACEPOINT_ARGS,
    BlockDrain,
    CompletedRequest,
    IoStack,
    IoTotal,
    LatencyBucket,
    struct_offset_flags,
)
from ktop.symbolize.kernel import Kallsyms

VDA = kernel_dev(254, 0)
NVME = kernel_dev(259, 0)
NAMES = {VDA: "vda", NVME: "nvme0n1"}
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "blockio_drains.json")
MS = 1_000_000


def drain(
    start: float,
    end: float,
    totals=(),
    histogram=(),
    stacks=(),
    requests=(),
    lost=None,
    origin: float = 100.0,
) -> BlockDrain:
    return BlockDrain(
        origin=origin,
        start=start,
        end=end,
        totals=tuple(totals),
        histogram=tuple(histogram),
        stacks=tuple(stacks),
        requests=tuple(requests),
        lost=dict(lost or {}),
    )


def kernel_slot(latency_us: int) -> int:
    """What bpf/blockio.bpf.c files a latency under: bpf_log2l(us | 1), capped at 40."""
    return min((latency_us | 1).bit_length(), 40)


def test_no_io_is_an_empty_profile():
    aggregator = BlockAggregator(disk_names=NAMES)
    assert aggregator.profile().disks == ()
    aggregator.add(drain(100.0, 101.0, lost={"unpaired_complete": 0}))
    profile = aggregator.profile()
    assert (profile.disks, profile.processes, profile.requests) == ((), (), ())
    assert profile.window_s == pytest.approx(1.0)
    assert profile.lost == {"unpaired_complete": 0}


def test_disk_and_process_figures_from_kernel_counters():
    aggregator = BlockAggregator(disk_names=NAMES)
    aggregator.add(
        drain(
            100.0,
            101.0,
            totals=[
                # 200 direct 64 KiB writes by dd: 0.2 ms each on the device, 0.01 ms queued
                IoTotal(4242, "dd", VDA, "W", 200, 200 * 65536, 200 * MS // 5, 200 * MS // 100),
                IoTotal(12, "kworker/u8:0", VDA, "W", 10, 10 * 4096, 10 * 2 * MS, 0),
                IoTotal(77, "cat", VDA, "R", 30, 30 * 131072, 30 * MS, 30 * MS // 2),
                IoTotal(77, "cat", NVME, "R", 1, 4096, MS // 10, 0),
            ],
        )
    )
    profile = aggregator.profile()

    assert [d.disk for d in profile.disks] == ["nvme0n1", "vda"]
    vda = profile.disks[1]
    assert (vda.major, vda.minor) == (254, 0)
    assert (vda.reads, vda.writes) == (30, 210)
    assert vda.read_bytes == 30 * 131072
    assert vda.write_bytes == 200 * 65536 + 10 * 4096
    assert vda.avg_lat_ms == pytest.approx((40 + 20 + 30) / 240)

    # Sorted by bytes, biggest first, one row per (process, disk, direction).
    assert [(p.comm, p.disk, p.rw) for p in profile.processes] == [
        ("dd", "vda", "W"),
        ("cat", "vda", "R"),
        ("kworker/u8:0", "vda", "W"),
        ("cat", "nvme0n1", "R"),
    ]
    dd = profile.processes[0]
    assert (dd.pid, dd.requests, dd.bytes) == (4242, 200, 200 * 65536)
    assert dd.avg_lat_ms == pytest.approx(0.2)
    assert dd.avg_queue_ms == pytest.approx(0.01)


def test_drains_add_up_and_the_window_slides():
    aggregator = BlockAggregator(window_s=5.0, disk_names=NAMES)
    for second in range(10):
        start = 100.0 + second
        aggregator.add(
            drain(start, start + 1.0, totals=[IoTotal(1, "dd", VDA, "W", 10, 40960, 10 * MS, 0)])
        )
    window = aggregator.profile()
    assert window.window_s == pytest.approx(5.0)
    assert window.disks[0].writes == 50  # the last five seconds only
    assert window.processes[0].requests == 50

    everything = aggregator.profile(cumulative=True)
    assert everything.window_s == pytest.approx(10.0)
    assert everything.disks[0].writes == 100
    assert everything.disks[0].write_bytes == 409600
    assert everything.processes[0].avg_lat_ms == pytest.approx(1.0)


def test_a_quiet_second_leaves_only_what_is_still_in_the_window():
    aggregator = BlockAggregator(window_s=2.0, disk_names=NAMES)
    aggregator.add(drain(100.0, 101.0, totals=[IoTotal(1, "dd", VDA, "R", 3, 12288, 3 * MS, 0)]))
    for second in range(1, 4):
        aggregator.add(drain(100.0 + second, 101.0 + second))
    profile = aggregator.profile()
    assert profile.disks == () and profile.processes == ()
    assert aggregator.profile(cumulative=True).disks[0].reads == 3


def test_same_pid_with_another_comm_is_another_row():
    # A process that exec()s keeps its pid: its I/O before and after is told apart.
    aggregator = BlockAggregator(disk_names=NAMES)
    aggregator.add(
        drain(
            100.0,
            101.0,
            totals=[
                IoTotal(9, "sh", VDA, "R", 1, 4096, MS, 0),
                IoTotal(9, "dd", VDA, "R", 2, 8192, 2 * MS, 0),
            ],
        )
    )
    assert {(p.pid, p.comm, p.requests) for p in aggregator.profile().processes} == {
        (9, "sh", 1),
        (9, "dd", 2),
    }


@pytest.mark.parametrize(
    ("latency_us", "bounds"),
    [(0, (0, 1)), (1, (0, 1)), (2, (2, 3)), (3, (2, 3)), (4, (4, 7)), (7, (4, 7)),
     (8, (8, 15)), (1000, (512, 1023)), (1024, (1024, 2047))],
)
def test_a_latency_lands_in_the_bucket_that_covers_it(latency_us, bounds):
    assert bucket_bounds(kernel_slot(latency_us)) == bounds


def test_every_microsecond_up_to_a_second_has_exactly_one_bucket():
    for latency_us in range(0, 1_000_000, 997):
        low, high = bucket_bounds(kernel_slot(latency_us))
        assert low <= latency_us <= high


def test_histogram_is_contiguous_with_empty_buckets_between():
    assert histogram({}) == ()
    assert histogram({3: 5, 6: 1}) == (
        Bucket(4, 7, 5), Bucket(8, 15, 0), Bucket(16, 31, 0), Bucket(32, 63, 1))
    assert histogram({0: 2, 1: 3}) == (Bucket(0, 1, 5),)  # slot 0 never comes from the kernel


def test_disk_histogram_sums_processes_and_directions():
    aggregator = BlockAggregator(disk_names=NAMES)
    aggregator.add(
        drain(
            100.0,
            101.0,
            totals=[
                IoTotal(1, "dd", VDA, "W", 5, 5 * 4096, 5 * 150_000, 0),
                IoTotal(2, "cat", VDA, "R", 3, 3 * 4096, 3 * 600_000, 0),
            ],
            histogram=[
                LatencyBucket(1, "dd", VDA, "W", kernel_slot(150), 5),
                LatencyBucket(2, "cat", VDA, "R", kernel_slot(600), 2),
                LatencyBucket(2, "cat", VDA, "R", kernel_slot(150), 1),
            ],
        )
    )
    profile = aggregator.profile()
    assert profile.disks[0].hist_us == (Bucket(128, 255, 6), Bucket(256, 511, 0), Bucket(512, 1023, 2))
    by_comm = {p.comm: p for p in profile.processes}
    assert by_comm["dd"].hist_us == (Bucket(128, 255, 5),)
    assert by_comm["cat"].hist_us == (Bucket(128, 255, 1), Bucket(256, 511, 0), Bucket(512, 1023, 2))
    assert sum(b.count for b in profile.disks[0].hist_us) == profile.disks[0].reads + 5


def test_requests_newest_first_in_seconds_since_start():
    aggregator = BlockAggregator(window_s=5.0, disk_names=NAMES)
    requests = [
        CompletedRequest(100.0 + i / 10, 1, "dd", VDA, "W", 2048 * i, 65536, 200_000, 10_000)
        for i in range(30)
    ]
    aggregator.add(drain(100.0, 103.0, requests=requests, origin=99.0))
    rows = aggregator.profile(max_requests=5).requests
    assert [r.sector for r in rows] == [2048 * i for i in (29, 28, 27, 26, 25)]
    newest = rows[0]
    assert newest.time_s == pytest.approx(100.0 + 2.9 - 99.0)
    assert (newest.disk, newest.rw, newest.bytes) == ("vda", "W", 65536)
    assert newest.lat_ms == pytest.approx(0.2)
    assert newest.queue_ms == pytest.approx(0.01)


def test_requests_older_than_the_window_are_left_out():
    aggregator = BlockAggregator(window_s=2.0, disk_names=NAMES)
    old = CompletedRequest(100.5, 1, "dd", VDA, "W", 8, 4096, MS, 0)
    new = CompletedRequest(104.5, 1, "dd", VDA, "W", 16, 4096, MS, 0)
    aggregator.add(drain(100.0, 101.0, requests=[old]))
    aggregator.add(drain(101.0, 105.0, requests=[new]))
    assert [r.sector for r in aggregator.profile().requests] == [16]
    assert [r.sector for r in aggregator.profile(cumulative=True).requests] == [16, 8]


def test_stacks_are_symbolized_per_process_and_most_frequent_first():
    kallsyms = Kallsyms.from_text(
        "ffffffff81000000 T perf_trace_block_rq\n"
        "ffffffff81100000 T blk_account_io_start\n"
        "ffffffff81200000 T ext4_file_write_iter\n"
        "ffffffff81300000 T wb_workfn\n"
    )
    aggregator = BlockAggregator(disk_names=NAMES, symbols=kallsyms)
    direct = (0xFFFFFFFF81000010, 0xFFFFFFFF81100149, 0xFFFFFFFF8120035A)
    other = (0xFFFFFFFF81100149, 0xFFFFFFFF81300313)
    aggregator.add(
        drain(
            100.0,
            101.0,
            totals=[IoTotal(1, "dd", VDA, "W", 10, 40960, 10 * MS, 0)],
            stacks=[
                IoStack(1, "dd", VDA, "W", 3, other, ()),
                IoStack(1, "dd", VDA, "W", 7, direct, ()),
                IoStack(1, "dd", VDA, "W", 1, (), ()),  # a lost stack: counted as lost
                IoStack(2, "cat", VDA, "R", 4, other, ()),  # no completion in the window
            ],
        )
    )
    (dd,) = aggregator.profile().processes
    assert dd.stacks == (
        IoSubmitStack(("blk_account_io_start+0x149", "ext4_file_write_iter+0x35a"), 7),
        IoSubmitStack(("blk_account_io_start+0x149", "wb_workfn+0x313"), 3),
    )


def test_unnamed_disk_is_shown_by_number():
    aggregator = BlockAggregator(disk_names={})
    aggregator.add(
        drain(100.0, 101.0, totals=[IoTotal(1, "dd", kernel_dev(254, 7), "W", 1, 512, MS, 0)])
    )
    assert aggregator.profile().disks[0].disk == "254:7"
    assert aggregator.profile().processes[0].disk == "254:7"


def test_lost_counts_are_the_latest_cumulative_ones():
    aggregator = BlockAggregator(disk_names=NAMES)
    aggregator.add(drain(100.0, 101.0, lost={"unpaired_complete": 3, "ringbuf_full": 0}))
    aggregator.add(drain(101.0, 102.0, lost={"unpaired_complete": 4, "ringbuf_full": 9}))
    assert aggregator.profile().lost == {"unpaired_complete": 4, "ringbuf_full": 9}


def _load_recorded() -> tuple[list[BlockDrain], Kallsyms]:
    with open(FIXTURE) as f:
        recorded = json.load(f)
    drains = []
    for d in recorded["drains"]:
        drains.append(
            BlockDrain(
                origin=d["origin"],
                start=d["start"],
                end=d["end"],
                totals=tuple(IoTotal(**row) for row in d["totals"]),
                histogram=tuple(LatencyBucket(**row) for row in d["histogram"]),
                stacks=tuple(
                    IoStack(**{**row, "kernel": tuple(row["kernel"]), "user": tuple(row["user"])})
                    for row in d["stacks"]
                ),
                requests=tuple(CompletedRequest(**row) for row in d["requests"]),
                lost=d["lost"],
            )
        )
    return drains, Kallsyms.from_text("\n".join(recorded["kallsyms"]))


def test_recorded_run_of_dd_on_vda():
    """Two drains recorded on the VM (tests/fixtures/blockio_record.py): 40 direct 64 KiB
    writes and reads of them back, then 2 MiB written buffered and fsync'ed by dd."""
    drains, kallsyms = _load_recorded()
    aggregator = BlockAggregator(window_s=60.0, disk_names={VDA: "vda"}, symbols=kallsyms)
    for d in drains:
        aggregator.add(d)
    profile = aggregator.profile()

    (vda,) = profile.disks
    assert vda.disk == "vda"
    assert all(p.comm == "dd" for p in profile.processes)
    (direct,) = [p for p in profile.processes if p.rw == "W" and p.requests == 40]
    (fsynced,) = [p for p in profile.processes if p.rw == "W" and p.requests != 40]
    (reader,) = [p for p in profile.processes if p.rw == "R"]
    assert (reader.requests, reader.bytes) == (40, 40 * 65536) == (vda.reads, vda.read_bytes)
    assert direct.bytes == 40 * 65536
    # fsync writes the 2 MiB in a few big requests, then a cache flush: an empty write.
    assert fsynced.bytes >= 32 * 65536
    assert vda.writes == direct.requests + fsynced.requests
    assert sum(b.count for b in vda.hist_us) == vda.reads + vda.writes

    # Stacks start at the block layer: the tracing frames above it are left out.
    first, *_ = direct.stacks
    frames, submitted = first.frames, first.requests
    assert submitted == 40
    assert frames[0].startswith("blk_account_io_start+")
    assert any(f.startswith("iomap_dio_rw+") for f in frames)  # the O_DIRECT write path
    fsync_frames = [f for stack in fsynced.stacks for f in stack.frames]
    assert any(f.startswith(("ext4_sync_file+", "file_write_and_wait_range+")) for f in fsync_frames)
    assert any(f.startswith("blkdev_issue_flush+") for f in fsync_frames)

    assert len(profile.requests) == vda.reads + vda.writes
    times = [r.time_s for r in profile.requests]
    assert times == sorted(times, reverse=True) and times[-1] >= 0
    assert all(0 < r.lat_ms < 1000 for r in profile.requests)


# ---- the struct offsets the collector reads requests with, from BTF ----------------------


class BtfBuilder:
    """Writes a small BTF blob, as the kernel lays out /sys/kernel/btf/vmlinux."""

    def __init__(self) -> None:
        self.strings = bytearray(b"\0")
        self.types = bytearray()
        self.count = 0

    def name(self, text: str) -> int:
        if not text:
            return 0
        offset = len(self.strings)
        self.strings += text.encode() + b"\0"
        return offset

    def add(self, kind: int, name: str, vlen: int, size_or_type: int, extra: bytes = b"",
            kind_flag: int = 0) -> int:
        info = kind_flag << 31 | kind << 24 | vlen
        self.types += struct.pack("<III", self.name(name), info, size_or_type) + extra
        self.count += 1
        return self.count

    def int(self, name: str, size: int) -> int:
        return self.add(1, name, 0, size, struct.pack("<I", size * 8))

    def struct(self, name: str, size: int, members: list[tuple[str, int, int]]) -> int:
        """members: (name, type id, bit offset)."""
        extra = b"".join(struct.pack("<III", self.name(n), t, bits) for n, t, bits in members)
        return self.add(4, name, len(members), size, extra)

    def union(self, name: str, size: int, members: list[tuple[str, int, int]]) -> int:
        extra = b"".join(struct.pack("<III", self.name(n), t, bits) for n, t, bits in members)
        return self.add(5, name, len(members), size, extra)

    def blob(self) -> bytes:
        header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types),
                             len(self.types), len(self.strings))
        return header + bytes(self.types) + bytes(self.strings)


def small_kernel_btf() -> bytes:
    b = BtfBuilder()
    u32 = b.int("unsigned int", 4)
    u64 = b.int("long long unsigned int", 8)
    sector_t = b.add(8, "sector_t", 0, u64)  # typedef
    const_u32 = b.add(10, "", 0, u32)  # const
    iter_ = b.struct("bvec_iter", 16, [("bi_sector", sector_t, 0), ("bi_size", u32, 64)])
    bio = b.add(7, "bio", 0, 0)  # forward declaration, completed below
    bio_ptr = b.add(2, "", 0, bio)
    flags = b.union("", 4, [("bi_opf", const_u32, 0), ("bi_flags_alias", u32, 0)])
    b.struct("bio", 40, [("bi_next", bio_ptr, 0), ("", flags, 64), ("bi_iter", iter_, 128)])
    real_bio = b.count
    void_ptr = b.add(2, "", 0, 0)
    real_bio_ptr = b.add(2, "", 0, real_bio)
    proto = b.add(13, "", 3, 0, struct.pack("<IIIIII", 0, void_ptr, 0, u32, 0, real_bio_ptr))
    b.add(8, "btf_trace_block_bio_complete", 0, b.add(2, "", 0, proto))
    return b.blob()


def test_btf_member_offsets_through_typedefs_and_anonymous_unions():
    btf = KernelBtf(small_kernel_btf())
    assert btf.member("bio", "bi_next") == (0, 8)
    assert btf.member("bio", "bi_opf") == (8, 4)  # inside an anonymous union
    assert btf.member("bio", "bi_iter.bi_sector") == (16, 8)  # sector_t: a typedef of u64
    assert btf.member("bio", "bi_iter.bi_size") == (24, 4)
    with pytest.raises(BtfError, match="no bi_missing"):
        btf.member("bio", "bi_missing")
    with pytest.raises(BtfError, match="no struct request"):
        btf.member("request", "__sector")


def test_btf_finds_which_tracepoint_argument_is_the_bio():
    btf = KernelBtf(small_kernel_btf())
    assert btf.tracepoint_arg("block_bio_complete", "bio") == 1  # (queue, bio)
    with pytest.raises(BtfError):
        btf.tracepoint_arg("block_bio_queue", "bio")


def test_btf_rejects_what_is_not_btf():
    with pytest.raises(BtfError):
        KernelBtf(b"\x7fELF" + bytes(40))


@pytest.mark.skipif(not os.access(BTF_PATH, os.R_OK), reason=f"no readable {BTF_PATH}")
def test_this_kernels_btf_gives_every_offset_the_program_needs():
    flags = struct_offset_flags(KernelBtf.load())
    macros = dict(flag[2:].split("=") for flag in flags)
    assert set(macros) == set(STRUCT_FIELDS) | set(TRACEPOINT_ARGS) | {"REQ_PREFLUSH"}
    assert macros["BIO_COMPLETE_ARG"] == "1"  # block_bio_complete(q, bio)
    assert macros["RQ_COMPLETE_ARG"] == "0"  # block_rq_complete(rq, error, nr_bytes)
    # One bit, above the 8 of the op (a C unsigned literal).
    preflush = int(macros.pop("REQ_PREFLUSH").removesuffix("u"))
    assert preflush >= 1 << 8 and preflush & (preflush - 1) == 0
    assert all(int(value) >= 0 for value in macros.values())


def test_a_busy_process_leaves_the_others_their_newest_requests():
    """The request list keeps the newest 200; a drill-down into any process but the busiest
    found none of its own there (issue 12): each process keeps its newest few besides."""
    aggregator = BlockAggregator(window_s=5.0, disk_names=NAMES)
    quiet = [CompletedRequest(100.1 + i / 100, 7, "jbd2/vda-8", VDA, "W", 8 * i, 4096, MS, 0)
             for i in range(3)]
    busy = [CompletedRequest(100.5 + i / 1000, 1, "dd", VDA, "R", 2048 * i, 1 << 19, MS, 0)
            for i in range(1000)]
    totals = [IoTotal(7, "jbd2/vda-8", VDA, "W", 3, 3 * 4096, 3 * MS, 0),
              IoTotal(1, "dd", VDA, "R", 1000, 1000 << 19, 1000 * MS, 0)]
    aggregator.add(drain(100.0, 102.0, totals=totals, requests=[*quiet, *busy], origin=99.0))
    rows = aggregator.profile(max_requests=200).requests
    assert [r.sector for r in rows if r.pid == 7] == [16, 8, 0]  # newest first
    assert sum(r.pid == 1 for r in rows) == 200
    assert [r.time_s for r in rows] == sorted((r.time_s for r in rows), reverse=True)
    # a process that has left the window brings no old requests back
    aggregator.add(drain(102.0, 110.0, totals=totals[1:], requests=busy[-1:], origin=99.0))
    assert not [r for r in aggregator.profile().requests if r.pid == 7]


def test_exited_processes_requests_are_forgotten_once_no_row_can_show_them():
    """Under churn each short process that did I/O left its newest requests behind, kept
    for a drill-down into a row no view held any more: forgotten once it has exited, left
    the window and its totals folded; the totals stay exact, a live process keeps its own."""
    aggregator = BlockAggregator(window_s=5.0, disk_names=NAMES)
    exited = range(1000, 1600)  # past exited.FOLD_AFTER rows: the totals fold
    requests = [CompletedRequest(100.5, pid, "sh", VDA, "W", pid, 4096, MS, 0) for pid in exited]
    totals = [IoTotal(pid, "sh", VDA, "W", 1, 4096, MS, 0) for pid in exited]
    live = CompletedRequest(100.6, 1, "dd", VDA, "W", 7, 4096, MS, 0)
    aggregator.add(drain(100.0, 101.0, totals=[*totals, IoTotal(1, "dd", VDA, "W", 1, 4096, MS, 0)],
                         requests=[*requests, live], origin=99.0))
    for second in range(101, 108):  # the window moves past them
        aggregator.add(drain(float(second), second + 1.0, origin=99.0))
    aggregator.fold_exited(lambda pid: pid == 1)
    assert set(aggregator._each) == {(1, VDA, "W")}
    cumulative = aggregator.profile(cumulative=True)
    assert sum(p.requests for p in cumulative.processes if p.comm == "sh") == 600
    assert [r.pid for r in cumulative.requests if r.sector == 7] == [1]


def test_an_exited_process_still_in_the_window_keeps_its_requests():
    aggregator = BlockAggregator(window_s=5.0, disk_names=NAMES)
    request = CompletedRequest(100.5, 1000, "sh", VDA, "W", 8, 4096, MS, 0)
    aggregator.add(drain(100.0, 101.0, totals=[IoTotal(1000, "sh", VDA, "W", 1, 4096, MS, 0)],
                         requests=[request], origin=99.0))
    aggregator.fold_exited(lambda pid: False)
    assert [r.pid for r in aggregator.profile().requests] == [1000]


def test_the_request_list_keeps_what_a_profile_lists_and_no_more():
    """4,096 requests were kept of which a profile lists the newest 200: what it lists is
    the same, the rest is not held."""
    from ktop.panes.blockio.aggregate import MAX_REQUESTS

    aggregator = BlockAggregator(window_s=5.0, disk_names=NAMES)
    requests = [CompletedRequest(100.0 + i / 1000, 1, "dd", VDA, "W", i, 4096, MS, 0)
                for i in range(3000)]
    aggregator.add(drain(100.0, 104.0, requests=requests, origin=99.0))
    assert [r.sector for r in aggregator.profile().requests] == list(range(2999, 2799, -1))
    assert len(aggregator._requests) <= MAX_REQUESTS
