"""The endings pane: signals sent and processes ended (who killed it, what died and why)."""
