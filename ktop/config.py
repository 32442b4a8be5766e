"""Which panes show: `--panes LIST`, `--layout NAME` (btop's presets), and the choice kept
across restarts in $XDG_CONFIG_HOME/ktop/ktop.conf (~/.config/ktop/ktop.conf).

A pane not chosen costs nothing: the engine loads the BPF programs of the chosen panes
only (engine.Options.panes), the screen mounts their widgets only.

The file is ktop's own, one `name = value` a line, `#` comments:

    # ktop's settings: written by ktop (key p); one "name = value" a line.
    panes = functions,locks,blockio,processes,waits

It is read as hostile input (another user's HOME under sudo -E, an editor's mistake): at
most MAX_CONFIG bytes of a regular file, never through a link in its last component;
anything wrong in it is one warning line, and the default choice. It is written as
ktop writes every file as root (ktop.safefs): no link followed that another user could
have planted, never over a file that is not regular, never into a directory or over a file
another user owns, atomically (a new file renamed over the old one).

Nothing here imports Textual or a collector.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Iterable, Mapping, Sequence

from ktop import safefs
from ktop.registry import PANES
from ktop.text import printable

MAX_CONFIG = 4096  # bytes: a few lines; a bigger file is not ktop's
CONFIG_NAME = "ktop.conf"

# btop's presets: a few named layouts, each a list of panes in screen order. Names the
# registry does not hold (a pane not built yet) are left out when the layout is used.
# The default is what fits a 160x50 screen two a row: the five first panes; a new pane
# shows once chosen (--panes, p, or a layout naming it).
LAYOUTS: dict[str, tuple[str, ...]] = {
    "default": ("functions", "locks", "blockio", "processes", "waits", "endings"),
    # Where CPU time goes: on the CPU, in syscalls, and off it.
    "cpu": ("functions", "processes", "syscalls", "waits"),
    # Who does I/O and who waits for it.
    "io": ("blockio", "processes", "waits", "syscalls"),
    "all": (),  # every pane, in the registry's order
}
DEFAULT_LAYOUT = "default"


class ChoiceError(Exception):
    """A choice of panes that cannot be made; str() is one line naming what exists."""


def pane_names() -> tuple[str, ...]:
    """Every pane the registry holds, in its order."""
    return tuple(spec.name for spec in PANES)


def layout_panes(name: str) -> tuple[str, ...]:
    """The panes of a named layout that the registry holds, in the layout's order."""
    if name not in LAYOUTS:
        raise ChoiceError(f"no layout {printable(repr(name))}: choose "
                          f"{', '.join(LAYOUTS)}")
    names = LAYOUTS[name] or pane_names()
    known = set(pane_names())
    return tuple(n for n in names if n in known)


def default_panes() -> tuple[str, ...]:
    return layout_panes(DEFAULT_LAYOUT)


def exists_line() -> str:
    """The panes and layouts there are, as an error line ends."""
    return (f"the panes are {','.join(pane_names())}; the layouts "
            f"{', '.join(LAYOUTS)}")


def parse_panes(text: str) -> tuple[str, ...]:
    """`functions,waits,syscalls` -> the names, in the order given, each once. Raises
    ChoiceError naming every pane there is (for `list` too)."""
    if text.strip() == "list":
        raise ChoiceError(exists_line())
    names: list[str] = []
    known = pane_names()
    for part in text.split(","):
        name = part.strip()
        if not name:
            continue
        if name not in known:
            raise ChoiceError(f"no pane {printable(repr(name))}: {exists_line()}")
        if name not in names:
            names.append(name)
    if not names:
        raise ChoiceError(f"no pane named: {exists_line()}")
    return tuple(names)


def bpf_names(names: Iterable[str]) -> frozenset[str]:
    """Of the chosen panes, those the engine loads a BPF program for."""
    chosen = set(names)
    return frozenset(spec.name for spec in PANES if spec.build is not None and spec.name in chosen)


def ordered(names: Iterable[str]) -> list:
    """The PaneDefs of the names, in the names' order."""
    by_name = {spec.name: spec for spec in PANES}
    return [by_name[n] for n in names if n in by_name]


# ---- where the file is --------------------------------------------------------------------


