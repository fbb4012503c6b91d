"""The compute profile ``dlscale predict`` predicts from: one worker's step at its batch and
the gradient's bytes, given (``--compute-ms``, ``--gradient-bytes``) or measured by a short
stored 1-worker run of the ``--framework``'s reference backend (reused by the next prediction of
the same model and batch) and counted from the model's trainable parameters.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from dlscale.cli.stored_profile import stored_profile, under_load
from dlscale.cli.tables import console, say
from dlscale.contract.errors import UserError
from dlscale.contract.numbers import finite_number, whole_number
from dlscale.contract.registry import load_object
from dlscale.contract.text import excerpt, shell_command
from dlscale.perfmodel.predict import MAX_MESSAGES, Profile
from dlscale.perfmodel.validate import ASSUMED_SHARE, backward_share
from dlscale.store.results import print_warning

PROFILE_STEPS = 5
"""The measured steps of a profile run (after 2 warm-up steps, then its probe)."""
SPEED_MOVED = 0.25
"""How far one run's two timings of its plain step may differ before the profile says so."""
ASSUMED_FLOP_S = (20e9, 200e9)
"""The range of a CPU worker's training rate (FLOP/s) an estimate of a measurement's length
assumes: nothing of the machine is read to plan."""


def compute_profile(
    args: argparse.Namespace,
    batch: int,
    messages: tuple[int, str],
    points: list[dict[str, Any]],
    keep: bool,
) -> tuple[Profile, list[str]]:
    """The profile at ``batch`` and where each of its figures comes from, a line each;
    ``messages``: the count a step's gradient travels in and where it comes from
    (:func:`message_count`); ``points``: the study's stored points (its own 1-worker point
    of ``args.model`` at ``batch`` is used where there is one); else measured, and kept in
    ``args.results`` only if ``keep`` (the user named it)."""
    compute_ms, gradient = args.compute_ms, args.gradient_bytes
    sources = [] if compute_ms is None else [f"step: {compute_ms:g} ms (given)"]
    measured: dict[str, Any] = {}
    stored = None
    if compute_ms is None:
        stored = stored_profile(points, args.model, batch, args.framework)
    if stored is not None:
        measured = stored.metrics
        compute_ms = stored.step_ms
        sources.append(f"step: {compute_ms:.1f} ms, {stored.said(Path(args.results))}")
        if (load := stored.loaded()) is not None:
            print_warning(load)
    elif compute_ms is None:
        measured = _measure(args, batch, keep)
        compute_ms = measured["step_time_p50_ms"]
        where = f"in {args.results}" if keep else "not kept: --results DIR keeps it for reuse"
        sources.append(
            f"step: {compute_ms:.1f} ms, measured now: 1 worker of "
            f"{_reference_backend(args.framework)} (run {measured['run_id']}, {where})"
        )
    if gradient is None:
        gradient = _gradient_bytes(args.model)
        sources.append(f"gradient: {gradient:,} bytes ({args.model}'s trainable parameters)")
    else:
        sources.append(f"gradient: {gradient:,.0f} bytes (given)")
    share = args.backward_share
    if share is None:
        share, share_from = backward_share(measured)
        if share_from == ASSUMED_SHARE:
            sources.append("backward: 2/3 of the step (assumed: `predict --validate` measures it)")
        else:  # the same 1-worker run's forward, timed alone after its windows
            sources.append(
                f"backward: {share:.0%} of the step (1 - its forward alone / its plain step, "
                "both timed by the same run's probe)"
            )
            if (moved := _speed_moved(measured)) is not None:
                sources.append(moved)
    elif not (math.isfinite(share) and 0 <= share <= 1):
        raise UserError(f"--backward-share must be a number from 0 to 1, got {share}")
    else:
        sources.append(f"backward: {share:.0%} of the step (given)")
    count, said = messages
    if said:
        sources.append(f"messages: {said}")
    if not (math.isfinite(compute_ms) and compute_ms > 0):
        raise UserError(f"--compute-ms must be a finite number > 0, got {compute_ms}")
    profile = Profile(
        compute_s=compute_ms / 1e3, batch=batch, gradient_bytes=gradient, backward_share=share,
        messages=count,
    )  # fmt: skip
    return profile, sources


