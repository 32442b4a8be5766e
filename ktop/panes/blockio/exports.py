"""The block I/O pane's exports: its folded stacks (bytes, latency), pprof samples and --dump
csv cells. A row's bytes and latency are the kernel's per (process, disk, direction); its
stacks share them by their requests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ktop.exports.folded import frame_name, kernel_frames
from ktop.model import IoProcess, Snapshot
from ktop.text import csv_cell


def io_stack_shares(process: IoProcess, total: int) -> list[int]:
    """`total` (the row's bytes, or latency) shared among its stacks by their requests,
    summing to it exactly where every request has a stack (largest remainder). The kernel
    counts requests per stack; bytes and latency it counts per (process, disk, direction)."""
    requests = process.requests
    if not requests:
        return [0] * len(process.stacks)
    exact = [total * stack.requests / requests for stack in process.stacks]
    shares = [int(value) for value in exact]
    if sum(stack.requests for stack in process.stacks) == requests:
        left = total - sum(shares)
        by_remainder = sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])
        for i in by_remainder[:left]:
            shares[i] += 1
    return shares


def io_process_stacks(process: IoProcess, total: int) -> Iterator[tuple[list[str], int]]:
    """(frames root first, its share of `total`) of each stack that submitted the I/O."""
    for stack, share in zip(process.stacks, io_stack_shares(process, total)):
        yield [frame_name(process.comm), *kernel_frames(stack.frames)], share


def _io(snapshot: Snapshot, weight: str) -> Iterator[tuple[list[str], int]]:
    if snapshot.blockio is None:
        return
    for process in snapshot.blockio.processes:
        if weight == "bytes":
            total = process.bytes
        else:  # latency in microseconds
            total = round(process.avg_lat_ms * 1000 * process.requests)
        yield from io_process_stacks(process, total)


def io_byte_stacks(snapshot: Snapshot, include_idle: bool) -> Iterator[tuple[list[str], int]]:
    return _io(snapshot, "bytes")


def io_latency_stacks(snapshot: Snapshot, include_idle: bool) -> Iterator[tuple[list[str], int]]:
    return _io(snapshot, "latency")


def add_pprof(tables: Any, snapshot: Snapshot, include_idle: bool = False) -> None:
    """Its samples into exports.pprof's tables (PprofExport.add)."""
    if snapshot.blockio is None:
        return
    for process in snapshot.blockio.processes:
        latency_ns = round(process.avg_lat_ms * 1e6 * process.requests)
        shares = zip(process.stacks, io_stack_shares(process, process.bytes),
                     io_stack_shares(process, latency_ns))
        labels = {"pid": process.pid, "comm": process.comm, "disk": process.disk,
                  "op": {"R": "read", "W": "write", "F": "flush"}.get(process.rw, "write")}
        for stack, bytes_share, latency_share in shares:
            tables.sample(tables.kernel_stack(stack.frames),
                          {"io_requests": stack.requests, "io": bytes_share,
                           "io_latency": latency_share}, labels)
    tables.profile.comment.append(tables.string(
        "io bytes and io_latency are a process's, shared among its stacks by requests"))


def csv_cells(snapshot: Snapshot, show_idle: bool) -> list[object]:
    io = snapshot.blockio
    if not io:
        return [""] * 6
    requests = sum(d.reads + d.writes for d in io.disks)
    latency = sum(d.avg_lat_ms * (d.reads + d.writes) for d in io.disks)
    top_io = io.processes[0] if io.processes else None
    return [requests, sum(d.read_bytes + d.write_bytes for d in io.disks),
            f"{latency / requests:.4f}" if requests else "",
            top_io.pid if top_io else "", csv_cell(top_io.comm) if top_io else "",
            top_io.bytes if top_io else ""]
