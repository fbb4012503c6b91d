"""What each value of the ``allocator`` key means: the variables a worker command gets, the
library it preloads, and which allocator a process really runs under.

On the CPU much of the run-to-run spread of a step comes from the allocator, not the model:
glibc's malloc serves large blocks (activations, gradients, batches) with ``mmap`` and gives them
back with ``munmap`` on ``free``, so the same buffer is faulted in again at every step (measured:
62 to 31,705 minor page faults per step for identical code). Its *dynamic* mmap threshold makes
it worse: the threshold grows each time a mapped block is freed, so which blocks are refaulted
depends on the history of the process, and two identical runs differ. PyTorch's CPU
performance tuning guide advises preloading jemalloc or tcmalloc; every choice below other than
``system`` follows one rule: **memory freed during a run stays in the process and is reused**,
so a step faults in only what it touches for the first time (measured with
``benchmarks/allocator.py``, docs/benchmarks.md).

* ``system``: glibc as the parent's environment leaves it; no variable is set.
* ``glibc-tuned``: glibc with both thresholds fixed (:data:`GLIBC_TUNED`). Setting either one
  also switches off glibc's dynamic adjustment of both, which is the source of the spread.
* ``jemalloc``: Debian's ``libjemalloc2`` preloaded, purging off (:data:`JEMALLOC_CONF`).
* ``tcmalloc``: Debian's ``libtcmalloc-minimal4`` preloaded (the minimal build: no heap
  profiler, no libunwind), releasing off (:data:`TCMALLOC_ENV`).

A preloaded library is put in front of the parent's ``LD_PRELOAD``, never in its place.
Only the standard library is used: workers import this under any interpreter.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.contract.errors import UserError

INSTALL_HINT = "scripts/install-allocators.sh (or make allocators)"

GLIBC_TUNED = {
    "MALLOC_MMAP_THRESHOLD_": str(2**30),
    "MALLOC_TRIM_THRESHOLD_": str(2**32),
}
"""glibc's thresholds, fixed.

