"""Worker entry point: ``python -m dlscale.worker RUN_DIR/spec.json``.

The spec file in and the per-rank events file out are the whole contract with the parent, so a
worker may run under any interpreter that can import dlscale (and its backend's framework).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path

from dlscale.backends import BACKENDS
from dlscale.config.run_config import RunConfig
from dlscale.errors import UserError
from dlscale.metrics.events import EventWriter, events_path
from dlscale.runtime.context import WorkerContext
from dlscale.store.files import read_json


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dlscale.worker RUN_DIR/spec.json", file=sys.stderr)
        return 2
    spec_path = Path(argv[0])
    rank, local_rank, world = WorkerContext.rank_from_environment()
    events = EventWriter(events_path(spec_path.parent, rank), rank)
    events.write(
        "start", pid=os.getpid(), world_size=world, local_rank=local_rank, python=sys.executable
    )
    try:
        config = RunConfig(**read_json(spec_path, "spec")["config"])
        if world != config.processes:
            raise UserError(
                f"launched {world} processes for a run that needs {config.processes} "
                f"({config.workers} workers + the backend's other ranks)"
            )
        ctx = WorkerContext(
            config=config,
            run_dir=spec_path.parent,
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            threads=int(os.environ.get("DLSCALE_THREADS", "1")),
            events=events,
        )
        module, _, function = BACKENDS.get(config.backend).worker.partition(":")
        getattr(importlib.import_module(module), function)(ctx)
    except UserError as error:
        events.write("error", kind="user", message=str(error))
        print(f"dlscale worker rank {rank}: {error}", file=sys.stderr)
        return 2
    except BaseException as error:  # a worker must leave a record of any failure
        events.write(
            "error", kind=type(error).__name__, message=str(error), traceback=traceback.format_exc()
        )
        traceback.print_exc()
        return 1
    events.write("end")
    events.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
