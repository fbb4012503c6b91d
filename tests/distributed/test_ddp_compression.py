"""torch-ddp's gradient compression, proven on 2 real workers: what it sends is counted from the
tensors handed to the all-reduce (not from the model), and it moves the trajectory only as far
as its rounding (fp16) or its low-rank approximation (PowerSGD) does.

fp16 sends half of the fp32 gradient's bytes (bf16 too, on CUDA: tests/gpu/test_cuda.py).
PowerSGD (torch's hook, with its default ``min_compression_rate`` of 2) sends, for each gradient
viewed as an n x m matrix, the factors P (n x r) and Q (m x r) where that is less than half of
n x m (r = min(n, m, powersgd_rank)), and the tensor itself otherwise (biases); the warm-up
steps (``start_powerSGD_iter`` = 2) send the whole gradient, so the measured steps here start
after them.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from dlscale.config import RunConfig
from dlscale.contract.errors import UnsupportedPoint
from dlscale.contract.models import MODELS
from dlscale.runner import run_point
from dlscale.store import RunStore
from tests.distributed.references import COMMON

pytestmark = pytest.mark.dist

POINT = {**COMMON, "workers": 2, "batch_size": 8, "warmup_steps": 2, "comm_probe_steps": 0}


def _run(tmp_path: Path, **options) -> tuple[dict[str, np.ndarray], dict]:
    store = RunStore(tmp_path)
    config = RunConfig.make(backend="torch-ddp", **POINT, **options)
    outcome = run_point(config, store, force=False, command=["t"], study="compression")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    state = torch.load(store.run_dir(outcome.run_id) / "final_params.pt")
    return {name: value.numpy() for name, value in state.items()}, dict(outcome.result.metrics)


def _largest_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[name] - b[name]).max()) for name in a)


def powersgd_elements(rank: int) -> int:
    """What torch's PowerSGD hook all-reduces per step for the tiny model, by its rule."""
    elements = 0
    for param in MODELS.get("tiny").build(10).parameters():
        n = param.shape[0]
        m = param.numel() // n
        r = min(n, m, rank)
        elements += (n + m) * r if 2 * (n + m) * r < n * m else n * m
    return elements


@pytest.fixture(scope="module")
def uncompressed(tmp_path_factory) -> tuple[dict[str, np.ndarray], dict]:
    return _run(tmp_path_factory.mktemp("none"))


def test_uncompressed_sends_the_whole_gradient(uncompressed):
    _, m = uncompressed
    # 2 workers: a ring all-reduce sends 2(N-1)/N = 1 x the payload
    assert m["bytes_sent_per_step_counted"] == m["gradient_bytes"]
    assert m["bytes_sent_per_step_model"] == m["gradient_bytes"]


def test_the_fp16_hook_sends_half_and_moves_the_weights_only_by_its_rounding(
    tmp_path: Path, uncompressed
):
    full, full_metrics = uncompressed
    params, m = _run(tmp_path, compression="fp16")
    assert m["bytes_sent_per_step_counted"] == full_metrics["bytes_sent_per_step_counted"] / 2
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]
    moved = _largest_difference(params, full)
    assert 0 < moved < 1e-3, moved  # applied (not equal), and only rounding apart


def test_the_bf16_hook_is_refused_on_the_cpu_before_launch(tmp_path: Path):
    """torch's bf16 hook all-reduces on NCCL only: on gloo it failed after launch, with a
    rank's RuntimeError. tests/gpu/test_cuda.py runs it on 2 GPUs."""
    with pytest.raises(UnsupportedPoint, match=r"needs CUDA.*torch-ring"):
        RunConfig.make(backend="torch-ddp", **POINT, compression="bf16")


@pytest.mark.parametrize("rank", [1, 2])
def test_powersgd_sends_the_factors_of_its_rank(tmp_path: Path, uncompressed, rank):
    full, full_metrics = uncompressed
    params, m = _run(tmp_path, compression="powersgd", powersgd_rank=rank)
    assert m["bytes_sent_per_step_counted"] == 4 * powersgd_elements(rank)
    assert m["bytes_sent_per_step_counted"] < full_metrics["bytes_sent_per_step_counted"] / 4
    # a low-rank approximation of the gradient: further from the uncompressed run than fp16
    assert _largest_difference(params, full) > 1e-3
