"""Component styles restyled in place (ktop.ui.restyle): focus changes leave no virtual nodes
behind for the collector, and a component's style still follows focus."""

from __future__ import annotations

import asyncio
import gc
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.dom import DOMNode
from textual.widget import Widget

from ktop.ui import restyle


class Part(Widget, can_focus=True):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"part--cursor", "part--header"}
    DEFAULT_CSS = """
    Part {
        height: 3;
        & > .part--cursor { background: red; }
        &:focus > .part--cursor { background: blue; }
    }
    """


class TwoParts(App):
    def compose(self) -> ComposeResult:
        yield Part(id="a")
        yield Part(id="b")


def _cursor_colour(part: Part) -> str:
    colour = part.get_component_rich_style("part--cursor").bgcolor
    return {"#ff0000": "red", "#0000ff": "blue"}.get(colour.name, colour.name)


def _virtual_nodes_in_garbage(*parts: Part) -> int:
    """How many virtual nodes of these parts wait in reference cycles for the collector
    (collected here; other tests' garbage in the same process is not counted)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sum(type(thing) is DOMNode and thing._parent in parts for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_focus_changes_leave_no_virtual_nodes_and_styles_follow_focus():
    restyle.install()
    try:
        async def run() -> tuple[list[str], int, bool]:
            app = TwoParts()
            async with app.run_test() as pilot:
                a, b = app.query_one("#a", Part), app.query_one("#b", Part)
                kept = dict(a.__dict__[restyle._NODES])
                colours = []
                _virtual_nodes_in_garbage()
                for _ in range(20):
                    b.focus()
                    await pilot.pause()
                    colours.append(_cursor_colour(a) + "/" + _cursor_colour(b))
                    a.focus()
                    await pilot.pause()
                    colours.append(_cursor_colour(a) + "/" + _cursor_colour(b))
                garbage = _virtual_nodes_in_garbage(a, b)
                same = kept == a.__dict__[restyle._NODES]
                await pilot.exit(None)
            return colours, garbage, same

        colours, garbage, same = asyncio.run(run())
    finally:
        restyle.uninstall()
    assert colours[:2] == ["red/blue", "blue/red"], colours
    assert set(colours) == {"red/blue", "blue/red"}
    assert same  # the same virtual node per class throughout
    assert garbage == 0  # Textual's own: 2 per restyle of each Part


def test_textual_alone_leaves_virtual_nodes():
    """The test above can fail: without the patch the same focus changes leave garbage."""
    restyle.uninstall()

    async def run() -> int:
        app = TwoParts()
        async with app.run_test() as pilot:
            a, b = app.query_one("#a", Part), app.query_one("#b", Part)
            _virtual_nodes_in_garbage()
            for _ in range(5):
                b.focus()
                await pilot.pause()
                a.focus()
                await pilot.pause()
            garbage = _virtual_nodes_in_garbage(a, b)
            await pilot.exit(None)
        return garbage

    try:
        assert asyncio.run(run()) > 0
    finally:
        restyle.install()
