"""Which panes show: --panes and --layout as a user types them, and the choice kept in
$XDG_CONFIG_HOME/ktop/ktop.conf, read as hostile input and written as root writes files."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from ktop import cli, config
from ktop.config import ChoiceError, ConfigError


def test_the_default_is_the_five_panes_that_fit_the_screen():
    assert config.default_panes() == ("functions", "locks", "blockio", "processes", "waits",
                                      "endings")
    # Every pane of the registry not in it shows once chosen; "all" holds every one.
    assert config.layout_panes("all") == config.pane_names()


def test_a_layout_names_only_panes_this_ktop_has():
    for name in config.LAYOUTS:
        assert set(config.layout_panes(name)) <= set(config.pane_names())
    assert "syscalls" in config.LAYOUTS["cpu"]  # kept for when that pane is registered
    with pytest.raises(ChoiceError, match="choose default, cpu, io, all"):
        config.layout_panes("fast")


def test_panes_keep_the_order_given_each_once():
    assert config.parse_panes("waits, functions,waits,") == ("waits", "functions")


@pytest.mark.parametrize("text", ["list", "functons", "", " , ", "functions,\x1b[2Jx"])
def test_a_bad_choice_is_one_line_naming_every_pane(text):
    with pytest.raises(ChoiceError) as caught:
        config.parse_panes(text)
    line = str(caught.value)
    assert "\n" not in line and "\x1b" not in line
    assert ",".join(config.pane_names()) in line and "default, cpu, io, all" in line


def test_the_file_is_found_where_xdg_says():
    assert config.config_path({"XDG_CONFIG_HOME": "/x/conf", "HOME": "/home/u"}) == \
        "/x/conf/ktop/ktop.conf"
    assert config.config_path({"HOME": "/home/u"}) == "/home/u/.config/ktop/ktop.conf"
    # A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    assert config.config_path({"XDG_CONFIG_HOME": "conf", "HOME": "/home/u"}) == \
        "/home/u/.config/ktop/ktop.conf"


def test_a_kept_choice_reads_back(tmp_path):
    path = str(tmp_path / "ktop" / "ktop.conf")
    config.write_config(path, ("waits", "functions"))
    assert config.read_config(path) == (("waits", "functions"), "")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "ktop").st_mode) == 0o700
    assert config.initial_choice(None, None, path) == (("waits", "functions"), "")
    # The command line wins over the file, for this run.
    assert config.initial_choice("locks", None, path) == (("locks",), "")
    assert config.initial_choice(None, "io", path)[0][0] == "blockio"


def test_no_file_is_the_default_without_a_word(tmp_path):
    assert config.initial_choice(None, None, str(tmp_path / "none.conf")) == \
        (config.default_panes(), "")


@pytest.mark.parametrize(("content", "said"), [
    (b"panes = functions,nope\n", "line 1: no pane 'nope'"),
    (b"# mine\ncolour = red\n", "line 2: unknown setting 'colour'"),
    (b"panes functions\n", "expected name = value"),
    (b"layout = fast\n", "no layout 'fast'"),
    (b"\xff\xfepanes\n", "not UTF-8"),
    (b"panes = functions\x1b]0;owned\x07\n", "no pane"),
    (b"panes = " + b"functions," * 1000, "longer than 4096 bytes"),
])
def test_a_bad_file_is_one_warning_and_the_default(tmp_path, content, said):
    path = tmp_path / "ktop.conf"
    path.write_bytes(content)
    panes, warning = config.initial_choice(None, None, str(path))
    assert panes == config.default_panes()
    assert said in warning and "using the default panes" in warning
    assert "\n" not in warning and "\x1b" not in warning and "\x07" not in warning


def test_a_link_or_a_fifo_is_not_read(tmp_path):
    real = tmp_path / "real.conf"
    real.write_text("panes = locks\n")
    link = tmp_path / "link.conf"
    link.symlink_to(real)
    assert config.read_config(str(link))[0] is None
    assert "symlink" in config.read_config(str(link))[1]
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)
    done = []
    reader = threading.Thread(target=lambda: done.append(config.read_config(str(fifo))),
                              daemon=True)
    reader.start()
    reader.join(5)
    assert done, "reading a FIFO blocked"
    assert done[0][0] is None and "FIFO" in done[0][1]


def test_a_link_is_never_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    (tmp_path / "ktop").mkdir()
    (tmp_path / "ktop" / "ktop.conf").symlink_to(target)
    with pytest.raises(ConfigError, match="symlink"):
        config.write_config(str(tmp_path / "ktop" / "ktop.conf"), ("locks",))
    assert target.read_text() == "precious\n"
    assert (tmp_path / "ktop" / "ktop.conf").is_symlink()


def test_a_fifo_is_never_replaced(tmp_path):
    (tmp_path / "ktop").mkdir()
    os.mkfifo(tmp_path / "ktop" / "ktop.conf")
    with pytest.raises(ConfigError, match="FIFO"):
        config.write_config(str(tmp_path / "ktop" / "ktop.conf"), ("locks",))
    assert stat.S_ISFIFO(os.lstat(tmp_path / "ktop" / "ktop.conf").st_mode)


def test_a_linked_directory_of_another_user_is_not_followed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to own a link as another user")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "conf").symlink_to(elsewhere)
    os.lchown(tmp_path / "conf", 65534, 65534)
    with pytest.raises(ConfigError, match="symlink owned by uid 65534"):
        config.write_config(str(tmp_path / "conf" / "ktop" / "ktop.conf"), ("locks",))
    assert not os.listdir(elsewhere)


def test_a_file_or_directory_another_user_owns_is_left_alone(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to make another user's file")
    theirs = tmp_path / "theirs" / "ktop"
    theirs.mkdir(parents=True)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ConfigError, match="directory is uid 65534's"):
        config.write_config(str(theirs / "ktop.conf"), ("locks",))
    assert not os.listdir(theirs)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "ktop.conf").write_text("panes = waits\n")
    os.chown(mine / "ktop.conf", 65534, 65534)
    with pytest.raises(ConfigError, match="the file is uid 65534's"):
        config.write_config(str(mine / "ktop.conf"), ("locks",))
    assert (mine / "ktop.conf").read_text() == "panes = waits\n"


# ---- the command line -----------------------------------------------------------------------


def test_panes_list_names_them_and_exits(capsys):
    with pytest.raises(SystemExit) as ended:
        cli.parse_args(["--panes", "list"])
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "functions,locks,blockio,processes,waits,endings" in out


@pytest.mark.parametrize(("argv", "said"), [
    (["--panes", "functons"], "--panes: no pane 'functons': the panes are functions,"),
    (["--layout", "fast"], "invalid choice"),
    (["--panes", "locks", "--layout", "io"], "give one"),
    (["--panes", "functions", "--snapshot", "x.folded", "--folded-of", "locks"],
     "--folded-of locks is the locks pane's, which --panes leaves out: add locks"),
    (["--layout", "cpu", "--snapshot", "x.pb.gz", "--pprof-of", "io"],
     "--pprof-of io is the blockio pane's, which --layout cpu leaves out"),
    (["--panes", "locks", "--snapshot", "x.svg", "--drill", "functions:vfs_read"],
     "--drill functions:... is the functions pane's"),
])
def test_a_bad_choice_on_the_command_line_is_one_line(capsys, argv, said):
    with pytest.raises(SystemExit) as ended:
        cli.parse_args(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert said in err[-1], err


def test_headless_runs_collect_what_is_named():
    args = cli.parse_args(["--snapshot", "x.json", "--panes", "waits,processes"])
    assert cli.headless_panes(args) == ("waits", "processes")
    assert cli._options(args).panes == frozenset({"waits"})
    # Without a choice: the default layout, never a user's file, and a pane an export names.
    args = cli.parse_args(["--snapshot", "x.folded", "--folded-of", "offcpu"])
    assert cli.headless_panes(args) == config.default_panes()
    args = cli.parse_args(["--record", "x.krec", "--layout", "io"])
    assert "functions" not in cli._options(args).panes
