"""The Textual UI: the app, its screens and widgets, and the headless pictures (--snapshot)."""
