"""Imports go one way: the kernel side never imports the engine or the UI, a pane's modules
never import another pane's, the descriptors (ktop.panedef, ktop.losses) import no pane,
and the modules below the wiring that still read the pane registry are the ones listed
here, no more (each is a circle through ktop.registry's lazy imports, to undo, not to grow).

Read from the source with ast: every import counts, at the top of a module, inside a
function or under TYPE_CHECKING alike (each ties the modules as much for a reader)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ktop"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str, top_level_only: bool = False) -> set[str]:
    """The ktop modules (and third-party top packages) `name` imports."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if not top_level_only else _top_level(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names
                      if f"{module}.{alias.name}" in MODULES}
    return {m for m in found if m != name and (m in MODULES or not m.startswith("ktop"))}


def _top_level(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        yield node
        if isinstance(node, ast.Try):
            yield from node.body


def importers_of(target: str) -> set[str]:
    return {name for name in MODULES if target in imports_of(name)}


def under(*prefixes: str) -> list[str]:
    return sorted(name for name in MODULES
                  if any(name == p or name.startswith(p + ".") for p in prefixes))


# The kernel side and the data: they know no engine, no registry of panes' widgets, no UI.
KERNEL_SIDE = under("ktop.collectors", "ktop.symbolize", "ktop.aggregate")


@pytest.mark.parametrize("name", KERNEL_SIDE)
def test_the_kernel_side_imports_no_engine_and_no_ui(name):
    imported = imports_of(name)
    assert "ktop.engine" not in imported, "a pane's build gets ktop.panedef.PaneServices"
    assert not {m for m in imported if m.split(".")[0] in ("textual", "rich")}
    assert not {m for m in imported if m.startswith(("ktop.ui", "ktop.cli", "ktop.compare"))}


def test_the_engine_is_imported_by_its_runners_alone():
    assert importers_of("ktop.engine") <= {
        "ktop.cli", "ktop.exports.serve", "ktop.record.session", "ktop.ui.app",
        "ktop.ui.headless", "ktop.ui.screens.main"}


def test_the_descriptors_import_no_pane():
    assert {m for m in imports_of("ktop.losses") if m.startswith("ktop")} == set()
    assert {m for m in imports_of("ktop.panedef") if m.startswith("ktop")} <= {
        "ktop.model", "ktop.symbolize.kernel"}  # types alone, under TYPE_CHECKING
    assert {m for m in imports_of("ktop.panedef", top_level_only=True)
            if m.startswith("ktop")} == set()


PANE_MODULES = {
    "functions": ["ktop.collectors.cpu", "ktop.aggregate.cpu", "ktop.ui.widgets.functions",
                  "ktop.ui.screens.function"],
    "locks": ["ktop.collectors.locks", "ktop.aggregate.locks", "ktop.ui.widgets.locks",
              "ktop.lockviews"],
    "waits": ["ktop.collectors.waits", "ktop.aggregate.waits", "ktop.ui.widgets.waits",
              "ktop.ui.screens.waits", "ktop.waitviews"],
}


def test_no_pane_imports_another():
    assert set(PANE_MODULES) == {"functions", "locks", "waits"}  # not yet in a folder
    modules_of = {pane: [*modules, *(m for m in MODULES if pane_folder_of(m) == pane)]
                  for pane, modules in PANE_MODULES.items()}
    for name in MODULES:  # the panes already in their folder (ktop/panes/<name>/)
        if pane_folder_of(name) and pane_folder_of(name) not in modules_of:
            modules_of[pane_folder_of(name)] = [name]
        elif pane_folder_of(name) and name not in modules_of[pane_folder_of(name)]:
            modules_of[pane_folder_of(name)].append(name)
    crossing = [(module, other) for pane, modules in modules_of.items() for module in modules
                for other_pane, others in modules_of.items() if other_pane != pane
                for other in imports_of(module) & set(others)]
    assert crossing == []


# Below the wiring, yet reading the registry (ktop.registry), which imports them back when a
# pane's part is used: today's list, which may shrink and must not grow.
REGISTRY_READERS_BELOW_THE_WIRING = {
    "ktop.aggregate.merge", "ktop.collectors.selfcost", "ktop.engine", "ktop.exports.folded",
    "ktop.exports.jsonfile", "ktop.exports.openmetrics", "ktop.exports.pprof",
    "ktop.record.dump", "ktop.record.fileformat",
}
WIRING_AND_ABOVE = {"ktop.cli", "ktop.compare", "ktop.config", "ktop.manpage", "ktop.registry"}


def test_no_new_module_below_the_wiring_reads_the_registry():
    below = {name for name in importers_of("ktop.registry")
             if name not in WIRING_AND_ABOVE and not name.startswith("ktop.ui")}
    assert below <= REGISTRY_READERS_BELOW_THE_WIRING, below - REGISTRY_READERS_BELOW_THE_WIRING


def test_python_imports_no_circle_at_module_level():
    """What runs at import time has no circle (the circles above are function-level)."""
    graph = {name: imports_of(name, top_level_only=True) & set(MODULES) for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path[path.index(name):], name))
        if name in done:
            return
        for imported in graph[name]:
            visit(imported, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def pane_folder_of(name: str) -> str | None:
    """`syscalls` for ktop.panes.syscalls.collector: the pane whose folder holds the module."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["ktop", "panes"] else None


def test_a_pane_folder_imports_no_other_pane():
    crossing = [(name, imported) for name in MODULES if pane_folder_of(name)
                for imported in imports_of(name)
                if pane_folder_of(imported) not in (None, pane_folder_of(name))]
    assert crossing == []


# The Snapshot frame holds each pane's profile, so it imports each pane's model (alone).
FRAME = "ktop.model"


def test_only_the_wiring_imports_a_pane_folder():
    """What all panes share never imports a pane; the registry lists them."""
    outside = {(name, imported) for name in MODULES if not pane_folder_of(name)
               for imported in imports_of(name) if pane_folder_of(imported)}
    assert {name for name, _ in outside} <= {"ktop.registry", FRAME}, outside
    assert {imported for name, imported in outside if name == FRAME} <= {
        m for m in MODULES if pane_folder_of(m) and m.endswith(".model")}


def test_the_rules_above_catch_a_crossing(monkeypatch):
    """An import of another pane's folder, and one from a shared module, are both seen."""
    real = imports_of

    def with_crossings(name: str, top_level_only: bool = False) -> set[str]:
        if name in ("ktop.panes.one.collector", "ktop.panes.other.model"):  # not on disk
            return {"ktop.panes.other.model"} if name.endswith("collector") else set()
        extra = {"ktop.panes.one.collector"} if name == "ktop.stacktree" else set()
        return real(name, top_level_only) | extra

    monkeypatch.setattr(f"{__name__}.imports_of", with_crossings)
    for fake in ("ktop.panes.one.collector", "ktop.panes.other.model"):
        monkeypatch.setitem(MODULES, fake, PACKAGE / "panes" / "absent.py")
    with pytest.raises(AssertionError):
        test_a_pane_folder_imports_no_other_pane()
    with pytest.raises(AssertionError):
        test_only_the_wiring_imports_a_pane_folder()
