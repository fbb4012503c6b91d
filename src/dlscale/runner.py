"""Run the points of a study: reserve in the store, launch, aggregate, record.

Only files pass between this parent and the workers (spec.json in, events out), so a worker
may run any framework under any interpreter; no framework is imported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.contract.backends import BACKENDS
from dlscale.contract.datasets import DATASETS
from dlscale.contract.engine_code import other_code, stored_code
from dlscale.contract.errors import SchemaError, UserError
from dlscale.contract.events import events_path, read_records
from dlscale.contract.files import read_json
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.models import MODELS
from dlscale.contract.records import Environment, Error, Record, Start, Window
from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import LaunchOutcome, Submitted
from dlscale.launchers.launch_run import interpreter, launch
from dlscale.metrics.aggregate import aggregate
from dlscale.runtime.environment import host_environment
from dlscale.store.results import RunStore, Stored, describe_owner
from dlscale.store.rundir import config_problem

STOP_GRACE_S = 60.0
"""How long, beyond its ``timeout_s``, a run may take to stop its workers and write its result.
A point another process is running is waited for up to its ``timeout_s`` plus this."""
POLL_S = 0.5
"""How often the lock of a point another process is running is looked at while waiting."""


@dataclass(frozen=True, kw_only=True)
class PointOutcome:
    config: RunConfig
    run_id: str
    state: str
    """completed | failed | skipped (already completed) | busy (another process still runs it
    after the wait) | newer (stored by a newer dlscale: kept, not rerun) | submitted (started
    by a launcher that detaches, e.g. a Slurm job: it records its result itself)."""
    result: Result | None
    elsewhere: bool = False
    """The result is another process's: it ran the point while this one waited for its lock."""
    lock_owner: dict[str, Any] | None = None
    """busy: who held the lock when the wait ended (``store.lock_owner``)."""
    detail: str | None = None
    """submitted: where the point stands, in its launcher's words (``Slurm job 12 PENDING``)."""


def absent_data_dirs(points: tuple[RunConfig, ...]) -> tuple[str, ...]:
    """The data directories the points' data sets read that this machine does not have, each
    once. A dry run plans for compute nodes whose file systems may differ from the planning
    machine's (a laptop, a login node): it warns of these instead of refusing, and each
    training rank checks its own before it trains (`dlscale.worker`)."""
    named = dict.fromkeys(
        config.data_dir
        for config in points
        if config.data_dir and DATASETS.get(config.dataset).needs_data_dir
    )
    return tuple(path for path in named if path and not Path(path).exists())


def check_inputs(points: tuple[RunConfig, ...], *, unchecked: tuple[str, ...] = ()) -> list[str]:
    """Checks that need the file system (data files): before anything is launched; the data
    sets' notes (e.g. bad images left out), each once. A point whose data directory is in
    ``unchecked`` (absent here, in a dry run: `absent_data_dirs`) is left to its nodes."""
    seen, notes = set(), []
    for config in points:
        if config.data_dir in unchecked:
            continue
        options = config.grouped_options()["dataset"]
        if DATASETS.get(config.dataset).sample == "tokens":  # the model's sequence and vocabulary
            block, vocab = MODELS.get(config.model).input_shape(config.options)
            options = {**options, "block_size": block, "vocab_size": vocab}
        key = (config.dataset, config.data_dir, tuple(sorted(options.items())))
        if key not in seen:
            seen.add(key)
            data_dir = Path(config.data_dir) if config.data_dir else None
            found = DATASETS.get(config.dataset).check(data_dir, options)
            notes += [n for n in (f"{config.dataset}: {note}" for note in found) if n not in notes]
    return notes


