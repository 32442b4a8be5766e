"""The processes pane: /proc read every refresh, a row per process (top's columns)."""
