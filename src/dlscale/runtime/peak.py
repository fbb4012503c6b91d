"""The peak FLOP/s of one worker's device, MFU's denominator: measured on a CPU, read from the
datasheet table on a GPU (:mod:`dlscale.contract.gpu_peaks`), or set by the user
(``peak_tflops``); never guessed.

A CPU's peak is what numpy's matrix multiply (its BLAS) reaches with the worker's own thread
count: square matrices large enough to be compute bound, one warm-up call, then calls for about
half a second, the best call's rate. It is measured once per machine, thread count and type and
kept in ``peak/`` of dlscale's cache (``$DLSCALE_CACHE_DIR``, else ``$XDG_CACHE_HOME/dlscale``,
else ``~/.cache/dlscale``: :func:`dlscale.contract.weights_cache.cache_root`). In a run the
first training rank measures it; processes that need the same peak at once (the ranks of other
runs started on the node meanwhile) wait on a lock beside the file and read what it kept, or
measure in turn where it kept none. The machine may be busy all the same (another run
training, a build): the measurement reads the CPU time every CPU of the machine spent busy or
stolen around it, less this process's own, and where that outside load is more than a tenth of
the machine's cores over the measurement (:data:`OUTSIDE_SHARE`) the peak reads low: it is
kept marked as such, its basis saying it was ``measured on a busy machine``. A run that finds a
busy peak older than :data:`RETRY_BUSY_S` measures again and keeps the better of the two (a
quiet measurement replaces it for good); a newer one is used as it is, so that a machine kept
busy by a test suite does not measure at every run. Without /proc (not Linux) the load is not
known and the peak is kept. The cache never fails a run: a file that cannot be read or holds no
plausible rate (under 0.1 GFLOP/s, over :data:`~dlscale.contract.shapes.MAX_FLOPS`) is
measured again and replaced, a folder that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from dlscale.contract.errors import UserError
from dlscale.contract.files import read_small_file, write_atomic
from dlscale.contract.gpu_peaks import check_peak_tflops, datasheet_peak, no_peak_reason
from dlscale.contract.numbers import finite_number
from dlscale.contract.shapes import MAX_FLOPS
from dlscale.contract.text import excerpt
from dlscale.contract.weights_cache import cache_root
from dlscale.runtime.environment import cpu_model
from dlscale.runtime.load import machine_cpu

__all__ = [
    "CPU_DTYPES",
    "SOURCES",
    "CpuPeak",
    "Peak",
    "check_peak_tflops",
    "cpu_peak",
    "measure_cpu_peak",
    "measured_cpu_peak",
    "peak_cache_dir",
    "peak_of",
]

SOURCES = ("measured", "datasheet", "set")
CPU_DTYPES = {"fp32": np.float32, "fp64": np.float64}
"""The types a CPU's peak is measured for, and numpy's type of each."""
FORMAT = 1
"""Bumped when what a cache file holds or how it is measured changes: older files go unused."""
SECONDS = 0.5
MIN_FLOPS = 1e8
"""The lowest CPU peak taken as one (0.1 GFLOP/s): a file with less is damaged."""
OUTSIDE_SHARE = 0.1
"""The share of the machine's CPU time (cores x the measurement's wall time) other processes may
use while a peak is measured before it counts as measured on a busy machine."""
MIN_JUDGED_S = 0.2
"""The shortest measurement whose outside load is judged: /proc/stat counts in clock ticks, too
coarse for less (a real measurement takes :data:`SECONDS` and more)."""
BUSY = ", measured on a busy machine"
RETRY_BUSY_S = 600.0
"""How old a peak measured on a busy machine may be before a run measures it again."""
FIX = "set its dense peak per device with --set peak_tflops=..."


@dataclass(frozen=True)
class Peak:
    """One worker's device's peak: ``flops_s`` in FLOP/s, the ``basis`` printed beside MFU
    (``of measured fp32 matmul peak, 4 threads``), and its ``source`` (:data:`SOURCES`)."""

    flops_s: float
    basis: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"flops_s": self.flops_s, "basis": self.basis, "source": self.source}

    @classmethod
    def from_dict(cls, data: object) -> Peak | None:
        """The peak a stored dict holds; ``None`` for one that is not a peak (a missing rate, one
        outside 0.1 GFLOP/s to :data:`~dlscale.contract.shapes.MAX_FLOPS`, a basis that is not
        text, an unknown source). A ``set`` peak may be lower, down to any positive rate, as
        :func:`check_peak_tflops` takes the user's."""
        if not isinstance(data, dict):
            return None
        flops, basis, source = data.get("flops_s"), data.get("basis"), data.get("source")
        if source not in SOURCES or not isinstance(basis, str):
            return None
        low = math.ulp(0.0) if source == "set" else MIN_FLOPS
        if not finite_number(flops, low, MAX_FLOPS):
            return None
        return cls(flops_s=float(flops), basis=basis, source=str(source))