def run_point(
    config: RunConfig,
    store: RunStore,
    *,
    force: bool,
    command: list[str],
    study: str,
    on_warning: Callable[[str], None] = lambda message: None,
    on_wait: Callable[[str], None] = lambda message: None,
    wait_s: float | None = None,
    keep_stale: bool = False,
) -> PointOutcome:
    """Run one point unless it is stored as completed (or ``force``), holding its lock.

    A point whose lock another process holds is waited for, up to ``wait_s`` (default: the
    point's ``timeout_s`` plus ``STOP_GRACE_S``), and its outcome there is reported
    (``elsewhere``); ``busy`` only if the lock is still held then. Whether the point is done is
    asked again once the lock is ours, so a point finished by another process in the meantime
    is neither run again nor cleared. A damaged result of the point is run again (with a
    warning); a result of a newer dlscale is kept (with a warning) unless ``force``. A
    completed result made by other engine code (`stale`) is run again unless ``keep_stale``,
    the old ``result.json`` set aside beside it (``result.stale-CODE.json``).
    """
    run_id = config.run_id()
    store.check_run_dir(run_id)  # a link planted there: one line, before anything is read
    seen = store.read(run_id)
    if seen.result is None and (live := _still_submitted(store, run_id)) is not None:
        return PointOutcome(config=config, run_id=run_id, state="submitted", result=None,
                            detail=f"{live.words}, started earlier; not run again while it "
                            f"is {live.state} ({live.stop_hint})")  # fmt: skip
    if not force and (kept := _kept(config, store, seen, keep_stale)) is not None:
        return kept
    deadline: float | None = None
    while not store.reserve(run_id):
        now = time.monotonic()
        if deadline is None:
            bound = config.timeout_s + STOP_GRACE_S if wait_s is None else wait_s
            deadline = now + bound
            on_wait(
                f"{run_id} is being run by another dlscale process "
                f"({describe_owner(store.lock_owner(run_id))}); waiting up to {bound:g} s for it"
            )
        elif now >= deadline:
            owner = store.lock_owner(run_id)
            return PointOutcome(
                config=config, run_id=run_id, state="busy", result=None, lock_owner=owner
            )
        time.sleep(POLL_S)
    try:
        current = store.read(run_id)  # again, under the lock: it may have been run meanwhile
        if current.result is not None and current.fingerprint != seen.fingerprint:
            state = "skipped" if current.completed else "failed"
            return PointOutcome(
                config=config, run_id=run_id, state=state, result=current.result, elsewhere=True
            )
        if not force and (kept := _kept(config, store, current, keep_stale)) is not None:
            return kept
        if not force and current.completed:  # made by other code: kept beside, not lost
            store.set_aside(run_id, f"result.stale-{_code(current)}")
        store.clear(run_id)
        launched = _launch(
            config, store, run_id, command=command, study=study, on_warning=on_warning
        )
        if isinstance(launched, str):  # detached: the point records its result itself
            return PointOutcome(
                config=config, run_id=run_id, state="submitted", result=None, detail=launched
            )
        store.write_result(run_id, launched)
    finally:
        store.release(run_id)
    return PointOutcome(config=config, run_id=run_id, state=launched.status, result=launched)


def stale(config: RunConfig, stored: Stored) -> str | None:
    """Why a completed stored run was made by other code than this dlscale's (None: it was
    not, or it did not complete)."""
    if stored.result is None or not stored.completed:
        return None
    return other_code(stored.result.environment, config.backend)


def _code(stored: Stored) -> str:
    assert stored.result is not None
    return stored_code(stored.result.environment.get("engine_code")) or "unknown"


def _kept(
    config: RunConfig, store: RunStore, stored: Stored, keep_stale: bool
) -> PointOutcome | None:
    """The outcome of a point whose stored result stays (completed by this code, or by other
    code under ``keep_stale``, or a newer dlscale's); None if it is to be run (none, failed,
    damaged: said once, through the store; made by other code)."""
    run_id = config.run_id()
    if stored.completed and (keep_stale or stale(config, stored) is None):
        return PointOutcome(config=config, run_id=run_id, state="skipped", result=stored.result)
    if stored.newer:
        store.warn_once(
            stored.path,
            f"kept {stored.path}: {stored.problem}; not run again, which would overwrite newer "
            "data: upgrade dlscale to read it (or rerun with --force to replace it)",
        )
        return PointOutcome(config=config, run_id=run_id, state="newer", result=None)
    if stored.damaged:
        store.warn_once(stored.path, f"{stored.path}: {stored.problem}; running that point again")
    return None


