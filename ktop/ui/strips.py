"""Lines divided into one piece without a reference cycle.

Textual's compositor divides each line it paints at the edges of the widgets over it, and
Strip.divide caches its result on the strip: a line divided into one piece (no other widget
overlaps it: most lines) is cached as itself, a reference cycle. Every line a refresh
replaced then waited, with its segments and caches, for the collector's oldest generation,
which ktop runs rarely (bench/RESULTS.md: Garbage collection). Here that case returns the strip itself
without the cache; every other division is Textual's own.
"""

from __future__ import annotations

from textual.strip import Strip

_original = Strip.divide


def divide(self: Strip, cuts: list[int]) -> list[Strip]:
    """Strip.divide: the same pieces, the one-piece case not cached on the strip."""
    length = self.cell_length
    if length in cuts and [cut for cut in cuts if cut <= length] == [length]:
        return [self]
    return _original(self, cuts)


def install() -> None:
    Strip.divide = divide  # type: ignore[method-assign]


def uninstall() -> None:
    Strip.divide = _original  # type: ignore[method-assign]
