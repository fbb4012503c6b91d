"""What a result ran on: hardware, software and code version (house style 5)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dlscale.contract.layout import usable_cores
from dlscale.contract.version import __version__


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def memory_available_gib() -> float | None:
    """Memory a run started now can have: the kernel's estimate of what can be allocated
    without swapping (``MemAvailable``), or less where this process's memory cgroup (or one
    above it) leaves less under its limit; ``None`` where neither is known."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    cgroup = memory_cgroup()
    headroom = cgroup.headroom_bytes() if cgroup is not None else None
    if headroom is not None:
        available = headroom if available is None else min(available, headroom)
    return None if available is None else round(available / 2**30, 1)


@dataclass(frozen=True)
class MemoryCgroup:
    """This process's memory cgroup: cgroup v2 (``memory.events``, ``memory.max``) or v1's
    memory controller (``memory.oom_control``, ``memory.limit_in_bytes``)."""

    path: Path
    version: int
    top: Path
    """The mount point of the hierarchy: the limits above ``path`` are read up to it."""

    def oom_kills(self) -> int | None:
        """Processes of this cgroup (v2: and of those below it) killed by the kernel's OOM
        killer since the cgroup was made: the ``oom_kill`` counter; ``None`` where
        unreadable."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return counter(self.path / name, "oom_kill")

    def counter_name(self) -> str:
        return str(self.path / ("memory.events" if self.version == 2 else "memory.oom_control"))

    def headroom_bytes(self) -> int | None:
        """The least room left under a limit, of this cgroup and those above it (``None``:
        no limit)."""
        limit_name, usage_name = (
            ("memory.max", "memory.current")
            if self.version == 2
            else ("memory.limit_in_bytes", "memory.usage_in_bytes")
        )
        least = None
        directory = self.path
        while True:
            limit, usage = _read_int(directory / limit_name), _read_int(directory / usage_name)
            if limit is not None and limit < 2**60 and usage is not None:  # v1: 2^63 - page
                room = max(0, limit - usage)
                least = room if least is None else min(least, room)
            if directory == self.top or directory.parent == directory:
                return least
            directory = directory.parent


def counter(path: Path, key: str) -> int | None:
    """The value of ``key`` in a kernel file of ``key value`` lines (``/proc/vmstat``, a
    cgroup's ``memory.events``); ``None`` where unreadable or absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def memory_cgroup(proc: Path = Path("/proc/self")) -> MemoryCgroup | None:
    """The memory cgroup of the process ``proc`` describes, from its ``cgroup`` and
    ``mountinfo`` files: v1's memory controller where mounted, else v2's where its
    ``memory.events`` exists; ``None`` elsewhere (no cgroups, not Linux)."""
    try:
        groups = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    paths = {}
    for line in groups:  # "4:memory:/a/b" (v1), "0::/a/b" (v2)
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        for controller in controllers.split(",") if controllers else ["v2"]:
            paths[controller] = path
    found = []
    for line in mounts:  # "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory"
        fields, _, rest = line.partition(" - ")
        parts, kind = fields.split(), rest.split()
        if len(parts) < 5 or len(kind) < 3:
            continue
        root, point = parts[3], Path(parts[4].replace("\\040", " "))
        if kind[0] == "cgroup" and "memory" in kind[2].split(",") and "memory" in paths:
            found.append((1, root, point, paths["memory"]))
        elif kind[0] == "cgroup2" and "v2" in paths:
            found.append((2, root, point, paths["v2"]))
    for version, root, point, path in sorted(found):
        inside = path[len(root) :] if root != "/" and path.startswith(root) else path
        directory = point / inside.lstrip("/")
        if (directory / ("memory.oom_control" if version == 1 else "memory.events")).exists():
            return MemoryCgroup(path=directory, version=version, top=point)
    return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def git_commit() -> str | None:
    """Commit of the dlscale source tree (with ``+dirty`` if it has local changes); None
    where dlscale was not installed from a checkout (a wheel installed into a virtual
    environment inside some repository is not that repository's commit: its files are not
    tracked there)."""
    source = Path(__file__).resolve().parents[1]
    try:
        subprocess.run(
            ["git", "ls-files", "--error-unmatch", "--", "__init__.py"],
            cwd=source,
            capture_output=True,
            timeout=5,
            check=True,
        )
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty.strip() else "")


def framework_versions() -> dict[str, str]:
    """Installed versions, read from package metadata without importing anything."""
    from dlscale.contract.frameworks import recorded_packages

    versions = {}
    for name in recorded_packages():
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def host_environment() -> dict[str, Any]:
    """Framework-free facts about this machine and this dlscale."""
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_usable": usable_cores(),
        "memory_gib": memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "dlscale_version": __version__,
        "git_commit": git_commit(),
        "parent_packages": framework_versions(),
    }