def _launch(
    config: RunConfig,
    store: RunStore,
    run_id: str,
    *,
    command: list[str],
    study: str,
    on_warning: Callable[[str], None],
) -> Result | str:
    """Run the point and return its result; a launcher that detaches (:meth:`Launcher.detaches`)
    returns once it is started, and this returns where it stands (its words)."""
    spec, outcome, started_at = launch(
        config, store.run_dir(run_id), command=command, study=study, on_warning=on_warning
    )
    if isinstance(outcome, str):
        return outcome
    store.check_held(run_id)  # its directory removed while it ran: said, not recorded as failed
    return result_of(spec, config, store.run_dir(run_id), outcome, started_at)


def result_of(
    spec: dict[str, Any],
    config: RunConfig,
    run_dir: Path,
    outcome: LaunchOutcome,
    started_at: float,
) -> Result:
    """The point's result from its spec, its ranks' events and how its launch ended: here
    after a watched run, or in the point's own finishing step (:mod:`dlscale.finish`)."""
    from dlscale.contract.engine_code import engine_code
    from dlscale.contract.shapes import ENVIRONMENT
    from dlscale.contract.workload import workload_of
    from dlscale.metrics.impossible import impossible_figures
    from dlscale.metrics.utilization import utilization_metrics
    from dlscale.store.validate import without_problems

    layout = config.layout()
    per_rank = rank_records(config, run_dir)
    metrics = aggregate(
        per_rank,
        target_accuracy=config.target_accuracy,
        target_loss=config.target_loss,
        training_ranks=layout.training_ranks,
    )
    workload = workload_of(config)  # what a sample is: its throughput is read in its unit
    metrics.update(sample_unit=workload.unit, units_per_sample=workload.units_per_sample)
    error = launch_error(outcome, per_rank)
    if error is None and not metrics["windows"]:
        error = "the workers exited without recording a measurement window"
    # a figure no reader would accept (NaN, negative, huge) is never stored, nor completed
    metrics, impossible = impossible_figures(metrics)
    error = error or impossible
    environment = host_environment()
    first = per_rank.get(layout.training_ranks[0], [])
    worker = next((r for r in first if isinstance(r, Environment)), None)
    metrics.update(utilization_metrics(config, worker))  # what MFU is derived from
    if worker is not None:
        environment["worker"] = worker.payload()
        environment["packages"] = worker.packages
        environment.update(worker.framework)  # e.g. torch_version, gpu_names (flat columns)
        environment.update(worker.scheduler)  # slurm_job_id, slurm_step_id
    environment["engine_code"] = engine_code(config.backend)
    environment = without_problems(environment, ENVIRONMENT)
    return Result(
        run_id=spec["run_id"],
        status="failed" if error else "completed",
        error=error,
        failure=None
        if outcome.ok
        else {
            "failed_rank": outcome.failed_rank,
            "returncodes": {str(k): v for k, v in outcome.returncodes.items()},
            "stderr_tail": outcome.stderr_tail,
        },
        study=spec["study"],
        command=tuple(spec["command"]),
        framework=config.framework,
        reference=BACKENDS.get(config.backend).reference,
        config=config.to_dict(),
        layout=placed(layout.to_dict(), per_rank),
        **batch_sizes(config, per_rank.get(layout.training_ranks[0], [])),
        threads_per_worker=spec.get("threads_per_worker"),
        oversubscribed=spec.get("oversubscribed"),
        interpreter=interpreter(config),
        warnings=tuple(spec.get("warnings", [])),
        metrics=metrics,
        environment=environment,
        started_at=started_at,
        finished_at=time.time(),
        duration_s=outcome.duration_s,
    )


def batch_sizes(config: RunConfig, first: list[Any]) -> dict[str, int]:
    """The images one worker and all workers take a step: the point's, or, where a script's
    are read from its model's input (``batch_from = "input"``), the first training rank's
    measured images over its measured steps, rounded."""
    per_worker = config.batch_per_worker
    if config.options.get("batch_from") == "input":
        windows = [r for r in first if isinstance(r, Window) and r.kind == "measure"]
        steps = sum(w.steps for w in windows)
        if steps:
            per_worker = max(1, round(sum(w.samples for w in windows) / steps))
    if per_worker == config.batch_per_worker:
        return {"batch_size_per_worker": per_worker, "global_batch_size": config.global_batch}
    return {"batch_size_per_worker": per_worker, "global_batch_size": per_worker * config.workers}


