"""Durations read as perf prints them."""

from __future__ import annotations

import pytest

from ktop.units import format_bucket, format_ns, format_short_ns, format_span


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0 ns"),
        (999, "999 ns"),
        (1000, "1.00 us"),
        (1234, "1.23 us"),
        (285_550, "285.55 us"),
        (999_994, "999.99 us"),
        (999_999, "1.00 ms"),  # not "1000.00 us"
        (45_600_000, "45.60 ms"),
        (2_130_000_000, "2.13 s"),
        (3_600_000_000_000, "3600.00 s"),  # seconds are the largest unit, as in perf
        (12.6, "13 ns"),
    ],
)
def test_format_ns(ns, text):
    assert format_ns(ns) == text


def test_negative_durations_keep_their_sign():
    assert format_ns(-1500) == "-1.50 us"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "0.2s"), (1.04, "1.0s"), (4.995, "5s"), (5.06, "5s"), (3.067, "3s"), (63.4, "63s")],
)
def test_window_spans_read_in_whole_seconds_once_the_jitter_would_show(seconds, text):
    assert format_span(seconds) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (512, "512 ns"),
        (1023, "1.02 us"),
        (64_000, "64 us"),
        (127_000, "127 us"),
        (999_999, "1 ms"),  # not "1e+03 us"
        (2_097_151, "2.1 ms"),
        (7_200_000_000_000, "7200 s"),
    ],
)
def test_short_durations_for_histogram_bounds(ns, text):
    assert format_short_ns(ns) == text


def test_lock_and_block_buckets_read_in_the_same_units():
    """A lock wait bucket counts ns and a block latency bucket us: both read alike."""
    assert format_bucket(65_536, 131_071) == "65.5 us -> 131 us"
    assert format_bucket(64 * 1000, 127 * 1000) == "64 us -> 127 us"
