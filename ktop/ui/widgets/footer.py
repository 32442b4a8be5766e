"""The footer: the keys the screen shows, as Textual's Footer lists them, but on one line
that drops whole keys when it is too narrow (the last listed first: each screen lists its
keys most useful first), never one cut mid-word (`z Zoo` at 80 columns)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.strip import Strip
from textual.widget import Widget

from ktop.ui.widgets.fit import MUST, Item, fit_items


class KeysFooter(Widget, can_focus=False):
    DEFAULT_CSS = """
    KeysFooter {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    KeysFooter > .keys-footer--key {
        color: $footer-key-foreground;
        background: $footer-key-background;
        text-style: bold;
    }
    KeysFooter > .keys-footer--description {
        color: $footer-description-foreground;
        background: $footer-description-background;
    }
    """
    COMPONENT_CLASSES = {"keys-footer--key", "keys-footer--description"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._keys: list[tuple[str, str, str]] = []  # (key to simulate, key shown, description)
        self._drawn: tuple | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen) -> None:
        keys = []
        seen: set[str] = set()
        for _node, binding, enabled, _tooltip in screen.active_bindings.values():
            if not isinstance(binding, Binding) or not binding.show or not enabled:
                continue
            if binding.action in seen:  # one entry per action, as Textual's Footer
                continue
            seen.add(binding.action)
            keys.append((binding.key.split(",")[0], self.app.get_key_display(binding),
                         binding.description))
        if keys != self._keys:
            self._keys = keys
            self.refresh()

    def keys_text(self, width: int | None = None) -> Text:
        """The keys that fit `width`: the first two (quit, help) always."""
        key_style = self.get_component_rich_style("keys-footer--key")
        description_style = self.get_component_rich_style("keys-footer--description")
        items = []
        for index, (_, shown, description) in enumerate(self._keys):
            text = Text(f" {shown} ", style=key_style)
            text.append(f"{description} ", style=description_style)
            items.append(Item(text, MUST if index < 2 else len(self._keys) - index, gap=""))
        return fit_items(items, width)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y:
            return Strip.blank(width, base)
        key = (tuple(self._keys), width, base)
        if self._drawn is None or self._drawn[0] != key:
            text = self.keys_text(width)
            strip = Strip(list(text.render(self.app.console))).apply_style(base)
            self._drawn = (key, strip.crop(0, width).adjust_cell_length(
                width, Style(bgcolor=base.bgcolor)))
        return self._drawn[1]

    def on_click(self, event: events.Click) -> None:
        """A click on a key presses it, as on Textual's Footer."""
        offset = event.get_content_offset(self)
        if offset is None:
            return
        shown = self.keys_text(self.size.width).plain
        start = 0
        for key, display, description in self._keys:
            label = f" {display} {description} "
            at = shown.find(label, start)
            if at < 0:
                continue
            if at <= offset.x < at + len(label):
                self.app.simulate_key(key)
                return
            start = at + len(label)
