"""``python -m dlscale.finish RUN_DIR/spec.json EXIT_CODE STARTED_AT``: a detached point's
finishing step.

A launcher that detaches (:meth:`~dlscale.launchers.base.Launcher.detaches`: a Slurm batch job
submitted with ``wait = false``) puts this after the ranks' step in its plan, so the point
records its own result once the ranks are done, as a watched run would (the same
:func:`~dlscale.runner.result_of`): from the ranks' events and the step's exit code, the rank
to blame read from the events. ``dlscale ls runs`` and ``dlscale report`` then find it with no
dlscale process waiting for it. A job that never reaches this step (cancelled, out of time, its
node lost) is recorded by the next ``dlscale ls runs`` or ``dlscale run`` from the scheduler's
record (:func:`~dlscale.runner.settle_submitted`).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.files import read_json
from dlscale.contract.plugins import load_plugins
from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import LaunchOutcome, PlanEntry
from dlscale.launchers.watch import failed_rank, tail_of
from dlscale.runner import result_of
from dlscale.store.results import RunStore


def finish(spec_path: Path, code: int, started_at: float, stderr: Path) -> Result:
    """Record the point of ``spec_path`` whose ranks' step exited with ``code``."""
    run_dir = spec_path.parent
    spec = read_json(spec_path, "spec")
    load_plugins(spec.get("plugins", []))
    config = RunConfig.from_dict(spec["config"])
    duration = max(0.0, time.time() - started_at)
    if code == 0:
        outcome = LaunchOutcome(ok=True, returncodes={0: 0}, duration_s=duration)
    else:
        size = config.layout().size
        entry = PlanEntry(ranks=range(size), argv=("srun",), env={}, stdout=stderr, stderr=stderr)
        rank, why = failed_rank(entry, code, run_dir, None)
        outcome = LaunchOutcome(
            ok=False,
            returncodes={0: code},
            failed_rank=rank,
            reason=f"the job's step failed: {why}",
            stderr_tail=tail_of(stderr),
            duration_s=duration,
        )
    result = result_of(spec, config, run_dir, outcome, started_at)
    RunStore(run_dir.parent).write_result(run_dir.name, result)
    return result


def main(argv: list[str]) -> int:
    try:
        spec, code, started = argv
        started_at = float(started)
        if not math.isfinite(started_at):
            raise ValueError(started)
        stderr = Path(spec).parent / "slurm.stderr"
        result = finish(Path(spec), int(code), started_at, stderr)
    except ValueError:
        print(
            "usage: python -m dlscale.finish RUN_DIR/spec.json EXIT_CODE STARTED_AT",
            file=sys.stderr,
        )
        return 2
    except UserError as error:
        print(f"dlscale finish: {error}", file=sys.stderr)
        return 2
    print(f"dlscale finish: {result.run_id} {result.status}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
