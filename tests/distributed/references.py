"""The points every engine is held to, and how it is held to them.

N workers with batch b end where 1 worker with batch N*b ends (same seed, same data order): every
strategy averages the workers' gradients of their per-worker mean losses, which is the gradient
of the mean loss over the N*b samples, and the data shards give step i of the N workers exactly
the samples of step i of the single worker (datasets/arrays.py). The model has no BatchNorm:
BatchNorm normalizes each worker's batch of b by its own statistics, so with it the N-worker run
is a different computation (that is why SyncBatchNorm exists); on the papers' models (BatchNorm)
the reference is torch-ddp at 2 workers instead.

The reference runs are made once per session in the shared store (tests/runs.py), whichever test
file asks first: test_equivalence.py (the torch engines), test_tensorflow.py and test_mxnet.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlscale.config import RunConfig
from dlscale.contract.result import Result
from dlscale.store import RunStore
from tests.runs import final_params, run_completed

COMMON = dict(
    model="tiny",
    dataset="digits",
    steps=3,
    windows=1,
    warmup_steps=1,
    comm_probe_steps=1,
    save_params=True,
    lr=0.05,
)
"""The tiny model on the digits, 3 measured steps: the points of the equivalence proofs."""

BATCHNORM = dict(COMMON, model="resnet20", warmup_steps=0, comm_probe_steps=0, lr=0.01, seed=3)
"""A paper's model (BatchNorm, weight decay 5e-4, momentum 0.9): each worker normalizes its own
batch of 8, so the reference is torch-ddp at 2 workers, not one worker of 16."""
PAPER_MODELS = {
    "resnet20": dict(BATCHNORM, batch_size=8),
    # 64x64 inputs, batch 4; dropout off: each framework draws its own dropout masks, which
    # alone moved AlexNet's first loss by 1.5e-4 (docs/equivalence.md); synthetic data (a
    # random batch per rank, fed at every step): no held-out set, whose evaluation in batches
    # of 4 was half of the run (tf-ps reads all 228 MB of variables for each batch)
    "alexnet": dict(
        BATCHNORM, model="alexnet", dataset="synthetic", batch_size=4, image_size=64, dropout=0.0
    ),
}
"""The papers' models at 2 workers, as every synchronous engine is held to torch-ddp's steps.
Not GoogLeNet: from step 2 its float32 gradient is so sensitive to rounding at these sizes that
torch-ddp with 2 threads is 8e-3 off torch-ddp with 1 (docs/equivalence.md), and its first
step, the forward pass, is what the Keras and Gluon twins hold in float64 with 3 steps more
(tests/unit/test_keras_twins.py, test_gluon_twins.py)."""

PAPER_MODEL_TOLERANCE = 1e-3
"""How far (nats, absolute) another framework's per-step loss on a paper's model may be from
torch-ddp's over 3 steps. Measured here on ResNet-20 (docs/equivalence.md): TensorFlow's
engines 1.7e-4 and MXNet's 4.5e-4 at step 3; their step-1 gaps are forward rounding (1e-6
relative) and each later step amplifies a gap about 20-fold, as it amplifies torch-ddp's own
thread-count rounding."""


def step_losses(result: Result) -> list[float]:
    """A run's ``train_loss_by_step``: each measured step's loss, the mean over ranks."""
    losses = result.metrics["train_loss_by_step"]
    assert losses is not None and len(losses) == result.config["steps"], losses
    return losses


@dataclass(frozen=True)
class Reference:
    """torch-single at batch 16 on :data:`COMMON`: what 2 workers of batch 8 must reproduce."""

    result: Result
    params: dict[str, np.ndarray]
    start: dict[str, np.ndarray]
    """The same model's parameters after one step from the same start (``steps = 1``)."""

    @property
    def losses(self) -> list[float]:
        return step_losses(self.result)


