"""What a result ran on: hardware, software and code version (house style 5)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import dlscale

FRAMEWORKS = ("torch", "horovod", "tensorflow", "tensorflow-cpu", "mxnet", "numpy")


def usable_cores() -> int:
    """Cores this process may run on (affinity-aware, so containers and Slurm are right)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


def git_commit() -> str | None:
    """Commit of the dlscale source tree (with ``+dirty`` if it has local changes)."""
    source = Path(dlscale.__file__).resolve().parent
    try:
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
    versions = {}
    for name in FRAMEWORKS:
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
        "dlscale_version": dlscale.__version__,
        "git_commit": git_commit(),
        "parent_packages": framework_versions(),
    }