def placed(
    processes: list[dict[str, Any]], per_rank: dict[int, list[Record]]
) -> tuple[dict[str, Any], ...]:
    """Each process's role and rank, with the host its ``start`` record names (where it ran;
    absent for a rank that never started)."""
    out = []
    for process in processes:
        records = per_rank.get(process["rank"], [])
        host = next((r.host for r in records if isinstance(r, Start) and r.host), None)
        out.append({**process, **({"host": host} if host else {})})
    return tuple(out)


def _still_submitted(store: RunStore, run_id: str) -> Submitted | None:
    """A detached point without a result whose job is still queued or running; one whose job
    ended without writing its result is recorded as failed here (and then run again)."""
    settled = settle_submitted(store, run_id)
    return settled if settled is not None and not settled.ended else None


def settle_submitted(store: RunStore, run_id: str) -> Submitted | None:
    """Where a point started detached and without a result stands (``None``: not such a
    point). One whose job ended without its finishing step (cancelled, timed out, its node
    lost) gets a failed result saying so, as a watched run would."""
    spec_path = store.run_dir(run_id) / "spec.json"
    if store.result_path(run_id).exists() or not spec_path.exists():
        return None
    try:
        spec = read_json(spec_path, "spec")
        if (problem := config_problem(spec)) is not None:  # damaged, or not a dlscale spec
            store.warn_once(spec_path, f"skipped {spec_path}: {problem}; rerun that point with "
                            "dlscale run, or remove its directory")  # fmt: skip
            return None
        config = RunConfig.from_dict(spec["config"])
        submitted = LAUNCHERS.get(config.launcher).create().submitted(store.run_dir(run_id), config)
    except (SchemaError, UserError, KeyError, TypeError, ValueError, AttributeError):
        return None  # not a point of this dlscale's making: left to the run that owns it
    if submitted is not None and submitted.ended and _reserve_quietly(store, run_id):
        try:
            if not store.result_path(run_id).exists():  # its finishing step may have run since
                outcome = LaunchOutcome(ok=False, returncodes={0: submitted.code},
                                        reason=submitted.words)  # fmt: skip
                started = spec_path.stat().st_mtime
                store.write_result(
                    run_id, result_of(spec, config, spec_path.parent, outcome, started)
                )
        finally:
            store.release(run_id)
    return submitted


def _reserve_quietly(store: RunStore, run_id: str) -> bool:
    """Take a detached point's lock to record it; a run directory the store refuses (a lock
    that is a directory) is said once and the point left as it is."""
    try:
        return store.reserve(run_id)
    except UserError as error:
        store.warn_once(store.run_dir(run_id), str(error))
        return False


def submitted_points(store: RunStore) -> list[tuple[str, Submitted]]:
    """Every point of the store started detached that has no result yet, with where it
    stands; those whose job ended without one are recorded as failed on the way. A link in
    the results directory is not followed (it is no run this store made)."""
    if not store.root.is_dir():
        return []
    found = []
    for run_dir in sorted(p for p in store.root.iterdir() if p.is_dir() and not p.is_symlink()):
        submitted = settle_submitted(store, run_dir.name)
        if submitted is not None and not submitted.ended:
            found.append((run_dir.name, submitted))
    return found


def rank_records(config: RunConfig, run_dir: Path) -> dict[int, list[Record]]:
    """Every rank's records in ``run_dir``, by rank."""
    return {p.rank: read_records(events_path(run_dir, p.rank)) for p in config.layout().processes}


def launch_error(outcome: LaunchOutcome, per_rank: dict[int, list[Record]]) -> str | None:
    """Why the launch failed, with the last error the failed rank recorded; ``None`` if it
    did not fail."""
    if outcome.ok:
        return None
    errors = [r for r in per_rank.get(outcome.failed_rank or 0, []) if isinstance(r, Error)]
    return f"{outcome.reason}: {errors[-1].message}" if errors else outcome.reason
