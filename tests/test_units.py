"""Durations read as perf prints them."""

from __future__ import annotations

import pytest

from ktop.units import format_ns, format_span


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