``MALLOC_MMAP_THRESHOLD_`` = 1 GiB: a block under it comes from the heap and is reused after
``free`` instead of being unmapped (glibc's default starts at 128 KiB and moves between that and
32 MiB with the history of the process). 1 GiB is above any activation, gradient or batch
buffer of the models here (ResNet-50 at batch 64 on 224 px: 205 MB for its largest activation),
so none of them is refaulted at every step; glibc 2.36 takes values above its dynamic maximum
from this variable (measured: a 256 MiB block freed and taken again 20 times costs its first
touch only, 3,277 faults per round instead of 65,537). A thread other than the main one still
maps a block above 64 MiB (its arena's heaps are that size); a step's tensors are allocated by
the thread that runs the step (the main one), the intra-op threads mostly fill them.
``MALLOC_TRIM_THRESHOLD_`` = 4 GiB: the free memory at the top of a heap is given back to the
system only beyond this, so a step's peak is not released between steps (glibc's default, 128
KiB, dynamically twice the mmap threshold, would trim it at each step's end). The process keeps
its peak footprint for the run, which a training loop reaches again at every step anyway.
``MALLOC_TOP_PAD_`` is left alone: padding saves ``brk`` calls, not faults (a page is faulted
in on its first touch wherever it comes from)."""

JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
"""jemalloc's ``MALLOC_CONF``: never purge (-1 disables decay-based purging). jemalloc keeps
freed pages for 10 s by default, but serves blocks above 8 MiB from its "huge" arena, which
purges them at once when the default decay is positive (measured: a 16 MiB block freed and taken
again costs 4,098 faults each time, as under glibc's defaults; with this setting 205, its first
touch spread over 20 rounds). Same rule as glibc-tuned: the process keeps its peak footprint."""

TCMALLOC_ENV = {"TCMALLOC_RELEASE_RATE": "0"}
"""gperftools' tcmalloc returns free spans to the system gradually (rate 1); 0 never does
(measured: a 256 MiB block freed and taken again costs 6,554 faults per round by default, 3,277,
its first touch only, with 0). Same rule as the others."""


@dataclass(frozen=True)
class Preloaded:
    """An allocator that is a shared library put in ``LD_PRELOAD``."""

    soname: str
    package: str
    """The Debian package that ships it (``scripts/install-allocators.sh`` installs it)."""
    family: str
    """The start of the file name of every build of it (``libtcmalloc`` also names the full
    and debug builds), as :func:`loaded_allocator` finds it mapped."""
    env: dict[str, str] = field(default_factory=dict)
    """Its own settings, set with the preload."""


PRELOADED = {
    "jemalloc": Preloaded(
        "libjemalloc.so.2", "libjemalloc2", "libjemalloc", {"MALLOC_CONF": JEMALLOC_CONF}
    ),
    "tcmalloc": Preloaded(
        "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4", "libtcmalloc", TCMALLOC_ENV
    ),
}


def library_dirs() -> list[Path]:
    """Where the dynamic loader's libraries are, this machine's multiarch directories first
    (Debian: ``/usr/lib/x86_64-linux-gnu``, ``/usr/lib/aarch64-linux-gnu``; Fedora:
    ``/usr/lib64``)."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [Path(root) / multiarch for root in ("/usr/lib", "/lib") if multiarch]
    dirs += [Path(d) for d in ("/usr/lib64", "/lib64", "/usr/lib", "/usr/local/lib")]
    return dirs


def library_path(name: str, dirs: Sequence[Path] | None = None) -> Path | None:
    """The library that ``name`` preloads, ``None`` for glibc's choices or when it is not
    installed. ``dirs``: where to look (default :func:`library_dirs`, then the loader's cache,
    ``ldconfig -p``, for a library installed elsewhere)."""
    preloaded = PRELOADED.get(name)
    if preloaded is None:
        return None
    for directory in library_dirs() if dirs is None else dirs:
        candidate = directory / preloaded.soname
        if candidate.is_file():
            return candidate
    return _from_loader_cache(preloaded.soname) if dirs is None else None


def _from_loader_cache(soname: str) -> Path | None:
    try:
        listing = subprocess.run(
            [shutil.which("ldconfig") or "/sbin/ldconfig", "-p"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listing.splitlines():
        found = re.match(rf"\s*{re.escape(soname)} \(([^)]*)\) => (\S+)$", line)
        # this machine's own ABI only (libc6,x86-64 and not a libc6 (i386) twin)
        if found and found.group(1) == _LOADER_ABI.get(os.uname().machine, found.group(1)):
            path = Path(found.group(2))
            if path.is_file():
                return path
    return None


_LOADER_ABI = {"x86_64": "libc6,x86-64", "aarch64": "libc6,AArch64", "ppc64le": "libc6,64bit"}
"""How ``ldconfig -p`` tags this machine's libraries (others: any tag is taken)."""


def missing_library(name: str) -> str | None:
    """One line saying what to install, when ``name`` needs a library that is not here."""
    preloaded = PRELOADED.get(name)
    if preloaded is None or library_path(name) is not None:
        return None
    return (
        f"allocator = {name} needs {preloaded.soname} (Debian package {preloaded.package}), "
        f"which is not installed; install it with {INSTALL_HINT}, or use "
        "--set allocator=system"
    )


def allocator_env(name: str, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a worker command gets for allocator ``name`` (on top of ``parent``, by
    default this process's environment, whose ``LD_PRELOAD`` is kept behind the library)."""
    if name == "system":
        return {}
    if name == "glibc-tuned":
        return dict(GLIBC_TUNED)
    if name not in PRELOADED:
        raise ValueError(f"unknown allocator {name!r}")  # RunConfig checks the choice first
    path = library_path(name)
    if path is None:
        raise UserError(missing_library(name) or name)
    parent = os.environ if parent is None else parent
    rest = [p for p in re.split(r"[:\s]+", parent.get("LD_PRELOAD", "")) if p and p != str(path)]
    return {"LD_PRELOAD": ":".join([str(path), *rest]), **PRELOADED[name].env}


def loaded_allocator() -> str:
    """Which allocator serves ``malloc`` in this process: ``jemalloc`` or ``tcmalloc`` when the
    library that defines the process's ``malloc`` is theirs (the mapping in ``/proc/self/maps``
    that holds its address), else ``glibc-tuned`` when glibc's thresholds are set as
    :data:`GLIBC_TUNED` sets them, else ``system``."""
    provider = _malloc_provider()
    for name, preloaded in PRELOADED.items():
        if provider is not None and provider.name.startswith(preloaded.family):
            return name
    if all(os.environ.get(key) == value for key, value in GLIBC_TUNED.items()):
        return "glibc-tuned"
    return "system"


def _malloc_provider() -> Path | None:
    """The file mapped where this process's ``malloc`` symbol resolves (``LD_PRELOAD`` first)."""
    try:
        address = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
        maps = Path("/proc/self/maps").read_text()
    except (OSError, AttributeError):  # no /proc (not Linux), no global malloc symbol
        return None
    if address is None:
        return None
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        start, _, end = parts[0].partition("-")
        if len(parts) == 6 and int(start, 16) <= address < int(end, 16):
            return Path(parts[5].strip())
    return None
