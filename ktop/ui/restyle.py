"""Component styles restyled in place.

Textual styles a widget's component classes (a table's header and cursor rows) through one
virtual DOMNode per class, and makes new ones at every restyle of the widget: each time a
pane gains or loses focus, for every table under it. Each virtual node is a full DOMNode held
in reference cycles, so the old ones waited for the collector's oldest generation, which ktop
runs rarely (bench/RESULTS.md: Garbage collection). Here each widget keeps its virtual nodes and they
are restyled in place; the widget is refreshed when a class's rules changed, as Textual does.
"""

from __future__ import annotations

from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode

_original = Stylesheet._process_component_classes
_NODES = "_ktop_component_nodes"  # on the widget: {component class: its virtual DOMNode}


def _rules(node: DOMNode) -> tuple[dict, dict]:
    styles = node.styles
    return dict(styles._base_styles._rules), dict(styles._inline_styles._rules)


def process_component_classes(self: Stylesheet, node: DOMNode) -> None:
    """Stylesheet._process_component_classes, with the virtual nodes kept per widget."""
    component_classes = node._get_component_classes()
    if not component_classes:
        return
    virtual: dict[str, DOMNode] = node.__dict__.setdefault(_NODES, {})
    styles = {}
    refresh_node = False
    for component in sorted(component_classes):
        virtual_node = virtual.get(component)
        if virtual_node is None:
            virtual_node = virtual[component] = DOMNode(classes=component)
            virtual_node._attach(node)
            before = None
        else:
            before = _rules(virtual_node)
        self.apply(virtual_node, animate=False)
        if before is None:
            refresh_node = refresh_node or node._component_styles.get(component) != virtual_node.styles
        elif not refresh_node:
            refresh_node = before != _rules(virtual_node)
        styles[component] = virtual_node.styles
    for gone in virtual.keys() - component_classes:
        del virtual[gone]
    node._component_styles.clear()
    node._component_styles.update(styles)
    if refresh_node:
        node.refresh()


def install() -> None:
    """Once, before the app's first restyle; Textual's own method stays where its internals
    differ from those this copy reads (a newer Textual)."""
    probe = DOMNode()
    if hasattr(probe.styles, "_base_styles") and hasattr(probe.styles._base_styles, "_rules"):
        Stylesheet._process_component_classes = process_component_classes  # type: ignore[method-assign]


def uninstall() -> None:
    Stylesheet._process_component_classes = _original  # type: ignore[method-assign]
