"""Find kernel headers bcc can compile against, even when none match the running kernel.

bcc looks for /lib/modules/$(uname -r)/build. When that is missing (a custom or cloud kernel),
the nearest Debian/Ubuntu `linux-headers-*` package still compiles our programs: their
tracepoint structs come from tracefs at run time, not from the headers. Debian splits a headers
package into `-common` (include/) and `-<flavor>` (generated files), so we merge the two into a
tree of symlinks and hand it to bcc as BCC_KERNEL_SOURCE.

The tree is built once, in a root-owned cache directory (0700, reached without a symlink),
named for the kernel release and a hash of the links it holds, and reused by every ktop
after: built anew in /tmp by each start, it was left behind by every kill -9. A tree found
there is checked link by link before it is used; a half-built one a killed ktop left is
removed by the next.
"""

from __future__ import annotations

import atexit
import os
import platform
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass

CACHE_DIR = "/var/cache/ktop"
_BUILDING = ".building-"  # a tree being built; one older than this a dead ktop left
STALE_BUILD_S = 60.0  # a build takes milliseconds
_LEGACY_PREFIX = "ktop-headers-"  # the per-start trees in /tmp of ktops before the cache
STALE_LEGACY_S = 600.0  # an older ktop compiles in its first minute, then needs it no more

_ARCH_FLAVOR = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "powerpc64le", "s390x": "s390x"}


class HeadersUnavailable(Exception):
    """No usable kernel headers; the message says how to fix it."""


@dataclass(frozen=True)
class KernelHeaders:
    source: str | None  # the tree to hand bcc as BCC_KERNEL_SOURCE; None: bcc finds it itself
    description: str  # for the header bar: which headers, and whether they match


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text)[:4])


def owned_by_root(path: str) -> bool:
    """Root-owned and writable by nobody else, for the path and each of its parents."""
    path = os.path.realpath(path)
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (
            st.st_mode & stat.S_ISVTX  # /tmp-like sticky dirs are fine as parents
        ):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _candidates(src_root: str) -> list[tuple[str, str | None]]:
    """(flavor dir, common dir or None) pairs under src_root for this machine's architecture."""
    try:
        names = sorted(os.listdir(src_root))
    except OSError:
        return []
    flavor = _ARCH_FLAVOR.get(platform.machine(), platform.machine())
    pairs = []
    for name in names:
        full = os.path.join(src_root, name)
        if not name.startswith("linux-headers-") or not os.path.isfile(os.path.join(full, ".config")):
            continue
        if not (name.endswith("-" + flavor) or name.endswith("-generic")):
            continue
        stem = name.rsplit("-", 1)[0]
        common = next(
            (os.path.join(src_root, c) for c in (stem + "-common", stem) if c in names and c != name),
            None,
        )
        if common or os.path.isdir(os.path.join(full, "include", "linux")):
            pairs.append((full, common))
    return pairs


def merge_plan(sources: list[str], at: str = "") -> list[tuple[str, str]]:
    """The merged tree as (relative path, link target; "" for a directory), parents first:
    entries present in several sources as directories are merged one level down."""
    entries: dict[str, list[str]] = {}
    for source in sources:
        for name in sorted(os.listdir(source)):
            entries.setdefault(name, []).append(os.path.join(source, name))
    plan = []
    for name, paths in sorted(entries.items()):
        path = os.path.join(at, name)
        if len(paths) > 1 and all(os.path.isdir(p) and not os.path.islink(p) for p in paths):
            plan.append((path, ""))
            plan += merge_plan(paths, path)
        else:
            plan.append((path, paths[-1]))
    return plan


def _build(plan: list[tuple[str, str]], target: str) -> None:
    os.mkdir(target, 0o755)
    for path, link in plan:
        if link:
            os.symlink(link, os.path.join(target, path))
        else:
            os.mkdir(os.path.join(target, path), 0o755)


def _holds(plan: list[tuple[str, str]], target: str) -> bool:
    """Whether the tree at target is exactly the plan, root's, nobody else's to change."""
    found = []
    try:
        for directory, names, files in os.walk(target):
            info = os.lstat(directory)
            if info.st_uid != 0 or info.st_mode & 0o022 or not stat.S_ISDIR(info.st_mode):
                return False
            relative = os.path.relpath(directory, target)
            for name in names + files:
                full = os.path.join(directory, name)
                path = os.path.normpath(os.path.join(relative, name))
                if os.path.islink(full):
                    if os.lstat(full).st_uid != 0:
                        return False
                    found.append((path, os.readlink(full)))
                elif os.path.isdir(full):
                    found.append((path, ""))
                else:
                    return False
            names[:] = [n for n in names if not os.path.islink(os.path.join(directory, n))]
    except OSError:
        return False
    return sorted(found) == sorted(plan)


