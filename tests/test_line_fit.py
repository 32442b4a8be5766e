"""Issue 31 part 4: read at 80x24, no line of the header, tabs, timeline or footer is cut
mid-word (`samples 986/990 expe`, `Tab/1-4 swi`, `z Zoo`): whole items go, the least useful
first. The sort arrow never cuts its column's name, `?` says what every column of the focused
pane's view is, the timeline's scales read in human units, and after `c` every pane says
"cumulative"."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import drill_into, run_app
from test_export import full_snapshot

from ktop.engine import RecordedSource
from ktop.model import DiskIo, IostatProfile, Pressure, SelfCostRow
from ktop.registry import PANES
from ktop.ui.app import build_app
from ktop.ui.headless import screen_text
from ktop.ui.screens.help import HelpScreen
from ktop.ui.widgets.fit import Item, fit_items, item
from ktop.ui.widgets.header import header_items
from ktop.units import format_scale

NARROW = (80, 24)


def busy(snapshot):
    """Every header item there: ktop's cost by pane, PSI, steal, a disk; a long host name."""
    cpu = snapshot.cpu
    return replace(
        snapshot, hostname="build-server-frankfurt-03.example.internal",
        cost=SelfCostRow(4.1, 0.6, {"waits": 0.5, "locks": 0.1, "functions": 0.1}),
        pressure=Pressure(6.3, 0.0, 0.5, 0.3, 0.0, 0.0),
        cpu=replace(cpu, times=replace(cpu.times, steal=0.4, iowait=12.5)),
        iostat=IostatProfile(3.0, (DiskIo("vda", 254, 0, reads=30, writes=90, busy_ms=1200),)),
        waits=full_snapshot().waits, endings=full_snapshot().endings,
        syscalls=full_snapshot().syscalls)


def made_of_whole_items(line: str, items: list[Item]) -> bool:
    """Whether `line` is some of the items, in order, each whole (or in its short form),
    with their gaps: nothing cut."""
    at = 0
    for it in items:
        for text in (it.text.plain, it.short.plain if it.short else None):
            if text is None:
                continue
            piece = (it.gap if at else "") + text
            if line.startswith(piece, at):
                at += len(piece)
                break
    return at == len(line)


def test_fit_drops_whole_items_least_useful_first_and_shortens_before_dropping():
    items = [item("ktop", 100, gap=""), item("host", 8), item("samples 9/10 expected in 5s", 5,
             short="samples 9/10"), item("kernel 3", 3), item("v1.0", 2)]
    assert fit_items(items, 80).plain == "ktop  host  samples 9/10 expected in 5s  kernel 3  v1.0"
    assert fit_items(items, 40).plain == "ktop  host  samples 9/10 expected in 5s"
    assert fit_items(items, 30).plain == "ktop  host  samples 9/10"
    assert fit_items(items, 12).plain == "ktop  host"
    assert fit_items(items, 3).plain == "kt…"  # what must stay is cut at the end, said so


def pane_screens(snapshot, size):
    """For every pane and each of its views: the screen's text, the header's lines as shown,
    the footer's keys, the pane's subtitle and the help it opens."""
    seen = []

    async def scenario(pilot):
        app = pilot.app
        main = app.main_screen
        for spec in PANES:
            await pilot.press(str(spec.number))
            pane = main.pane(spec.name)
            for _ in pane.VIEWS:
                await pilot.pause()
                text = screen_text(app)
                await pilot.press("question_mark")
                await pilot.pause()
                help_screen = app.screen
                assert isinstance(help_screen, HelpScreen)
                seen.append({
                    "pane": spec.name, "view": pane.view, "text": text,
                    "help": screen_text(app), "help_columns": list(help_screen._columns),
                    "columns": [(c.label, pane.table.shows(c)) for c in pane.current_view.columns],
                    "header": [line.plain for line in main.header_bar()._lines],
                    "footer": main.query_one("KeysFooter"),
                    "subtitle": pane._subtitle,
                    "described": pane.COLUMN_HELP,
                })
                await pilot.press("escape")
                await pilot.press("v")
        seen.append({"items": header_items(app.snapshot, main._badges(),
                                           filtered=main.display_settings.filtered)})

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2, pid=4243), scenario, size=size)
    return seen[:-1], seen[-1]["items"]


