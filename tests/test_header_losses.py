"""The header and L tell losses that cost counts from those that cost none (issue 26): a busy
disk drops thousands of entries from the recent-requests stream while every counter has the
requests, and those must not read as thousands of lost samples."""

from __future__ import annotations

from dataclasses import replace

from ktop.engine import LiveSource, Options
from ktop.ui.widgets.header import header_text, loss_lines


def busy_disk(snapshot):
    """The issue's snapshot: 149 samples without their kernel stack, and 15,679 requests the
    recent-requests stream dropped (its counters intact)."""
    return replace(snapshot, cpu=replace(snapshot.cpu, lost={"kstack_collision": 149}),
                   blockio=replace(snapshot.blockio, lost={"ringbuf_full": 15679}))


def test_the_header_counts_only_losses_that_cost_counts(recorded_snapshot):
    lines = header_text(busy_disk(recorded_snapshot)).plain.splitlines()
    assert lines[2].startswith("lost 149 (L lists)"), lines[2]
    assert "15679 not in recent requests, counts intact" in lines[2]
    assert "15828" not in lines[2]


def test_a_stream_loss_alone_is_no_loss_of_counts(recorded_snapshot):
    snapshot = replace(busy_disk(recorded_snapshot), cpu=replace(
        recorded_snapshot.cpu, lost={}), locks=replace(recorded_snapshot.locks, lost={}))
    line = header_text(snapshot).plain.splitlines()[2]
    assert line.startswith("lost none  15679 not in recent requests, counts intact (L lists)")


def test_l_lists_losses_that_cost_counts_first_and_marks_the_others(recorded_snapshot):
    rows = loss_lines(busy_disk(recorded_snapshot))
    assert [(name, count, intact) for _, name, count, _, intact in rows] == [
        ("kstack_collision", 149, False), ("ringbuf_full", 15679, True)]
    assert "every count has it" in rows[1][3]


def test_the_headers_are_not_said_unneeded_while_the_bpf_panes_load():
    """Before the first compile has looked for them, the headers are being looked for: "not
    needed" was shown while the BPF panes compiled (issue 26)."""
    source = LiveSource(Options())
    try:
        assert source.headers == "looking for them"
    finally:
        source.close()
    without_bpf = LiveSource(Options(panes=frozenset()))
    assert "not needed" in without_bpf.headers
    without_bpf.close()