def config_path(environ: Mapping[str, str] | None = None) -> str | None:
    """$XDG_CONFIG_HOME/ktop/ktop.conf, or ~/.config/ktop/ktop.conf (the XDG spec ignores a
    relative XDG_CONFIG_HOME); None when no home is known."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    if not base.startswith("/"):
        home = env.get("HOME", "")
        if not home.startswith("/"):
            try:
                home = pwd.getpwuid(os.geteuid()).pw_dir
            except KeyError:
                return None
            if not home.startswith("/"):
                return None
        base = os.path.join(home, ".config")
    return os.path.join(base, "ktop", CONFIG_NAME)


# ---- reading ------------------------------------------------------------------------------


def read_config(path: str | None) -> tuple[tuple[str, ...] | None, str]:
    """(the panes the file chose, or None for none there; a warning line, or "").
    A missing file is no warning; anything wrong in one is, and gives None (the default)."""
    if path is None:
        return None, ""
    shown = printable(path)
    try:
        fd = safefs.open_regular(path)
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        why = "a symlink (ktop reads no link there)" if e.errno == errno.ELOOP else (
            printable(e.strerror or str(e)))
        return None, f"{shown}: {why}; using the default panes"
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_CONFIG + 1)
    except OSError as e:
        return None, f"{shown}: {printable(e.strerror or str(e))}; using the default panes"
    if len(data) > MAX_CONFIG:
        return None, (f"{shown}: longer than {MAX_CONFIG} bytes, not ktop's; using the "
                      "default panes")
    try:
        return parse_config(data.decode("utf-8")), ""
    except UnicodeDecodeError:
        return None, f"{shown}: not UTF-8 text; using the default panes"
    except ChoiceError as e:
        return None, f"{shown}: {e}; using the default panes"


def parse_config(text: str) -> tuple[str, ...] | None:
    """The panes a config file's text chooses (`panes = ...` or `layout = ...`), None if it
    chooses none. ChoiceError for anything ktop did not write (one line, its line number)."""
    chosen: tuple[str, ...] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        try:
            if not sep:
                raise ChoiceError("expected name = value")
            if key == "panes":
                chosen = parse_panes(value)
            elif key == "layout":
                chosen = layout_panes(value)
                if not chosen:
                    raise ChoiceError(f"layout {value} has no pane in this ktop")
            else:
                raise ChoiceError(f"unknown setting {printable(repr(key[:40]))} "
                                  "(ktop writes panes = ...)")
        except ChoiceError as e:
            raise ChoiceError(f"line {number}: {e}") from None
    return chosen


# ---- writing ------------------------------------------------------------------------------


class ConfigError(Exception):
    """The choice could not be kept; str() is one line naming the problem and the fix."""


def render_config(names: Sequence[str]) -> str:
    return ("# ktop's settings: written by ktop (key p); one \"name = value\" a line.\n"
            f"panes = {','.join(names)}\n")


def _open_or_make(directory: str, made: int = 0) -> int:
    """The directory's O_PATH descriptor (ktop.safefs), made 0700 with its missing parents
    (a few levels at most) if it does not exist."""
    try:
        return safefs.open_directory(directory)
    except FileNotFoundError:
        if made >= 3 or directory in ("/", ""):
            raise
    parent, name = safefs.split(directory.rstrip("/"))
    parent_fd = _open_or_make(parent, made + 1)
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass  # made meanwhile: opened below, with the same checks
        return safefs.open_directory(directory)
    finally:
        os.close(parent_fd)


def write_config(path: str | None, names: Sequence[str]) -> None:
    """Keep the choice in the file: atomically, never through a planted link, never over a
    file that is not regular, never into a directory or over a file another user owns.
    Raises ConfigError (one line)."""
    if path is None:
        raise ConfigError("no home directory to keep the choice in: set XDG_CONFIG_HOME")
    shown = printable(path)
    directory, name = safefs.split(path)
    me = os.geteuid()
    try:
        dir_fd = _open_or_make(directory)
    except safefs.UnsafePath as e:
        raise ConfigError(f"cannot keep the panes in {shown}: {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot keep the panes in {shown}: "
                          f"{printable(e.filename or directory)}: {e.strerror}") from None
    temporary = ""
    try:
        owner = os.fstat(dir_fd).st_uid
        if owner != me:
            raise ConfigError(f"cannot keep the panes in {shown}: its directory is uid "
                              f"{owner}'s, not this user's ({me}); set XDG_CONFIG_HOME to "
                              "a directory of your own")
        try:
            existing = safefs.check_target(dir_fd, name)
        except safefs.UnsafePath as e:
            raise ConfigError(f"cannot keep the panes in {shown}: {e}") from None
        if existing is not None and existing.st_uid != me:
            raise ConfigError(f"cannot keep the panes in {shown}: the file is uid "
                              f"{existing.st_uid}'s, not this user's ({me})")
        mode = stat.S_IMODE(existing.st_mode) & 0o644 if existing is not None else 0o644
        fd, temporary = safefs.create_temporary(dir_fd, ".ktop.conf-", mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render_config(names))
            f.flush()
            os.fsync(f.fileno())
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        temporary = ""
    except OSError as e:
        raise ConfigError(f"cannot keep the panes in {shown}: {printable(e.strerror or str(e))}"
                          ) from None
    finally:
        if temporary:
            try:
                os.unlink(temporary, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(dir_fd)


def initial_choice(panes: str | None, layout: str | None,
                   path: str | None) -> tuple[tuple[str, ...], str]:
    """(the panes to show, a warning about the config file or ""): --panes, else --layout,
    else the file's choice, else the default. ChoiceError for a bad --panes or --layout."""
    if panes is not None:
        return parse_panes(panes), ""
    if layout is not None:
        chosen = layout_panes(layout)
        if not chosen:
            raise ChoiceError(f"layout {layout} has no pane in this ktop: {exists_line()}")
        return chosen, ""
    kept, warning = read_config(path)
    return kept or default_panes(), warning
