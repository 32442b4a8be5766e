"""Textual's compositor, asking each widget only for the rows it must repaint.

To repaint a frame, Textual's compositor crops to the box around every changed region and
asks each widget inside that box for all of its lines; then it writes only the changed spans
to the terminal and throws the rest away. ktop changes a few lines in each corner of the
screen every second, so the box is the whole screen and every widget drew every line: at
idle, 1.2 ms a refresh went to widgets that had not changed at all (a pane's frame, the
grid, the screen, scrollbars), a seventh of ktop's drawing.

This one asks a widget only for the rows where it meets a changed span. What reaches the
terminal is the same: a piece of a line is written only where it overlaps a changed span,
and the widget in front there meets that span, so it is asked for that row and, asked in
the same front-to-back order, still wins it.
"""

from __future__ import annotations

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class ChangedRowsCompositor(Compositor):
    def render_partial_update(self) -> ChopsUpdate | None:
        update_regions = self._dirty_regions.copy()
        self._dirty_regions.clear()
        if not update_regions:
            return None
        spans = list(self._regions_to_spans(update_regions))
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        # Per changed line, the pieces (by where they start) that a changed span overlaps
        # and no widget has painted yet; a widget behind those painted is not asked at all.
        unpainted: dict[int, set[int]] = {}
        for y, x1, x2 in spans:
            line_cuts = cuts[y]
            unpainted.setdefault(y, set()).update(
                cut for cut, end in zip(line_cuts, line_cuts[1:]) if cut < x2 and end > x1)
        for widget, (region, clip) in self.visible_widgets.items():
            if not unpainted:
                break
            left, top, width, height = region.intersection(clip)
            right, bottom = left + width, top + height
            rows = [y for y, pieces in unpainted.items()
                    if top <= y < bottom and any(left <= cut < right for cut in pieces)]
            if not rows:
                continue
            first, last = min(rows), max(rows) + 1
            strips = widget.render_lines(Region(left - region.x, first - region.y, width, last - first))
            for y in rows:
                line = chops[y]
                final_cuts = [cut for cut in cuts[y] if right >= cut >= left]
                pieces = strips[y - first].divide([cut - left for cut in final_cuts[1:]])
                left_to_paint = unpainted[y]
                for cut, piece in zip(final_cuts, pieces):
                    if line[cut] is None:  # front to back: the first to paint a piece wins
                        line[cut] = piece
                        left_to_paint.discard(cut)
                if not left_to_paint:
                    del unpainted[y]
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in cuts])


class ChangedRowsScreen(Screen):
    """A screen drawn by the ChangedRowsCompositor."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._compositor = ChangedRowsCompositor()