def torch_reference(store: RunStore) -> Reference:
    """The reference, run in ``store`` unless it is there; checked to have moved the weights
    (so that no comparison is of two untouched models)."""
    result, run_dir = run_completed(_single(), store, study="reference")
    _, start_dir = run_completed(_single(steps=1, warmup_steps=0), store, study="reference")
    params, start = final_params(run_dir), final_params(start_dir)
    moved = max(float(np.abs(params[n] - start[n]).max()) for n in params)
    assert moved > 1e-3, moved
    reference = Reference(result=result, params=params, start=start)
    assert len(set(reference.losses)) == len(reference.losses)  # the steps moved the loss
    return reference


def _single(**changes: object) -> RunConfig:
    return RunConfig.make(backend="torch-single", workers=1, batch_size=16, **{**COMMON, **changes})


def ends_where_torch_single_ends(result: Result, run_dir: Path, reference: Reference) -> None:
    """A torch engine's run at 2 workers of batch 8 on :data:`COMMON`: step by step, from the
    stored result, the mean of the two ranks' losses is the loss of the reference's batch of
    16, and its final parameters are the reference's (same dtype; training moved them, so the
    comparison is not of two untouched models)."""
    np.testing.assert_allclose(step_losses(result), reference.losses, rtol=1e-5, atol=1e-6)
    assert len(set(reference.losses)) == len(reference.losses)  # the steps moved the loss
    params = final_params(run_dir)
    assert params.keys() == reference.params.keys()
    for name, value in params.items():
        assert value.dtype == reference.params[name].dtype, name
        np.testing.assert_allclose(
            value, reference.params[name], rtol=1e-4, atol=1e-5, err_msg=name
        )
    moved = max(float(np.abs(reference.params[n] - reference.start[n]).max()) for n in params)
    assert moved > 1e-3


def run_and_compare(
    tmp_path: Path, reference: Reference, backend: str, workers: int, extra: dict
) -> tuple[Result, Path]:
    """Run ``backend`` with ``workers`` at batch 16/workers and check that it ends at the
    reference's parameters (to float32 rounding: another framework's kernels); its stored
    result and run directory."""
    config = RunConfig.make(
        backend=backend, workers=workers, batch_size=16 // workers, **COMMON, **extra
    )
    result, run_dir = run_completed(config, RunStore(tmp_path))
    params = final_params(run_dir)
    assert params.keys() == reference.params.keys()
    for name, value in params.items():
        np.testing.assert_allclose(
            value, reference.params[name], rtol=1e-4, atol=2e-5, err_msg=name
        )
    return result, run_dir


def paper_losses(store: RunStore, model: str) -> list[float]:
    """torch-ddp's per-step losses at 2 workers on one of :data:`PAPER_MODELS`."""
    config = RunConfig.make(backend="torch-ddp", workers=2, **PAPER_MODELS[model])
    result, _ = run_completed(config, store, study="reference")
    return step_losses(result)


def follows_torch_ddp(
    tmp_path: Path, shared: RunStore, backend: str, model: str, **options: object
) -> RunStore:
    """Run ``backend`` (with its ``options``) at 2 workers on one of :data:`PAPER_MODELS` and
    hold its per-step losses to torch-ddp's within :data:`PAPER_MODEL_TOLERANCE`; the store it
    ran in."""
    store = RunStore(tmp_path)
    config = RunConfig.make(backend=backend, workers=2, **PAPER_MODELS[model], **options)
    result, _ = run_completed(config, store)
    ours = step_losses(result)
    np.testing.assert_allclose(
        ours, paper_losses(shared, model), rtol=0, atol=PAPER_MODEL_TOLERANCE
    )
    assert len(set(ours)) == len(ours)  # the steps moved the loss
    return store


GPT_POINT = dict(
    model="gpt-nano",
    dataset="tokens",
    n_layer=2,
    n_embd=32,
    n_head=2,
    block_size=16,
    vocab_size=64,
    batch_size=4,
    steps=3,
    windows=1,
    warmup_steps=0,
    comm_probe_steps=0,
    workers=2,
    optimizer="adamw",
    lr=3e-3,
    weight_decay=0.1,
    save_params=True,
)
"""A small GPT at 2 workers, as every engine's GPT twin is held to torch-ddp's steps: two blocks
of width 32 over 64 random tokens (every parameter kind of a GPT: embeddings, a tied head,
LayerNorms, attention, MLP), AdamW with decoupled weight decay, 3 steps."""
