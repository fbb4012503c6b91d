"""N workers with batch b end where 1 worker with batch N*b ends (same seed, same data order).

Why it holds: every strategy averages the workers' gradients of their per-worker mean losses,
which is the gradient of the mean loss over the N*b samples, and the data shards give step i of
the N workers exactly the samples of step i of the single worker (datasets/arrays.py). The model
has no BatchNorm: BatchNorm normalizes each worker's batch of b by its own statistics, so with
it the N-worker run is a different computation (that is why SyncBatchNorm exists).
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from dlscale.config import RunConfig
from dlscale.runner import run_point
from dlscale.store import RunStore

pytestmark = pytest.mark.dist
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


def _run(config: RunConfig, store: RunStore) -> str:
    outcome = run_point(config, store, force=False, command=["t"], study="equivalence")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    return outcome.run_id


def _final_params(config: RunConfig, store: RunStore) -> dict[str, torch.Tensor]:
    return torch.load(store.run_dir(_run(config, store)) / "final_params.pt")


def step_losses(store: RunStore) -> list[float]:
    """The one run's ``train_loss_by_step``: each measured step's loss, the mean over ranks."""
    (result,) = store.results()
    losses = result.metrics["train_loss_by_step"]
    assert losses is not None and len(losses) == result.config["steps"], losses
    return losses


@pytest.fixture(scope="module")
def reference_store(tmp_path_factory) -> RunStore:
    return RunStore(tmp_path_factory.mktemp("ref"))


@pytest.fixture(scope="module")
def reference(reference_store: RunStore) -> dict[str, torch.Tensor]:
    return _final_params(
        RunConfig.make(backend="torch-single", workers=1, batch_size=16, **COMMON),
        reference_store,
    )


@pytest.mark.parametrize(
    "extra",
    # torch-ps (sync) is held to the same standard in test_ps.py, with its byte counts.
    [
        {"backend": "torch-ddp"},
        {"backend": "torch-fsdp"},
        {"backend": "torch-fsdp", "reshard_after_forward": False},
        {"backend": "torch-ring"},
        {"backend": "torch-ring", "bucket_mb": 0.001},
        # Horovod (tests/distributed/test_horovod.py): Gloo under the local launcher and under
        # horovodrun, MPI under mpirun, and gradients accumulated over 2 micro-batches of 4
        {"backend": "horovod-torch"},
        {"backend": "horovod-torch", "launcher": "horovodrun"},
        {"backend": "horovod-torch", "launcher": "mpirun"},
        {"backend": "horovod-torch", "backward_passes_per_step": 2, "fusion_mb": 0.001},
    ],
    ids=[
        "ddp",
        "fsdp",
        "fsdp-zero2",
        "ring",
        "ring-small-buckets",
        "horovod-local",
        "horovodrun",
        "horovod-mpirun",
        "horovod-bpps2-small-fusion",
    ],
)
def test_two_workers_match_one_worker_with_twice_the_batch(
    tmp_path: Path, reference, reference_store, extra
):
    params = _final_params(
        RunConfig.make(workers=2, batch_size=8, **COMMON, **extra), RunStore(tmp_path)
    )
    # step by step, from the stored results: the mean of the two ranks' losses is the loss of
    # the single worker's batch of 16 (before the final parameters below say the same)
    ours, theirs = step_losses(RunStore(tmp_path)), step_losses(reference_store)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert len(set(theirs)) == len(theirs)  # the steps moved the loss
    start = _final_params(
        RunConfig.make(
            backend="torch-single",
            workers=1,
            batch_size=16,
            **{**COMMON, "steps": 1, "warmup_steps": 0},
        ),
        RunStore(tmp_path / "one-step"),
    )
    assert params.keys() == reference.keys()
    for name, value in params.items():
        torch.testing.assert_close(value, reference[name], rtol=1e-4, atol=1e-5)
    # and training moved the weights: the comparison is not of two untouched models
    moved = max(float((reference[n] - start[n]).abs().max()) for n in reference)
    assert moved > 1e-3


BATCHNORM = dict(COMMON, model="resnet20", warmup_steps=0, comm_probe_steps=0, lr=0.01, seed=3)
"""A paper's model (BatchNorm, weight decay 5e-4, momentum 0.9): each worker normalizes its own
batch of 8, so the reference is torch-ddp at 2 workers, not one worker of 16."""
PAPER_MODELS = {
    "resnet20": dict(BATCHNORM, batch_size=8),
    # 64x64 inputs, batch 4; dropout off: each framework draws its own dropout masks, which
    # alone moved AlexNet's first loss by 1.5e-4 (docs/equivalence.md)
    "alexnet": dict(BATCHNORM, model="alexnet", batch_size=4, image_size=64, dropout=0.0),
    # GoogLeNet's first step only, the forward pass from the same weights on the same images:
    # from step 2 its gradient is so sensitive to rounding at these sizes that torch-ddp with 2
    # threads is 8e-3 off torch-ddp with 1 (measured, docs/equivalence.md)
    "googlenet": dict(
        BATCHNORM, model="googlenet", batch_size=4, image_size=64, dropout=0.0, steps=1
    ),
}
"""The papers' models at 2 workers, as every synchronous engine is held to torch-ddp's steps."""


@pytest.fixture(scope="module")
def paper_reference(tmp_path_factory):
    """torch-ddp's per-step losses on one of :data:`PAPER_MODELS`, run once per module."""
    losses: dict[str, list[float]] = {}

    def reference(model: str) -> list[float]:
        if model not in losses:
            store = RunStore(tmp_path_factory.mktemp(model))
            _run(RunConfig.make(backend="torch-ddp", workers=2, **PAPER_MODELS[model]), store)
            losses[model] = step_losses(store)
        return losses[model]

    return reference