def _plausible(flops: object) -> TypeGuard[float]:
    """Whether ``flops`` is a number a device's peak can be: 0.1 GFLOP/s to a zettaFLOP/s."""
    return finite_number(flops, MIN_FLOPS, MAX_FLOPS)


def _threads_words(threads: int) -> str:
    return f"{threads} thread{'' if threads == 1 else 's'}"


def matrix_size(threads: int) -> int:
    """The side of the square matrices measured with ``threads`` threads: 1024 for one, up to
    2048 for more (each thread's share of a product stays compute bound)."""
    return 1024 if threads <= 1 else 1536 if threads <= 4 else 2048


def measure_cpu_peak(
    threads: int, dtype: str = "fp32", seconds: float = SECONDS, n: int | None = None
) -> float:
    """The best rate in FLOP/s of numpy's ``n`` x ``n`` matrix multiply (``2 n^3`` FLOPs a
    call; ``n``: :func:`matrix_size`) in ``dtype`` (``fp32``, ``fp64``) with the BLAS limited
    to ``threads`` threads: one warm-up call, then calls for about ``seconds`` (two at least).
    ``ValueError`` for another type or fewer than 1 thread."""
    from threadpoolctl import threadpool_limits

    if dtype not in CPU_DTYPES:
        raise ValueError(f"a CPU peak is measured for {', '.join(CPU_DTYPES)}, not {dtype!r}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    size = n or matrix_size(threads)
    generator = np.random.default_rng(0)
    a = generator.standard_normal((size, size)).astype(CPU_DTYPES[dtype])
    b = generator.standard_normal((size, size)).astype(CPU_DTYPES[dtype])
    out = np.empty_like(a)
    flops = 2.0 * size**3
    best = 0.0
    with threadpool_limits(limits=threads):
        np.matmul(a, b, out=out)  # warm-up: the BLAS's threads started, pages touched
        end = time.perf_counter() + seconds
        calls = 0
        while calls < 2 or time.perf_counter() < end:
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            took = time.perf_counter() - start
            if took > 0:
                best = max(best, flops / took)
            calls += 1
    return best


def peak_cache_dir(cache_dir: Path | None = None) -> Path | None:
    """Where CPU peaks are kept: ``cache_dir`` or dlscale's cache, then ``peak/``; ``None``
    where the cache is turned off (``DLSCALE_CACHE_DIR=``) or there is no home to hold it."""
    root = cache_dir if cache_dir is not None else cache_root()
    return None if root is None else root / "peak"


@dataclass(frozen=True)
class CpuPeak:
    """A CPU peak and where it came from: ``measured_at`` (ISO 8601, local time), ``cached``
    (read from ``path`` rather than measured by this call), ``path`` (``None``: not kept),
    ``busy`` (other processes loaded the machine as it was measured: not kept)."""

    flops_s: float
    threads: int
    dtype: str
    measured_at: str
    cached: bool
    path: Path | None
    busy: bool = False
    measured_s: float | None = None
    """When it was measured (seconds since the epoch; ``None`` in a file without it)."""

    def stale(self) -> bool:
        """A busy peak old enough to measure again (:data:`RETRY_BUSY_S`)."""
        age = None if self.measured_s is None else time.time() - self.measured_s
        return self.busy and (age is None or age > RETRY_BUSY_S)

    def peak(self) -> Peak:
        basis = f"of measured {self.dtype} matmul peak, {_threads_words(self.threads)}"
        if self.busy:
            basis += BUSY
        return Peak(flops_s=self.flops_s, basis=basis, source="measured")


def _machine(threads: int, dtype: str) -> dict[str, Any]:
    """What a kept peak is a peak of: its file's name is a digest of these."""
    return {"format": FORMAT, "cpu_model": cpu_model(), "hostname": socket.gethostname(),
            "threads": threads, "dtype": dtype, "numpy": np.__version__}  # fmt: skip


def _read(path: Path, machine: dict[str, Any]) -> CpuPeak | None:
    """The peak kept at ``path`` when it is whole and of ``machine``; ``None`` otherwise
    (missing, unreadable, damaged or no plausible rate, another machine's)."""
    try:
        record = json.loads(read_small_file(path))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in machine.items()):
        return None
    flops, measured_at = record.get("flops_s"), record.get("measured_at")
    if not _plausible(flops) or not isinstance(measured_at, str):
        return None
    busy = record.get("busy") is True
    return CpuPeak(float(flops), machine["threads"], machine["dtype"], measured_at, True, path,
                   busy, _number(record.get("measured_s")))  # fmt: skip


def _number(value: Any) -> float | None:
    return float(value) if finite_number(value) and not isinstance(value, bool) else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """Hold an exclusive lock on ``path`` (made if missing, never through a link) for the
    block; yields False, holding nothing, where it cannot be made or locked (a read-only
    folder, a file system without locks): the block then runs unguarded."""
    fd = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock


