"""Find kernel headers bcc can compile against, even when none match the running kernel.

bcc looks for /lib/modules/$(uname -r)/build. When that is missing (a custom or cloud kernel),
the nearest Debian/Ubuntu `linux-headers-*` package still compiles our programs: their
tracepoint structs come from tracefs at run time, not from the headers. Debian splits a headers
package into `-common` (include/) and `-<flavor>` (generated files), so we merge the two into a
private tree of symlinks and hand it to bcc as BCC_KERNEL_SOURCE.
"""

from __future__ import annotations

import atexit
import os
import platform
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass

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


def _merge_into(sources: list[str], target: str) -> None:
    """A tree of symlinks: entries present in several sources as directories are merged."""
    os.mkdir(target, 0o755)
    entries: dict[str, list[str]] = {}
    for source in sources:
        for name in os.listdir(source):
            entries.setdefault(name, []).append(os.path.join(source, name))
    for name, paths in entries.items():
        if len(paths) > 1 and all(os.path.isdir(p) and not os.path.islink(p) for p in paths):
            _merge_into(paths, os.path.join(target, name))
        else:
            os.symlink(paths[-1], os.path.join(target, name))


def find_kernel_headers(
    release: str | None = None,
    modules_root: str = "/lib/modules",
    src_root: str = "/usr/src",
    work_dir: str | None = None,
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

    # A private root-owned 0700 directory: nobody else can swap the tree under the compiler.
    parent = tempfile.mkdtemp(prefix="ktop-headers-", dir=work_dir)
    atexit.register(shutil.rmtree, parent, True)
    merged = os.path.join(parent, name)
    _merge_into([common_dir, flavor_dir], merged)
    return KernelHeaders(merged, f"{name} (nearest to {release})")