@pytest.mark.parametrize("backend", ["torch-ring", "torch-fsdp", "horovod-torch", "torch-ps"])
def test_torch_engines_take_torch_ddps_steps_on_resnet20(tmp_path: Path, paper_reference, backend):
    """The same torch kernels on the same weights and samples: the engines differ only in how
    the gradients are summed, which on this machine changed no bit in 3 steps. Horovod's
    broadcast_optimizer_state took a zero-gradient SGD step at the start (weight decay applied
    once, momentum seeded with it): 4e-5 off at step 2, 7.5e-4 at step 3, before 'make_optimizer'
    stopped calling it."""
    store = RunStore(tmp_path)
    _run(RunConfig.make(backend=backend, workers=2, **PAPER_MODELS["resnet20"]), store)
    ours = step_losses(store)
    np.testing.assert_allclose(ours, paper_reference("resnet20"), rtol=1e-6, atol=0)
    assert len(set(ours)) == len(ours)  # the steps moved the loss


PAPER_MODEL_TOLERANCE = 1e-3
"""How far (nats, absolute) another framework's per-step loss on a paper's model may be from
torch-ddp's over 3 steps. Measured here on ResNet-20 (docs/equivalence.md): TensorFlow's
engines 1.7e-4 and MXNet's 4.5e-4 at step 3; their step-1 gaps are forward rounding (1e-6
relative) and each later step amplifies a gap about 20-fold, as it amplifies torch-ddp's own
thread-count rounding."""


FIRST_STEP_TOLERANCE = 2e-5
"""How far a first step's loss (the forward pass alone, from the same weights and images) may
be from torch-ddp's: GoogLeNet's were within 3.2e-6 in TensorFlow and MXNet here."""


def follows_torch_ddp(
    tmp_path: Path, paper_reference, backend: str, model: str, **options
) -> RunStore:
    """Run ``backend`` (with its ``options``) at 2 workers on one of :data:`PAPER_MODELS` and
    hold its per-step losses to torch-ddp's within :data:`PAPER_MODEL_TOLERANCE` (a first step
    alone: :data:`FIRST_STEP_TOLERANCE`); the store."""
    store = RunStore(tmp_path)
    _run(RunConfig.make(backend=backend, workers=2, **PAPER_MODELS[model], **options), store)
    ours = step_losses(store)
    one_step = PAPER_MODELS[model]["steps"] == 1
    atol = FIRST_STEP_TOLERANCE if one_step else PAPER_MODEL_TOLERANCE
    np.testing.assert_allclose(ours, paper_reference(model), rtol=0, atol=atol)
    assert len(set(ours)) == len(ours)  # the steps moved the loss
    return store


@pytest.mark.parametrize(
    ("backend", "lr", "epochs"),
    # One setting for all: the same asynchronous rule (async_update = "mean", each push scaled
    # by 1/N), lr 0.01, 8 epochs. torch-ps: at lr 0.02 and 6 epochs 12 of 12 idle runs reached
    # 0.85-0.95 but one CI run (2 busy cores) stopped at 0.74; at these settings 8 of 8 under
    # load reached 0.91-0.95. mxnet-kv (0.89-0.96) and tf-ps (0.86-0.94): 4 of 4 each beside a
    # test suite. Before the shared rule mxnet-kv applied pushes whole: at lr 0.02, 2 of 10
    # runs stalled below 0.8 (ps-lite applies each key's push on its own, so a pull mixes
    # versions across keys: ~3x as many staleness-2 pushes as torch-ps).
    [
        (("torch-ps", "--set", "ps_mode=async"), "0.01", "8"),
        (("tf-ps",), "0.01", "8"),  # TF2's parameter server is asynchronous
        (("mxnet-kv", "--set", "kvstore=dist_async"), "0.01", "8"),
    ],
    ids=["torch-ps", "tf-ps", "mxnet-kv"],
)
def test_async_parameter_server_reaches_a_target_accuracy(tmp_path: Path, cli, backend, lr, epochs):
    import json

    result = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        *backend,
        "--model",
        "tiny",
        "--dataset",
        "digits",
        "--workers",
        "2",
        "--batch-size",
        "16",
        "--epochs",
        epochs,
        "--lr",
        lr,
        "--target-accuracy",
        "0.8",
        "--json",
        "--results",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    (record,) = [r for r in map(json.loads, result.stdout.splitlines()) if r["kind"] == "point"]
    assert record["eval_accuracy"] >= 0.8, record
    assert record["time_to_accuracy_s"] > 0
    (stored,) = RunStore(tmp_path).results()
    # every replica's images counted (tf-ps: by the coordinator): 2 workers x 16 a step
    assert stored.metrics["measured_images"] == stored.metrics["measured_steps"] * 32
