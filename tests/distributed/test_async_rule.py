"""One asynchronous rule in every engine that has an asynchronous parameter server.

``async_update = "mean"`` (the default) scales each pushed gradient by 1/N before the server's
step; ``"sum"`` applies it whole (docs/metrics.md, dlscale/contract/algorithms.py). Proven on
the engines' first update, where the rule is the only thing that can differ: 2 workers take one
step each from the same initial weights (the PyTorch twin's), without momentum or weight decay,
so the servers end at ``w0 - lr * s * (g0 + g1)``, where g0 and g1 are the two workers' mean
gradients at w0 and s the rule's scale. torch-ddp's one step is ``w0 - lr * (g0 + g1) / 2``, so
the asynchronous update is 1x torch-ddp's under ``mean`` and 2x under ``sum``. torch-ps and
mxnet-kv compute both gradients at w0 (each worker's first step uses the initial parameters),
so that holds to float rounding; tf-ps's second function may read variables the first has
already updated, which moves its gradient by O(lr): a looser bound there. tf-ps runs with its
second worker 3 s late (``TF_COORDINATOR_SCHEDULE_START_DELAY``, as a loaded machine made it
once): the chief waits for every worker's dataset before the first step, else the first worker
takes both steps on its own replica's batches (0.27x torch-ddp's step instead of 1x).

The saved parameters are the servers' final state: each worker settles (``Engine.settle``)
before the first one saves, so its last pull cannot miss the other's update.
"""

from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.events import read_records
from dlscale.contract.frameworks import FRAMEWORKS
from dlscale.contract.records import Strategy
from dlscale.store import RunStore
from tests.distributed.references import COMMON
from tests.runs import final_params, run_completed

pytestmark = pytest.mark.dist

ONE_STEP = {  # test_equivalence's points, one step each, plain SGD
    **COMMON,
    **dict(workers=2, batch_size=8, steps=1, warmup_steps=0, comm_probe_steps=0, lr=0.01),
    **dict(momentum=0.0, weight_decay=0.0),
}


def _params(config: RunConfig, store: RunStore) -> tuple[dict[str, np.ndarray], Strategy]:
    _, run_dir = run_completed(config, store, study="async-rule")
    (strategy,) = [
        r for r in read_records(run_dir / "events.rank0.jsonl") if isinstance(r, Strategy)
    ]
    return final_params(run_dir), strategy


def _flat(params: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    return np.concatenate([params[name].astype(np.float64).ravel() for name in names])


@pytest.fixture(scope="module")
def ddp_step(shared_store: RunStore) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The initial weights and torch-ddp's one synchronous step from them, flat (the run made
    once a session, in the shared store)."""
    config = RunConfig.make(backend="torch-ddp", **ONE_STEP)
    initial = FRAMEWORKS.get("torch").initial_weights(config)
    after, _ = _params(config, shared_store)
    names = sorted(after)
    start = _flat(initial, names)
    step = _flat(after, names) - start
    assert np.linalg.norm(step) > 1e-3 * np.linalg.norm(start)  # the step moved the weights
    return start, step, names


@pytest.mark.parametrize("rule", ["mean", "sum"])
@pytest.mark.parametrize(
    ("backend", "extra", "tolerance"),
    [
        ("torch-ps", {"ps_mode": "async"}, 1e-4),
        ("mxnet-kv", {"kvstore": "dist_async"}, 1e-4),
        ("tf-ps", {}, 3e-2),
    ],
    ids=["torch-ps", "mxnet-kv", "tf-ps"],
)
def test_each_async_engine_applies_the_rule_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ddp_step, backend, extra, tolerance, rule
):
    start, ddp, names = ddp_step
    if backend == "tf-ps":  # the second worker late: TF's own knob delays its coordinator thread
        monkeypatch.setenv("TF_COORDINATOR_SCHEDULE_START_DELAY", "3")
    config = RunConfig.make(backend=backend, async_update=rule, **extra, **ONE_STEP)
    params, strategy = _params(config, RunStore(tmp_path))
    update = _flat(params, names) - start
    times = float(update @ ddp / (ddp @ ddp))  # how many torch-ddp steps the update is
    expected = {"mean": 1.0, "sum": 2.0}[rule]
    assert abs(times - expected) < tolerance * expected, (times, expected)
    off = np.linalg.norm(update - times * ddp) / np.linalg.norm(update)
    assert off < tolerance, off  # and in torch-ddp's direction: the same two gradients
    assert strategy.facts["async_update"] == rule  # what the run's record says it did