def _speed_moved(metrics: dict[str, Any]) -> str | None:
    """A line when the probe's plain step and the windows' median step of one run differ by
    more than :data:`SPEED_MOVED` (the same step, timed twice: the machine's speed moved)."""
    step, plain = metrics.get("step_time_p50_ms"), metrics.get("step_time_nosync_p50_ms")
    if not (finite_number(step, low=1e-9) and finite_number(plain, low=1e-9)):
        return None
    if abs(plain / step - 1) <= SPEED_MOVED:
        return None
    return (
        f"note: the probe's plain step took {plain:.1f} ms against the windows' {step:.1f} ms: "
        "the machine's speed moved during the run (outside load?); the step above is the "
        "windows' median"
    )


def message_count(given: str, model: str, where: Path) -> tuple[int, str]:
    """``--messages``: a count (``59``), or an engine's name (``jax-dp``): as many as the
    newest completed run of that engine with ``model`` stored in ``where`` lists
    (``sync_message_bytes``); with where it comes from (empty for the default, 1)."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.store.results import RunStore

    if given[:1].isdigit() or given[:1] in "+-" or given[:1].isspace():  # meant as a count
        count = whole_number(given, low=1, high=MAX_MESSAGES)
        if count is None:
            raise UserError(
                f"--messages must be a whole number from 1 to {MAX_MESSAGES:,} (ASCII digits) "
                f"or a backend's name, got {excerpt(given)}"
            )
        return count, f"the gradient in {count} messages (given)" if count > 1 else ""
    if given not in BACKENDS.names():
        raise UserError(
            f"--messages {excerpt(given)}: give a count, or the backend whose stored run lists "
            "its messages (dlscale ls backends)"
        )
    listing = [
        result
        for result in RunStore(where).results()
        if result.completed
        and result.config.get("backend") == given
        and result.config.get("model") == model
        and isinstance(result.metrics.get("sync_message_bytes"), list)
        and result.metrics["sync_message_bytes"]
    ]
    if not listing:
        raise UserError(
            f"--messages {given}: no completed run of {given} with {model} in {where} lists "
            "its messages; run one there ("
            + shell_command(
                [
                    "dlscale",
                    "run",
                    "--backend",
                    given,
                    "--model",
                    model,
                    "--workers",
                    "2",
                    "--results",
                    where,
                ]
            )
            + "), or give --messages N"
        )
    newest = max(listing, key=lambda result: result.finished_at or 0.0)
    count = min(len(newest.metrics["sync_message_bytes"]), MAX_MESSAGES)
    return count, f"the gradient in {count} messages (as {given} sent them: run {newest.run_id})"


def _measure(args: argparse.Namespace, batch: int, keep: bool) -> dict[str, Any]:
    """One worker's step of the model, from a short run: stored in ``args.results`` and reused
    from there when ``keep``, else in a temporary directory removed after it."""
    import tempfile

    from dlscale.contract.run_config import RunConfig
    from dlscale.preflight import check_points
    from dlscale.runner import run_point, stale
    from dlscale.store.results import RunStore

    config = RunConfig.make(
        backend=_reference_backend(args.framework), model=args.model,
        dataset=_generated_dataset(args.model),
        workers=1, batch_size=batch, steps=PROFILE_STEPS, windows=1, warmup_steps=2,
        comm_probe_steps=3,  # then 4 plain steps and 4 forwards for backward's share
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dlscale-profile-") as scratch:
        where = Path(args.results) if keep else Path(scratch)
        store = RunStore(where)
        stored = store.read(config.run_id())
        if not stored.completed or stale(config, stored) is not None:  # measured (again) here
            if keep:
                _check_can_store(where, args.model)
            check_points((config,), where)
            say(console(stderr=True), _announce(args, batch))
        outcome = run_point(
            config, store, force=False, command=["dlscale", "predict"],
            study="predict-profile",
        )  # fmt: skip
    result = outcome.result
    metrics = result.metrics if result is not None else {}
    if result is None or not result.completed or not metrics.get("step_time_p50_ms"):
        why = result.error if result is not None else "no result was recorded"
        raise UserError(f"the profile run of {args.model} failed: {why}")
    if (load := under_load(dict(metrics), config.backend)) is not None:
        print_warning(load)
    return {**metrics, "run_id": outcome.run_id}


def _announce(args: argparse.Namespace, batch: int) -> str:
    """What is about to be measured, why, and about how long it takes: the steps the run
    takes, each costing the model's forward and backward (3 forwards) of ``batch`` images, at
    :data:`ASSUMED_FLOP_S` (a range: the planning machine's speed is not read)."""
    steps = PROFILE_STEPS + 2 + 3 * 2 + 4  # measured, warm-up, probe pairs, forwards alone
    why = (
        f"no stored 1-worker run of {args.model} at batch {batch} in {args.results}"
        if Path(args.results).is_dir()
        else f"nothing stored in {args.results}"
    )
    flops = _forward_flops(args.model)
    took = f", {steps} steps"
    if flops:
        work = 3 * flops * batch * steps
        low, high = (work / rate for rate in reversed(ASSUMED_FLOP_S))
        span = f"{low:,.0f}-{high:,.0f} s" if high >= 1 else "under a second"
        took = f", {steps} steps of {work / steps / 1e9:.3g} GFLOP: {span} of compute on a CPU"
    return (
        f"dlscale: {why}: measuring {args.model}'s step at batch {batch} on 1 worker "
        f"of {_reference_backend(args.framework)}{took}; --compute-ms MS measures nothing"
    )


def _reference_backend(framework: str) -> str:
    """The backend that measures ``framework``'s step: its reference (no wrapper), by the
    framework registry, so a plug-in's framework is measured as the built-in ones are."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.frameworks import FRAMEWORKS

    reference = BACKENDS.reference_of(framework)
    if reference is None:
        have = sorted(name for name, _ in FRAMEWORKS if BACKENDS.reference_of(name))
        raise UserError(
            f"--framework {framework!r} has no reference backend to measure a step with; "
            f"frameworks that do: {', '.join(have)}"
        )
    return reference


def _check_can_store(results: Path, model: str) -> None:
    """The measured profile run is stored (and reused) in ``--results``: one line naming the
    directory and the ways out when it cannot be written (a read-only working directory)."""
    where = results.absolute()
    if where.exists() and not where.is_dir():
        raise UserError(
            f"predict keeps the run that measures {model}'s step in --results {where}, which is "
            "not a directory; give --results DIR, or --compute-ms MS to measure nothing"
        )
    existing = where
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(
            f"predict measures {model}'s step in a short run stored in --results {where}, and "
            f"{existing} cannot be written (read-only?); give --results DIR where you can "
            "write, or --compute-ms MS to measure nothing"
        )


def _gradient_bytes(model: str) -> int:
    """The bytes an all-reduce moves: the model's trainable parameters in float32, as its
    registration declares them, else counted on the first installed twin that can count them
    (:func:`dlscale.contract.frameworks.profiler_for`)."""
    from dlscale.contract.frameworks import missing_profiler

    spec, counted = _model_sizes(model)
    params = spec.params or (counted.params if counted is not None else None)
    if not params:
        raise UserError(f"{missing_profiler()} with a {model} twin, or give --gradient-bytes")
    return 4 * int(params)


def _forward_flops(model: str) -> int:
    """A forward's FLOPs of one sample of ``model``, declared or counted as
    :func:`_gradient_bytes` has its parameters; 0 where neither can be had."""
    spec, counted = _model_sizes(model)
    flops = spec.forward_flops_per_sample
    if flops is None and counted is not None:
        flops = getattr(counted, "forward_flops_per_sample", 0)
    return int(flops or 0)


def _model_sizes(model: str) -> tuple[Any, Any]:
    """``model``'s registration, and where it declares no sizes, its twin's count (``None``
    where no installed framework can count them): no framework is imported for a declared
    model."""
    from dlscale.contract.frameworks import profiler_for
    from dlscale.contract.models import MODELS

    spec = MODELS.get(model)
    if spec.params and spec.forward_flops_per_sample:
        return spec, None
    counter = profiler_for(spec.builders)
    if counter is None or counter.profile is None:
        return spec, None
    return spec, load_object(counter.profile)(model)


def _generated_dataset(model: str) -> str:
    """The data set made in memory of the samples ``model`` takes: ``synthetic`` images, or
    random ``tokens`` for a language model (an unknown model: ``synthetic``, and the run's
    checks name the model)."""
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.models import MODELS

    sample = MODELS.get(model).sample if model in MODELS else "image"
    made = [name for name, spec in DATASETS if spec.generated and spec.sample == sample]
    return "synthetic" if "synthetic" in made or not made else made[0]
