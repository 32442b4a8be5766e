"""Kernel header discovery on fake /usr/src and /lib/modules trees built in tmp_path."""

from __future__ import annotations

import os
import platform

import pytest
from conftest import root_only

from ktop.collectors.headers import HeadersUnavailable, find_kernel_headers, owned_by_root

RELEASE = "6.18.44-fc-v445"  # a custom kernel with no matching headers package
FLAVOR = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
NOBODY = 65534

pytestmark = root_only  # the trees must be root-owned, and the refusal tests chown them away


def debian_headers(src: str, version: str) -> tuple[str, str]:
    """linux-headers-VERSION-common (include/) and -FLAVOR (generated files, .config)."""
    common = os.path.join(src, f"linux-headers-{version}-common")
    flavor = os.path.join(src, f"linux-headers-{version}-{FLAVOR}")
    files = {
        common: ["include/linux/sched.h", "arch/x86/include/asm/ptrace.h", "Makefile"],
        flavor: [
            ".config",
            "include/generated/autoconf.h",
            "include/config/auto.conf",
            "arch/x86/include/generated/asm/syscalls_64.h",
            "Module.symvers",
        ],
    }
    for tree, paths in files.items():
        for path in paths:
            full = os.path.join(tree, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(f"/* {os.path.basename(tree)} {path} */\n")
    return common, flavor


@pytest.fixture
def trees(tmp_path):
    src, modules, work = tmp_path / "src", tmp_path / "modules", tmp_path / "work"
    for d in (src, modules, work):
        d.mkdir(mode=0o755)
    return str(src), str(modules), str(work)


def find(trees, release=RELEASE):
    src, modules, work = trees
    return find_kernel_headers(release, modules_root=modules, src_root=src, work_dir=work)


def test_debian_split_is_merged_into_one_tree(trees):
    common, flavor = debian_headers(trees[0], "6.1.0-56")
    headers = find(trees)
    assert f"linux-headers-6.1.0-56-{FLAVOR}" in headers.description
    assert "nearest" in headers.description
    merged = headers.source
    # include/ and arch/x86/include/ exist in both halves: merged one level down.
    assert os.path.realpath(os.path.join(merged, "include/linux/sched.h")) == os.path.join(
        common, "include/linux/sched.h"
    )
    assert os.path.realpath(os.path.join(merged, "include/generated/autoconf.h")) == os.path.join(
        flavor, "include/generated/autoconf.h"
    )
    assert os.path.isfile(os.path.join(merged, "arch/x86/include/asm/ptrace.h"))
    assert os.path.isfile(os.path.join(merged, "arch/x86/include/generated/asm/syscalls_64.h"))
    assert os.path.isfile(os.path.join(merged, ".config"))
    assert os.path.isfile(os.path.join(merged, "Makefile"))
    # The originals are untouched: the merge is symlinks in a private directory.
    assert not os.path.islink(os.path.join(flavor, "include"))
    parent = os.stat(os.path.dirname(merged))
    assert parent.st_uid == 0 and parent.st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("release", "expected"),
    [("6.18.44-fc-v445", "6.12.9"), ("6.2.0-1-cloud", "6.1.0-56"), ("5.15.0-91-generic", "5.10.0-30")],
)
def test_nearest_version_is_chosen(trees, release, expected):
    for version in ("5.10.0-30", "6.1.0-56", "6.12.9"):
        debian_headers(trees[0], version)
    assert f"linux-headers-{expected}-{FLAVOR}" in find(trees, release).description


def test_other_architectures_headers_are_ignored(trees):
    debian_headers(trees[0], "6.1.0-56")
    other = os.path.join(trees[0], "linux-headers-6.17.1-riscv64")
    os.makedirs(os.path.join(other, "include/linux"))
    open(os.path.join(other, ".config"), "w").close()
    assert f"6.1.0-56-{FLAVOR}" in find(trees).description


def test_tree_not_owned_by_root_is_refused(trees):
    common, flavor = debian_headers(trees[0], "6.1.0-56")
    os.chown(common, NOBODY, NOBODY)
    with pytest.raises(HeadersUnavailable, match="install linux-headers"):
        find(trees)


def test_nearer_tree_owned_by_someone_else_loses_to_a_root_owned_one(trees):
    debian_headers(trees[0], "6.1.0-56")
    _, near_flavor = debian_headers(trees[0], "6.12.9")
    os.chown(near_flavor, NOBODY, NOBODY)
    assert f"6.1.0-56-{FLAVOR}" in find(trees).description


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_group_or_world_writable_tree_is_refused(trees, mode):
    common, _ = debian_headers(trees[0], "6.1.0-56")
    os.chmod(os.path.join(common, "include"), mode)
    assert not owned_by_root(os.path.join(common, "include"))
    os.chmod(common, mode)
    with pytest.raises(HeadersUnavailable):
        find(trees)


def test_world_writable_parent_without_sticky_bit_is_refused(trees):
    """Anyone who can rename entries in /usr/src can swap the tree under the compiler."""
    debian_headers(trees[0], "6.1.0-56")
    os.chmod(trees[0], 0o777)
    with pytest.raises(HeadersUnavailable):
        find(trees)


def test_symlink_to_a_user_owned_tree_is_refused(trees, tmp_path):
    user_tree = tmp_path / "home"
    user_tree.mkdir()
    common, flavor = debian_headers(str(user_tree), "6.1.0-56")
    os.chown(user_tree, NOBODY, NOBODY)
    for real in (common, flavor):
        os.symlink(real, os.path.join(trees[0], os.path.basename(real)))
    with pytest.raises(HeadersUnavailable):
        find(trees)


def test_exact_build_directory_is_preferred(trees):
    debian_headers(trees[0], "6.12.9")
    build = os.path.join(trees[1], RELEASE, "build")
    os.makedirs(os.path.join(build, "include/linux"))
    headers = find(trees)
    assert headers.source is None  # bcc finds /lib/modules/REL/build itself
    assert "exact" in headers.description and build in headers.description


def test_exact_build_as_a_symlink_into_usr_src_is_accepted(trees):
    _, flavor = debian_headers(trees[0], "6.12.9")
    os.makedirs(os.path.join(trees[1], RELEASE))
    os.symlink(flavor, os.path.join(trees[1], RELEASE, "build"))
    assert "exact" in find(trees).description


def test_exact_build_not_owned_by_root_is_refused(trees):
    build = os.path.join(trees[1], RELEASE, "build")
    os.makedirs(os.path.join(build, "include"))
    os.chown(build, NOBODY, NOBODY)
    with pytest.raises(HeadersUnavailable, match="not owned by root"):
        find(trees)


def test_no_headers_at_all_says_what_to_install(trees):
    with pytest.raises(HeadersUnavailable) as error:
        find(trees)
    message = str(error.value)
    assert "\n" not in message
    assert f"linux-headers-{RELEASE}" in message
