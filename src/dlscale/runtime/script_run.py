"""Running a user's training script in a worker, the same for every framework's script
backend: its options, ``python FILE.py ARGS`` in the worker's process, and its measurement
by a :class:`~dlscale.runtime.script_steps.StepRecorder` that the framework's hook feeds
(torch's optimizer hooks: :mod:`dlscale.frameworks.torch.script`; Keras ``fit``'s batches:
:mod:`dlscale.frameworks.tensorflow.script`).

The worker has already set the variables the script's launcher would have set (torchrun's
``RANK``..., Horovod's ``HOROVOD_*``, TensorFlow's ``TF_CONFIG``), so the script's own
set-up finds its peers. It runs as ``__main__`` with its ``sys.argv`` and its directory first
on the import path, in the directory ``dlscale run`` was started from.
"""

from __future__ import annotations

import re
import runpy
import shlex
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.contract.errors import UserError
from dlscale.contract.models import MODELS
from dlscale.contract.numbers import whole_number
from dlscale.contract.options import declared, setting
from dlscale.contract.text import one_line
from dlscale.contract.user_models import ScriptModelSpec
from dlscale.runtime.engine import worker_environment
from dlscale.runtime.script_probe import SetSync
from dlscale.runtime.script_steps import MeasuredEnough, StepRecorder

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


@dataclass(frozen=True)
class ScriptOptions:
    """A training script's run (``dlscale run --script FILE.py -- ARGS``)."""

    script_args: str = setting(
        "", "the script's arguments, as a shell would split them", whole=True
    )
    run_to_end: bool = setting(
        False, "let the script run on after the measured windows (default: stop it there)"
    )
    batch_from: str = setting(
        "given",
        "where one process's images a step come from: given (batch_size, or the script's "
        "--batch-size), or input (what the script feeds its model: the batch dimension of "
        "the model's first input, summed over its training calls in each optimizer step)",
        choices=("given", "input"),
    )


SCRIPT_OPTIONS = declared(ScriptOptions)

Hooks = Callable[[StepRecorder, Path], Callable[[], None]]
"""A framework's hook: installed with the recorder and the script's path, it calls
``recorder.stepped()`` at the end of each step and returns its own removal."""


def run_script(
    ctx: WorkerContext,
    facts: dict[str, Any],
    hooks: Hooks,
    synchronize: Callable[[], None] | None = None,
    set_sync: SetSync | None = None,
    *,
    counts_input: bool = False,
) -> None:
    """Run the point's script in this process, measured through ``hooks``; ``facts``: the
    framework's, for the run's environment record; ``synchronize``: the device's, for the
    clock at window boundaries (:class:`StepRecorder`); ``set_sync``: turns the script's
    gradient synchronization on and off, for the exposed-communication probe;
    ``counts_input``: the hooks give each step the images its model took (``batch_from =
    "input"``)."""
    cfg = ctx.config
    options = cfg.typed(ScriptOptions)
    spec = MODELS.get(cfg.model)
    assert isinstance(spec, ScriptModelSpec)  # RunConfig gives a script backend nothing else
    path = Path(spec.path)
    args = shlex.split(options.script_args)
    given = script_batch_size(args)
    by_input = options.batch_from == "input"
    if by_input and not counts_input:
        raise UserError(
            f"{cfg.backend} cannot read the images of a step from the model's input (torch "
            "scripts can): give dlscale --batch-size N"
        )
    if given is not None and given != cfg.batch_per_worker and not by_input:
        raise UserError(
            f"{path.name} is given --batch-size {given} but the point's batch_size is "
            f"{cfg.batch_per_worker} (images one process trains a step): set them alike"
        )
    recorder = StepRecorder(
        ctx,
        0 if by_input else cfg.batch_per_worker,  # 0: each step says its own (the hook)
        run_to_end=options.run_to_end,
        synchronize=synchronize,
        set_sync=set_sync,
    )
    if ctx.rank == ctx.layout.training_ranks[0]:
        ctx.events.write(worker_environment(facts, synchronizes=cfg.workers > 1))
    remove = hooks(recorder, path)
    recorder.install()
    try:
        _run_as_main(path, args)
    except MeasuredEnough:
        pass
    finally:
        recorder.uninstall()
        remove()
    recorder.finish(path.name)


_BATCH_FLAG = re.compile(r"(--batch[-_]size|-b)(=(?P<value>.*))?\Z")


def script_batch_size(args: list[str]) -> int | None:
    """The script's ``--batch-size N`` (or ``--batch_size``, ``-b``, ``=N``): the images one
    process trains per step, as a script with a DistributedSampler takes it; ``None`` if
    absent."""
    for index, arg in enumerate(args):
        if match := _BATCH_FLAG.match(arg):
            text = match["value"]
            if text is None:
                text = args[index + 1] if index + 1 < len(args) else ""
            size = whole_number(text, low=1)
            if size is None:
                raise UserError(f"the script's {match[1]} {text[:40]!r} is not a positive integer")
            return size
    return None


def _run_as_main(path: Path, args: list[str]) -> None:
    """``python FILE.py ARGS``: its exit status is the run's; its exception is the user's,
    printed to the rank's stderr and named in one line."""
    argv, sys_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as done:
        if done.code not in (None, 0):
            raise UserError(f"{path.name} exited with status {done.code}") from None
    except (MeasuredEnough, UserError):
        raise
    except Exception as error:
        traceback.print_exc()
        raise UserError(
            f"{path.name} raised {type(error).__name__}: {one_line(str(error))} (its traceback: "
            "the rank's stderr file in the run's directory)"
        ) from None
    finally:
        sys.argv, sys.path[:] = argv, sys_path
