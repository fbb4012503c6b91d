"""The noise guard of one run (docs/metrics.md, "Noise guard"): which windows ran under outside
load, what leaving them out did to the run's throughput, and whether the exposed-communication
probe ran on a loaded machine.

A window is *loaded* when other processes used more than :data:`OUTSIDE_LOAD_LIMIT` of the
machine's CPU time during it, or the hypervisor stole more than :data:`STEAL_LIMIT`; the counters
are read by the first training rank around each window (:mod:`dlscale.runtime.load`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dlscale.contract.records import Window

OUTSIDE_LOAD_LIMIT = 0.10
"""A window is *loaded* when other processes used more than this share of the machine's CPU
time during it (docs/metrics.md, "Noise guard")."""
STEAL_LIMIT = 0.05
"""... or when the hypervisor stole more than this share of it."""


WAIT_LIMIT = 0.10
"""A run's processes *waited* when, in some window the run's figures use, one training
process's threads waited for a CPU more than this share of the window's seconds (the kernel's
run delay: docs/metrics.md, "Noise guard")."""


def window_wait(parts: list[Window]) -> float | None:
    """The largest share of a merged window's seconds that one rank's threads waited for a
    CPU: each rank's run delay over its own window time (``None``: no rank read it)."""
    shares = [
        p.run_delay_s / p.duration_s
        for p in parts
        if p.run_delay_s is not None and p.duration_s > 0
    ]
    return max(shares) if shares else None


def run_delay(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """How long the run's processes waited for a CPU in its kept windows: the largest share
    (``run_delay_max``) and whether it is over :data:`WAIT_LIMIT` (``waited``); nothing where
    no window read it."""
    read = [w["wait_share"] for w in windows if w.get("wait_share") is not None]
    if not read:
        return {}
    return {"run_delay_max": max(read), "waited": max(read) > WAIT_LIMIT}


def window_load(parts: list[Window]) -> dict[str, Any]:
    """The outside load and steal of a merged window, from the rank that read the machine.

    Shares of the machine's CPU time over the seconds the counters span: the window's time, or
    for the probe's windows (whose steps interleave) the whole probe's (``load_span_s``)."""
    reader = next((p for p in parts if p.machine_busy_s is not None), None)
    if reader is None or not reader.machine_cores:
        return {"outside_load": None, "steal": None, "loaded": False}
    span = reader.load_span_s if reader.load_span_s is not None else reader.duration_s
    if span <= 0:
        return {"outside_load": None, "steal": None, "loaded": False}
    capacity = span * reader.machine_cores
    outside = ((reader.machine_busy_s or 0.0) - (reader.run_cpu_s or 0.0)) / capacity
    steal = (reader.machine_steal_s or 0.0) / capacity
    return {
        "outside_load": outside,
        "steal": steal,
        "loaded": outside > OUTSIDE_LOAD_LIMIT or steal > STEAL_LIMIT,
    }


def loaded_windows(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's measured windows: the largest outside load and steal, and the loaded ones."""
    read = [w for w in windows if w["outside_load"] is not None]
    if not read:
        return {}
    loaded = sum(1 for w in read if w["loaded"])
    return {
        "outside_load_max": max(w["outside_load"] for w in read),
        "steal_max": max(w["steal"] for w in read),
        "windows_loaded": loaded,
        "noisy": loaded > 0,
    }


def guard_effect(kept: list[float], every: list[float]) -> dict[str, Any]:
    """What the guard did to a run, from the throughputs of the windows it kept and of every
    window recorded: ``windows_left_out`` and ``noise_guard_shift`` = ``mean(kept) /
    mean(every) - 1`` (0 when nothing was left out; ``None`` without a finite figure)."""
    shift = None
    if kept and every:
        with np.errstate(all="ignore"):
            kept_mean, every_mean = float(np.mean(kept)), float(np.mean(every))
        if math.isfinite(kept_mean) and math.isfinite(every_mean) and every_mean > 0:
            shift = kept_mean / every_mean - 1.0
    return {"windows_left_out": len(every) - len(kept), "noise_guard_shift": shift}


def probe_load(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The machine's load during the exposed-communication probe (its ``probe`` and ``nosync``
    windows), by the measured windows' limits; nothing where the probe read no counters."""
    read = [w for w in windows if w["outside_load"] is not None]
    if not read:
        return {}
    return {
        "exposed_comm_outside_load_max": max(w["outside_load"] for w in read),
        "exposed_comm_steal_max": max(w["steal"] for w in read),
        "exposed_comm_noisy": any(w["loaded"] for w in read),
    }
