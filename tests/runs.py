"""Running a point from a test, and the store that lets several tests share one run.

A point that several tests hold their engines to (torch-single's reference, the one-step start,
torch-ddp on a paper's model) is run once per session in the :func:`shared_store`: the store's
own lock makes a second test (in this process or in another of pytest-xdist's workers) wait for
the run, and its resume hands that test the stored result, as it would hand it to a user who
runs the same point twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.models import PARAMS_FILE
from dlscale.contract.result import Result
from dlscale.runner import run_point
from dlscale.store import RunStore


def run_completed(config: RunConfig, store: RunStore, study: str = "t") -> tuple[Result, Path]:
    """Run ``config`` in ``store`` (or take its stored result) and check that it completed:
    its result and run directory."""
    outcome = run_point(config, store, force=False, command=["t"], study=study)
    result = outcome.result
    assert result is not None and result.status == "completed", (
        outcome.state,
        result and result.error,
    )
    return result, store.run_dir(outcome.run_id)


def final_params(run_dir: Path) -> dict[str, np.ndarray]:
    """The parameters a run saved (``save_params``), by name, as numpy arrays: a numpy file
    (TensorFlow, MXNet) or PyTorch's."""
    if (run_dir / PARAMS_FILE).exists():
        with np.load(run_dir / PARAMS_FILE) as saved:
            return dict(saved)
    import torch

    state = torch.load(run_dir / "final_params.pt")
    return {name: value.numpy() for name, value in state.items()}


def session_root(factory: pytest.TempPathFactory) -> Path:
    """A directory of this session's, the same in every pytest-xdist worker (each worker has a
    base directory of its own under it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> RunStore:
    """The session's store of shared runs (see the module's docstring); ``dlscale run
    --results`` its root (``shared_store.root``) shares them the same way."""
    return RunStore(session_root(tmp_path_factory) / "shared-runs")


def made_here(document: dict) -> dict:
    """A result document copied from a fixture, stamped as made by this checkout's engine code
    (`dlscale.contract.engine_code`): a resume keeps it instead of running it again."""
    from dlscale.contract.engine_code import engine_code

    environment = {**document.get("environment", {})}
    environment["engine_code"] = engine_code(document["config"]["backend"])
    return {**document, "environment": environment}


def per_rank_losses(run_dir: Path, ranks: tuple[int, ...] = (0, 1)) -> dict[int, list[float]]:
    """Each rank's own loss at each measured step, from its raw events."""
    out = {}
    for rank in ranks:
        events = [json.loads(line) for line in (run_dir / f"events.rank{rank}.jsonl").open()]
        measured = [e for e in events if e["event"] == "window" and e.get("kind") == "measure"]
        out[rank] = [loss for window in measured for loss in window["step_losses"]]
    return out
