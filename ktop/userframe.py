"""A user-space frame: in a module of its own so that every pane's model (ktop/panes/<name>/
model.py) can import it without importing ktop.model, which imports those models."""

from __future__ import annotations

from dataclasses import dataclass

from ktop.frozen import quick_init


@quick_init
@dataclass(frozen=True, slots=True)
class UserFrame:
    """A user-space frame, symbolized while its process was alive."""

    symbol: str  # "main+0x1a"; "[unknown]" if no symbol covers it; hex if no mapping does
    module: str  # mapped file path, "[vdso]"/"[heap]"/"[anon]", or "[unknown]"