@pytest.mark.parametrize("size", [NARROW, (160, 50)])
def test_no_header_tab_or_footer_item_is_cut_mid_word_in_any_pane_or_view(
        recorded_snapshot, size):
    screens, items = pane_screens(busy(recorded_snapshot), size)
    width = size[0]
    for seen in screens:
        where = f"{seen['pane']} {seen['view']} at {width}"
        lines = seen["text"].splitlines()
        for shown, line_items in zip(seen["header"], items):
            assert len(shown) <= width - 2, where
            assert made_of_whole_items(shown, line_items), f"{where}: header {shown!r}"
            assert shown.strip() in lines[items.index(line_items)], where
        footer = seen["footer"]
        keys = [item(f" {display} {description} ", 50, gap="")
                for _, display, description in footer._keys]
        drawn = lines[-1].rstrip()
        assert drawn and made_of_whole_items(drawn + " " * (len(drawn) < width), keys) or (
            made_of_whole_items(drawn, [item(k.text.plain.rstrip(), 50, gap=" ") for k in keys])
        ), f"{where}: footer {drawn!r}"
        assert seen["subtitle"] and seen["subtitle"] in seen["text"], (
            f"{where}: the subtitle {seen['subtitle']!r} is cut")
        if width < 100:  # one pane at a time, under its tabs
            tabs = lines[3].strip()
            last = PANES[-1]  # the tabs reach the last pane, by its label or its short label
            assert tabs.endswith((last.key_label, last.short_label,
                                  f"Tab/1-{len(PANES)} switch")), f"{where}: tabs {tabs!r}"
    narrow_header = screens[0]["header"]
    if width == 80:  # what goes first at 80: the least useful, not what sits rightmost
        assert "lost" in narrow_header[2] and "PSI" in narrow_header[2]
        assert "iowait 12.5%" in narrow_header[1] and "steal" not in narrow_header[1]
        assert "headers:" not in narrow_header[2] and "expected" not in narrow_header[1]
        assert "pid 4243 only" in narrow_header[0]  # a badge never goes


def test_help_says_what_every_column_of_every_pane_and_view_is(recorded_snapshot):
    for size in (NARROW, (160, 50)):
        screens, _ = pane_screens(recorded_snapshot, size)
        assert {(s["pane"], s["view"]) for s in screens} == {
            (spec.name, view.name) for spec in PANES for view in spec.widget().VIEWS}
        for seen in screens:
            where = f"{seen['pane']} {seen['view']} at {size}"
            listed = [(label, shown) for label, _, shown in seen["help_columns"]]
            assert listed == seen["columns"], where  # every column, said whether shown
            for label, what, _ in seen["help_columns"]:
                assert what == seen["described"][label] and len(what) >= 8, where
            if size == (160, 50):  # the whole list on the screen: each line there
                help_lines = seen["help"]
                for label, what, _ in seen["help_columns"]:
                    assert label in help_lines, f"{where}: {label} not in the help"
                    assert what.split()[0] in help_lines


def test_help_at_80x24_scrolls_and_says_there_is_more(recorded_snapshot):
    seen = {}

    async def scenario(pilot):
        await pilot.press("4", "question_mark")
        await pilot.pause(0.1)
        seen["before"] = screen_text(pilot.app)
        await pilot.press("end")
        await pilot.pause(0.1)
        seen["after"] = screen_text(pilot.app)

    run_app(build_app(RecordedSource([recorded_snapshot]), interval_s=0.2), scenario, size=NARROW)
    assert "more lines: Down PgDn" in seen["before"] and "PID" in seen["before"]
    assert "click a row" in seen["after"] and "back to the top" in seen["after"]