def _private_dir(path: str) -> bool:
    """A directory (not a link to one) that root owns and only root may use, under parents
    root owns that nobody else may change (sticky ones aside)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
        return False
    parent = os.path.dirname(path.rstrip("/"))
    while True:
        try:
            info = os.lstat(parent)
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or (
            info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX
        ):
            return False
        if parent in ("/", ""):
            return True
        parent = os.path.dirname(parent)


def _cache(cache_dir: str) -> str | None:
    """The cache directory, made if missing; None when it is not private to root (or this
    is not root: ktop without root compiles nothing, and may still look)."""
    if os.geteuid() != 0:
        return None
    try:
        os.mkdir(cache_dir, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return cache_dir if _private_dir(cache_dir) else None


def _remove_stale(directory: str, prefix: str, keep: str = "", older_than: float = 0.0) -> None:
    """Trees under `directory` named prefix*, root's and private, left by ktops gone now."""
    now = time.time()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        full = os.path.join(directory, name)
        if not name.startswith(prefix) or name == keep:
            continue
        try:
            info = os.lstat(full)
        except OSError:
            continue
        if (stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o077
                and now - info.st_mtime >= older_than):
            shutil.rmtree(full, ignore_errors=True)


def merged_tree(sources: list[str], name: str, release: str, cache_dir: str = CACHE_DIR,
                legacy_dir: str | None = None) -> str:
    """The merged tree of `sources`, from the cache (built there the first time), or, when
    the cache directory is not private to root, in a private temporary one for this run."""
    import hashlib  # noqa: PLC0415  (imported late: see ktop.cli.without_openssl)

    plan = merge_plan(sources)
    key = hashlib.sha256(repr((release, sources, plan)).encode()).hexdigest()[:16]
    cache = _cache(cache_dir)
    # Those of earlier ktops, made at each start and left by a kill -9.
    _remove_stale(legacy_dir or tempfile.gettempdir(), _LEGACY_PREFIX, older_than=STALE_LEGACY_S)
    if cache is None:  # a private directory of this run's
        parent = tempfile.mkdtemp(prefix=_LEGACY_PREFIX)
        atexit.register(shutil.rmtree, parent, True)
        _build(plan, os.path.join(parent, name))
        return os.path.join(parent, name)
    entry = f"headers-{release}-{key}"
    final = os.path.join(cache, entry, name)
    if _holds(plan, final) and _private_dir(os.path.join(cache, entry)):
        return final
    _remove_stale(cache, _BUILDING, older_than=STALE_BUILD_S)
    try:
        building = tempfile.mkdtemp(prefix=_BUILDING, dir=cache)
    except OSError as e:
        raise HeadersUnavailable(f"cannot build the merged kernel headers in {cache}: "
                                 f"{e.strerror}") from None
    try:
        _build(plan, os.path.join(building, name))
        if os.path.lexists(os.path.join(cache, entry)) and not _holds(plan, final):
            shutil.rmtree(os.path.join(cache, entry), ignore_errors=True)  # damaged
        try:
            os.rename(building, os.path.join(cache, entry))
        except OSError:  # another ktop renamed its own first: the same tree
            pass
    finally:
        shutil.rmtree(building, ignore_errors=True)
    _remove_stale(cache, "headers-", keep=entry)  # an older package's
    if not _holds(plan, final):
        raise HeadersUnavailable(f"cannot build the merged kernel headers in {cache}: "
                                 f"remove {cache} and start again")
    return final


def find_kernel_headers(
    release: str | None = None,
    modules_root: str = "/lib/modules",
    src_root: str = "/usr/src",
    cache_dir: str = CACHE_DIR,
    legacy_dir: str | None = None,
) -> KernelHeaders:
    release = release or platform.release()
    exact = os.path.join(modules_root, release, "build")
    if os.path.isdir(os.path.join(exact, "include")):
        if not owned_by_root(exact):
            raise HeadersUnavailable(
                f"kernel headers at {exact} are not owned by root; fix their ownership"
            )
        return KernelHeaders(None, f"exact ({exact})")

    usable = [(f, c) for f, c in _candidates(src_root) if owned_by_root(f) and (not c or owned_by_root(c))]
    if not usable:
        raise HeadersUnavailable(
            f"no kernel headers for {release}: install linux-headers-{release} "
            "(or linux-headers-amd64 for the nearest Debian ones)"
        )
    want = _version_key(release)

    def distance(pair: tuple[str, str | None]) -> tuple[int, int]:
        have = _version_key(os.path.basename(pair[0])[len("linux-headers-"):])
        major_minor = abs((have[0] * 1000 + have[1]) - (want[0] * 1000 + want[1]))
        return major_minor, -have[2] if len(have) > 2 else 0

    flavor_dir, common_dir = min(usable, key=distance)
    name = os.path.basename(flavor_dir)
    if common_dir is None:
        return KernelHeaders(flavor_dir, f"{name} (nearest to {release})")

    # In a root-owned 0700 directory: nobody else can swap the tree under the compiler.
    merged = merged_tree([common_dir, flavor_dir], name, release, cache_dir, legacy_dir)
    return KernelHeaders(merged, f"{name} (nearest to {release})")
