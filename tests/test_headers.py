"""Kernel header discovery on fake /usr/src and /lib/modules trees built in tmp_path."""

from __future__ import annotations

import os
import platform
import time

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
    src, modules, cache = tmp_path / "src", tmp_path / "modules", tmp_path / "cache"
    for d in (src, modules):
        d.mkdir(mode=0o755)
    (tmp_path / "tmp").mkdir(mode=0o1777)
    return str(src), str(modules), str(cache)


def find(trees, release=RELEASE):
    src, modules, cache = trees
    return find_kernel_headers(release, modules_root=modules, src_root=src, cache_dir=cache,
                               legacy_dir=os.path.join(os.path.dirname(cache), "tmp"))


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


def test_the_merged_tree_is_built_once_in_the_cache_and_reused(trees):
    """Built anew in /tmp at each start, it was left there by every kill -9 (63 entries each,
    a dozen trees after a day)."""
    debian_headers(trees[0], "6.1.0-56")
    first = find(trees).source
    assert first.startswith(trees[2] + "/headers-" + RELEASE + "-")
    assert os.stat(trees[2]).st_mode & 0o777 == 0o700
    inode = os.lstat(first).st_ino
    again = find(trees).source
    assert again == first and os.lstat(again).st_ino == inode  # reused, not rebuilt
    assert os.listdir(trees[2]) == [os.path.basename(os.path.dirname(first))]


def test_a_cached_tree_changed_since_is_built_again(trees):
    common, _ = debian_headers(trees[0], "6.1.0-56")
    tree = find(trees).source
    os.unlink(os.path.join(tree, "Makefile"))
    os.symlink("/etc", os.path.join(tree, "Makefile"))
    assert find(trees).source == tree
    assert os.readlink(os.path.join(tree, "Makefile")) == os.path.join(common, "Makefile")


def test_a_new_headers_package_replaces_the_old_tree(trees):
    debian_headers(trees[0], "6.1.0-56")
    old = find(trees).source
    debian_headers(trees[0], "6.12.9")
    new = find(trees).source
    assert "6.12.9" in new and not os.path.exists(os.path.dirname(old))


@pytest.mark.parametrize("unsafe", ["symlink", "nobody", "0755"])
def test_a_cache_directory_not_private_to_root_is_not_used(trees, tmp_path, unsafe):
    debian_headers(trees[0], "6.1.0-56")
    cache = trees[2]
    if unsafe == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        os.symlink(tmp_path / "elsewhere", cache)
    else:
        os.mkdir(cache, 0o700)
        if unsafe == "nobody":
            os.chown(cache, NOBODY, NOBODY)
        else:
            os.chmod(cache, 0o755)
    source = find(trees).source
    assert not source.startswith(cache) and not os.listdir(tmp_path / "elsewhere"
                                                           if unsafe == "symlink" else cache)
    parent = os.lstat(os.path.dirname(source))
    assert parent.st_uid == 0 and parent.st_mode & 0o077 == 0  # a private one of its own


def test_trees_left_by_killed_ktops_are_removed(trees, tmp_path):
    debian_headers(trees[0], "6.1.0-56")
    os.mkdir(trees[2], 0o700)
    legacy = tmp_path / "tmp"
    old = time.time() - 3600
    left = [os.path.join(trees[2], ".building-dead"), str(legacy / "ktop-headers-dead")]
    fresh = str(legacy / "ktop-headers-starting")  # an older ktop compiling right now
    for path in [*left, fresh]:
        os.makedirs(os.path.join(path, "linux-headers-6.1.0-56-amd64"), 0o700)
        os.chmod(path, 0o700)
    for path in left:
        os.utime(path, (old, old))
    theirs = str(legacy / "ktop-headers-of-nobody")  # not root's: not ours to remove
    os.mkdir(theirs, 0o700)
    os.chown(theirs, NOBODY, NOBODY)
    os.utime(theirs, (old, old))
    find(trees)
    assert not any(os.path.exists(p) for p in left)
    assert os.path.exists(fresh) and os.path.exists(theirs)