def measured_cpu_peak(
    threads: int, dtype: str = "fp32", cache_dir: Path | None = None, *, fresh: bool = False
) -> CpuPeak:
    """The CPU peak with ``threads`` threads in ``dtype`` (:func:`measure_cpu_peak`): read from
    the cache where this machine's is kept (unless ``fresh``), else measured, one process of
    the machine at a time, and kept (see the module's docstring)."""
    folder = peak_cache_dir(cache_dir)
    machine = _machine(threads, dtype)
    if folder is None:
        return _measure(machine, None)
    key = hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()[:24]
    path = folder / f"{dtype}-{threads}t-{key}.json"
    if not fresh and (kept := _read(path, machine)) is not None and not kept.stale():
        return kept
    with _locked(folder / f"{path.stem}.lock"):
        kept = None if fresh else _read(path, machine)
        if kept is not None and not kept.stale():  # measured while we waited
            return kept
        return _measure(machine, path, kept)


def _measure(
    machine: dict[str, Any], path: Path | None, busy_before: CpuPeak | None = None
) -> CpuPeak:
    """Measure ``machine``'s peak and keep it at ``path`` where it can be written, marked where
    the machine was busy meanwhile (:func:`_busy`); measured busy again, the better of it and
    ``busy_before`` (the busy peak kept before) is kept."""
    before = machine_cpu(), time.process_time(), time.perf_counter()
    flops = measure_cpu_peak(machine["threads"], machine["dtype"])
    after = machine_cpu(), time.process_time(), time.perf_counter()
    busy = _busy(before, after)
    if busy and busy_before is not None and busy_before.busy:
        flops = max(flops, busy_before.flops_s)
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record = {**machine, "flops_s": flops, "measured_at": measured_at,
              "measured_s": time.time(), "busy": busy,
              "seconds": round(after[2] - before[2], 3),
              "n": matrix_size(machine["threads"])}  # fmt: skip
    kept = None
    if path is not None:
        try:
            write_atomic(path, json.dumps(record, indent=1) + "\n")
            kept = path
        except UserError:  # a read-only or full folder, a link there (OutputError): not kept
            kept = None
    return CpuPeak(flops, machine["threads"], machine["dtype"], measured_at, False, kept, busy,
                   record["measured_s"])  # fmt: skip


Sample = tuple[tuple[float, float] | None, float, float]
"""The machine's ``(busy_s, steal_s)`` (:func:`~dlscale.runtime.load.machine_cpu`), this
process's CPU seconds and the wall clock, read on one side of a measurement."""


def _busy(before: Sample, after: Sample) -> bool:
    """Whether other processes used more than :data:`OUTSIDE_SHARE` of the machine's CPU time
    between ``before`` and ``after``: its busy and stolen CPU seconds less this process's own,
    against its cores times the wall time (plus a clock tick a core, /proc/stat's grain).
    False where /proc/stat cannot be read or the window is too short to judge."""
    (machine_0, own_0, wall_0), (machine_1, own_1, wall_1) = before, after
    wall = wall_1 - wall_0
    if machine_0 is None or machine_1 is None or wall < MIN_JUDGED_S:
        return False
    outside = (machine_1[0] - machine_0[0]) + (machine_1[1] - machine_0[1]) - (own_1 - own_0)
    cores = os.cpu_count() or 1
    return outside > OUTSIDE_SHARE * cores * wall + cores * _TICK_S


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def cpu_peak(threads: int, dtype: str = "fp32", cache_dir: Path | None = None) -> Peak:
    """The CPU's measured matmul peak with ``threads`` threads, as MFU reads it (cached:
    :func:`measured_cpu_peak`)."""
    return measured_cpu_peak(threads, dtype, cache_dir).peak()


def peak_of(
    device: str, gpu_names: list[str], threads: int, dtype: str, peak_tflops: float | None
) -> tuple[Peak | None, str | None]:
    """The peak of one worker's device, and why there is none where there is none (one line
    naming the key that sets it): ``peak_tflops`` where the user set it; on ``cuda`` the
    datasheet figure of the first GPU the worker sees, by its exact name; on ``cpu`` the
    measured matmul peak with the worker's ``threads`` (``fp32``, ``fp64`` only)."""
    if peak_tflops is not None:
        tflops = check_peak_tflops(peak_tflops)
        return Peak(tflops * 1e12, f"of peak_tflops = {tflops:g} set by the user", "set"), None
    if device == "cuda":
        if not gpu_names:
            return None, f"no MFU: the worker named no GPU to look up; {FIX}"
        name = gpu_names[0].strip()
        flops = datasheet_peak(name, dtype)
        if flops is None:
            return None, no_peak_reason(name, dtype)
        return Peak(flops, f"of datasheet {dtype} dense peak ({name})", "datasheet"), None
    if device == "cpu":
        if dtype not in CPU_DTYPES:
            return None, (
                f"no MFU: a CPU peak is measured for fp32 and fp64 only, not {excerpt(dtype)} "
                f'(docs/metrics.md, "MFU"); {FIX}'
            )
        return cpu_peak(threads, dtype), None
    return None, f"no MFU: no peak is known for device {excerpt(device)}; {FIX}"
