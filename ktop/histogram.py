"""A log2 histogram's bucket, as every pane's profile holds them (a module of its own: the
panes' models import it, and ktop.model imports them)."""

from __future__ import annotations

from dataclasses import dataclass

from ktop.frozen import quick_init


@quick_init
@dataclass(frozen=True, slots=True)
class Bucket:
    """One bucket of a log2 histogram: `count` values v with low <= v <= high.

    `high` is inclusive, as biolatency prints its buckets: "4 -> 7" holds 4, 5, 6 and 7, and
    the next bucket starts at 8, so no value could belong to two of them.
    """

    low: int
    high: int
    count: int