def test_the_sort_arrow_never_cuts_a_columns_name(recorded_snapshot):
    """contended▼, not contende…; S▼, not …"""
    cut = []

    async def scenario(pilot):
        main = pilot.app.main_screen
        for spec in PANES:
            await pilot.press(str(spec.number))
            pane = main.pane(spec.name)
            for _ in pane.VIEWS:
                table = pane.table
                for _ in table.table_columns:
                    table.cycle_sort(1)
                    await pilot.pause()
                    column = next(c for c in table.table_columns if c.key == table.sort_column)
                    head = "".join(seg.text for seg in table.render_line(0))
                    arrow = "▼" if table.sort_descending else "▲"
                    if f"{column.label}{arrow}" not in head:
                        cut.append((spec.name, pane.view, column.label, head.strip()))
                await pilot.press("v")

    run_app(build_app(RecordedSource([recorded_snapshot]), interval_s=0.2), scenario, size=NARROW)
    assert cut == []


def test_the_timelines_scales_read_in_human_units():
    assert format_scale(1.2e4, "ms/s") == "12s/s"  # was 1.2e+04ms/s
    assert format_scale(0.64, "ms") == "640us"
    assert format_scale(42.4, "%") == "42%"
    assert "e+" not in format_scale(3.4e7, "ms")


def test_every_pane_says_cumulative_after_c(recorded_snapshot):
    """c labelled the block pane "last 463s" while the others said "cumulative 463s"."""
    cumulative = replace(recorded_snapshot, cumulative=True, duration_s=463.0,
                         cpu=replace(recorded_snapshot.cpu, cumulative=True))
    seen = {}

    async def scenario(pilot):
        main = pilot.app.main_screen
        seen.update({spec.name: main.pane(spec.name)._subtitle for spec in PANES})

    run_app(build_app(RecordedSource([cumulative]), interval_s=0.2), scenario, size=(200, 60))
    for name in ("functions", "locks", "blockio"):
        assert "cumulative 463s" in seen[name] and "last" not in seen[name], (name, seen[name])


@pytest.mark.parametrize("size", [NARROW, (160, 50)])
def test_every_drill_down_title_is_one_line_of_whole_parts(recorded_snapshot, size):
    """The drill-down's title wrapped to a second line at 80 columns (a lock caller's max
    and avg, a process's I/O figures): it drops its least useful parts to fit, as the
    header does, and keeps what the screen is about."""
    from ktop.ui.screens.drill import DrillScreen

    snapshot = busy(recorded_snapshot)
    opened = {}
    drills = {"function": ("1",), "lock caller": ("2",), "lock address": ("2", "v"),
              "block I/O": ("3",), "waits": ("5",), "compared": ("1",)}

    async def scenario(pilot):
        app = pilot.app
        for name, keys in drills.items():
            if name == "compared":
                await pilot.press("b")
            await pilot.press(*keys)
            await pilot.pause()
            screen = await drill_into(pilot, DrillScreen)
            assert isinstance(screen, DrillScreen), name
            header = screen.header_widget()
            opened[name] = (type(screen).__name__, header.size.height, header.size.width,
                            screen.header().plain, screen.header_items(), screen_text(app))
            await pilot.press("escape")
            await pilot.pause()
            if name == "lock address":
                await pilot.press(*["v"] * 5)  # back to the callers view

    run_app(build_app(RecordedSource([snapshot]), interval_s=0.2), scenario, size=size)
    assert len({kind for kind, *_ in opened.values()}) == len(drills)  # six kinds of screen
    for name, (kind, height, width, line, items, text) in opened.items():
        where = f"{name} ({kind}) at {size[0]}"
        assert height == 1, f"{where}: the title takes {height} lines: {text[:300]}"
        assert len(line) <= width and line in text.splitlines()[0], where
        assert made_of_whole_items(line, items), f"{where}: {line!r}"
        assert line.startswith(items[0].text.plain), where  # what it is about, always
    if size[0] == 80:  # the least useful parts went, the figures that say most stayed
        line = opened["lock caller"][3]
        assert "waits in the last" in line and "total" in line and "avg" not in line, line
    else:  # room for every part
        assert "max" in opened["lock caller"][3] and "avg" in opened["lock caller"][3]
