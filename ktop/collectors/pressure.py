"""Pressure stall information (PSI): the share of time some (or all) tasks stalled on the
CPU, I/O or memory, avg10 as /proc/pressure/{cpu,io,memory} say it for the machine, and a
cgroup v2's {cpu,io,memory}.pressure for its own tasks. Read with pread through descriptors
kept open; no root needed."""

from __future__ import annotations

import os

from ktop.collectors.procfiles import pread_record
from ktop.model import Pressure

RESOURCES = ("cpu", "io", "memory")
_MAX = 256


def parse_pressure(text: bytes) -> tuple[float, float | None]:
    """(some avg10, full avg10) of one pressure file; full is None where the kernel has none
    (the system-wide cpu file had no full line before Linux 5.13)."""
    some = full = None
    for line in text.decode(errors="replace").splitlines():
        kind, _, rest = line.partition(" ")
        for field in rest.split():
            name, _, value = field.partition("=")
            if name == "avg10":
                try:
                    number = float(value)
                except ValueError:
                    continue
                if kind == "some":
                    some = number
                elif kind == "full":
                    full = number
    if some is None:
        raise ValueError("no some avg10 line")
    return some, full


class PressureReader:
    def __init__(self, root: str = "/proc/pressure", suffix: str = "", cgroup: str = "") -> None:
        """Reads root/{cpu,io,memory}{suffix}; cgroup: the cgroup they are of ("" for the
        machine)."""
        self._root = root
        self._suffix = suffix
        self._cgroup = cgroup
        self._fds: dict[str, int] = {}
        self.error = ""  # why there is no pressure to show ("" when there is)

    @classmethod
    def of_cgroup(cls, path: str, mount: str) -> PressureReader:
        """A cgroup v2's own pressure: path as --cgroup resolves it ("/system.slice/x"),
        under the unified hierarchy's mount."""
        return cls(os.path.join(mount, path.lstrip("/")), ".pressure", cgroup=path)

    def read(self) -> Pressure | None:
        values: dict[str, tuple[float, float | None]] = {}
        for resource in RESOURCES:
            try:
                fd = self._fds.get(resource)
                if fd is None:
                    fd = self._fds[resource] = os.open(
                        os.path.join(self._root, resource + self._suffix), os.O_RDONLY | os.O_CLOEXEC)
                values[resource] = parse_pressure(pread_record(fd, _MAX))
            except (OSError, ValueError) as e:
                why = getattr(e, "strerror", None) or e
                self.error = (f"no PSI for cgroup {self._cgroup} ({why})" if self._cgroup
                              else f"no PSI ({why}): boot with psi=1")
                return None
        self.error = ""
        return Pressure(
            cpu_some=values["cpu"][0], cpu_full=values["cpu"][1],
            io_some=values["io"][0], io_full=values["io"][1],
            memory_some=values["memory"][0], memory_full=values["memory"][1],
        )

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
