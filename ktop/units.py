"""Human units, formatted as the perf tools print them."""

from __future__ import annotations

_TIME_UNITS = ("ns", "us", "ms", "s")


def count_of(n: int, what: str) -> str:
    """'1 wait', '3 waits'."""
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def format_ns(ns: float) -> str:
    """A duration as `perf lock contention` prints it: '512 ns', '1.23 us', '45.60 ms', '2.13 s'.

    Whole nanoseconds below a microsecond, two decimals in the largest unit that keeps the
    number under 1000 (seconds have no larger unit).
    """
    if ns < 0:
        return "-" + format_ns(-ns)
    if ns < 1000:
        return f"{round(ns)} ns"
    value = float(ns)
    for unit in _TIME_UNITS[1:]:
        value /= 1000
        # Decide on the rounded value, so 999_999 ns reads "1.00 ms", not "1000.00 us".
        if round(value, 2) < 1000 or unit == _TIME_UNITS[-1]:
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")


def format_short_ns(ns: float) -> str:
    """A duration in three significant digits at most: '512 ns', '1.02 us', '64 us', '128 ms'.
    For bounds of histogram buckets, where two decimals would only widen the column."""
    if ns < 1000:
        return f"{round(ns)} ns"
    value = float(ns)
    for unit in _TIME_UNITS[1:]:
        value /= 1000
        if float(f"{value:.3g}") < 1000 or unit == _TIME_UNITS[-1]:
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def format_bucket(low_ns: float, high_ns: float) -> str:
    """A histogram bucket, the one unit rule for every latency histogram: '1.02 us -> 2.05 us'."""
    return f"{format_short_ns(low_ns)} -> {format_short_ns(high_ns)}"


def format_span(seconds: float) -> str:
    """A window's span for labels: whole seconds from 2 s up. Drains jitter by milliseconds,
    and a label flickering between '5.0s' and '5.1s' says nothing but costs a redraw."""
    return f"{seconds:.0f}s" if seconds >= 2 else f"{seconds:.1f}s"


def format_scale(value: float, unit: str) -> str:
    """A figure's scale as a sparkline's top says it: a share whole ('42%'), a time in ms
    ('ms', or 'ms/s' per second of the interval) in the unit that keeps it short ('640us',
    '12s/s'), never in exponents."""
    if unit == "%":
        return f"{value:.0f}%"
    if unit.startswith("ms"):
        return format_short_ns(value * 1e6).replace(" ", "") + unit[2:]
    return f"{value:.3g}{unit}"
