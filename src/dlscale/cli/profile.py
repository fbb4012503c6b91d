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

from dlscale.cli.tables import console, say
from dlscale.contract.errors import UserError
from dlscale.contract.numbers import whole_number
from dlscale.contract.registry import load_object
from dlscale.contract.text import excerpt, shell_command
from dlscale.perfmodel.predict import MAX_MESSAGES, Profile
from dlscale.perfmodel.validate import ASSUMED_SHARE, backward_share


def compute_profile(
    args: argparse.Namespace, batch: int, messages: tuple[int, str]
) -> tuple[Profile, str]:
    """The profile at ``batch`` and where each of its figures comes from; ``messages``: the
    count a step's gradient travels in and where it comes from (:func:`message_count`)."""
    compute_ms, gradient = args.compute_ms, args.gradient_bytes
    sources = [] if compute_ms is None else [f"{compute_ms:g} ms a step (given)"]
    measured: dict[str, Any] = {}
    if compute_ms is None:
        measured = _measure(args, batch)
        compute_ms = measured["step_time_p50_ms"]
        sources.append(
            f"measured: {args.model} at batch {batch}, 1 worker of "
            f"{_reference_backend(args.framework)}, {compute_ms:.1f} ms a step "
            f"(run {measured['run_id']} in {args.results})"
        )
    if gradient is None:
        gradient = _gradient_bytes(args.model)
        sources.append(f"{gradient:,} gradient bytes ({args.model}'s trainable parameters)")
    if args.gradient_bytes is not None:
        sources.append(f"{gradient:,.0f} gradient bytes (given)")
    share = args.backward_share
    if share is None:
        share, share_from = backward_share(measured)
        if share_from == ASSUMED_SHARE:
            sources.append("backward 2/3 of the step (assumed: `predict --validate` measures it)")
        else:  # the same 1-worker run's forward, timed alone after its windows
            sources.append(f"backward {share:.0%} of the step ({share_from})")
    elif not (math.isfinite(share) and 0 <= share <= 1):
        raise UserError(f"--backward-share must be a number from 0 to 1, got {share}")
    else:
        sources.append(f"backward {share:.0%} of the step (given)")
    count, said = messages
    if said:
        sources.append(said)
    source = "; ".join(sources)
    if not (math.isfinite(compute_ms) and compute_ms > 0):
        raise UserError(f"--compute-ms must be a finite number > 0, got {compute_ms}")
    profile = Profile(
        compute_s=compute_ms / 1e3, batch=batch, gradient_bytes=gradient, backward_share=share,
        messages=count,
    )  # fmt: skip
    return profile, source


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


def _measure(args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """One worker's step of the model, from a short stored run (run now if not stored)."""
    from dlscale.contract.run_config import RunConfig
    from dlscale.preflight import check_points
    from dlscale.runner import run_point, stale
    from dlscale.store.results import RunStore

    config = RunConfig.make(
        backend=_reference_backend(args.framework), model=args.model, dataset="synthetic",
        workers=1, batch_size=batch, steps=5, windows=1, warmup_steps=2,
        comm_probe_steps=3,  # then 4 plain steps and 4 forwards for backward's share
    )  # fmt: skip
    store = RunStore(args.results)
    stored = store.read(config.run_id())
    if not stored.completed or stale(config, stored) is not None:  # measured (again) here
        _check_can_store(Path(args.results), args.model)
        check_points((config,), Path(args.results))
        say(console(stderr=True), f"dlscale: measuring {args.model}'s step at batch {batch}")
    outcome = run_point(
        config, store, force=False, command=["dlscale", "predict"],
        study="predict-profile",
    )  # fmt: skip
    result = outcome.result
    metrics = result.metrics if result is not None else {}
    if result is None or not result.completed or not metrics.get("step_time_p50_ms"):
        why = result.error if result is not None else "no result was recorded"
        raise UserError(f"the profile run of {args.model} failed: {why}")
    return {**metrics, "run_id": outcome.run_id}


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
    """The bytes an all-reduce moves: the model's trainable parameters in float32, counted on
    the first installed twin that can count them
    (:func:`dlscale.contract.frameworks.profiler_for`)."""
    from dlscale.contract.frameworks import missing_profiler, profiler_for
    from dlscale.contract.models import MODELS

    counter = profiler_for(MODELS.get(model).builders)
    if counter is None or counter.profile is None:
        raise UserError(f"{missing_profiler()} with a {model} twin, or give --gradient-bytes")
    return 4 * int(load_object(counter.profile)(model).params)
