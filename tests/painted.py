"""What a terminal would show: every update Textual writes, applied to a grid of characters.

Textual's headless driver writes nothing, and `screen_text` renders the whole screen afresh,
so neither can see a line the app forgot to repaint. This records the updates themselves."""

from __future__ import annotations

from rich.cells import cell_len
from textual._compositor import ChopsUpdate, LayoutUpdate


class PaintedScreen:
    def __init__(self, app, size: tuple[int, int]) -> None:
        self.width, self.height = size
        self.cells = [[" "] * self.width for _ in range(self.height)]
        self.updates = 0
        original = app._display

        def display(screen, renderable) -> None:
            if renderable is not None and not app._batch_count:
                self._apply(renderable)
            original(screen, renderable)

        app._display = display

    def _put(self, x: int, y: int, text: str, x_end: int | None = None) -> None:
        if not 0 <= y < self.height:
            return
        for char in text:
            if x_end is not None and x >= x_end:
                break
            if 0 <= x < self.width:
                self.cells[y][x] = char
            x += max(1, cell_len(char))

    def _apply(self, update) -> None:
        self.updates += 1
        if isinstance(update, LayoutUpdate):
            for y, line in enumerate(update.strips, update.region.y):
                self._put(update.region.x, y, "".join(strip.text for strip in line))
        elif isinstance(update, ChopsUpdate):
            for y, x1, x2 in update.spans:
                for end, (x, strip) in zip(update.chop_ends[y], update.chops[y].items()):
                    if strip is None or x > x2 or end <= x1:
                        continue
                    self._put(x, y, strip.text, min(end, x2 + 1))

    def lines(self) -> list[str]:
        return ["".join(row) for row in self.cells]
