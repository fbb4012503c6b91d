"""The Flax GPT through the JAX engines: jax-dp at 2 workers takes torch-ddp's steps on a small
GPT on random tokens, rank by rank and step by step, in float64 (to 1e-9, final parameters
too) with AdamW and with SGD, both under the cosine schedule, and in float32 (the same first
loss, the later ones within the image proofs' bound); jax-single trains gpt-nano on
python-source and counts its held-out predictions per token.

Like for like, as tests/distributed/test_gpt_torch.py holds the PyTorch engines: the PyTorch
twin's initial weights, the same tokens per rank in the same order, PyTorch's update rules
(:mod:`dlscale.frameworks.jax.steps`) at the learning rate of
:func:`dlscale.contract.optimizers.lr_factor`."""

import math
from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.store import RunStore
from tests.distributed.references import GPT_POINT, PAPER_MODEL_TOLERANCE
from tests.runs import final_params, per_rank_losses, run_completed

pytestmark = pytest.mark.dist

GPT = dict(GPT_POINT, lr_schedule="cosine", lr_warmup_steps=2)
"""Two blocks of width 32 over 64 random tokens (every parameter kind of a GPT: embeddings, a
tied head, LayerNorms, attention, MLP), AdamW with decoupled weight decay, the learning rate
warmed up over 2 steps (factors 0.5, 1, 1: the second loss sees the half step)."""

SGD = dict(GPT, optimizer="sgd", lr=0.05, weight_decay=5e-4)
"""The same with PyTorch's SGD (momentum 0.9, weight decay added to the gradient)."""


def _ranks(point: dict, backend: str, precision: str, store: RunStore):
    config = RunConfig.make(backend=backend, precision=precision, **point)
    _, run_dir = run_completed(config, store, study="gpt-reference")
    return per_rank_losses(run_dir), run_dir


@pytest.mark.parametrize("point", [GPT, SGD], ids=["adamw", "sgd"])
def test_jax_dp_takes_torch_ddps_float64_gpt_steps_rank_by_rank(
    tmp_path: Path, shared_store: RunStore, point
):
    ddp, ddp_dir = _ranks(point, "torch-ddp", "float64", shared_store)
    ours, run_dir = _ranks(point, "jax-dp", "float64", RunStore(tmp_path))
    assert len(ours[0]) == 3 and ours[0] != ours[1]  # each rank its own tokens
    for rank in (0, 1):
        assert ours[rank] == pytest.approx(ddp[rank], abs=1e-9, rel=0), rank
    theirs, mine = final_params(ddp_dir), final_params(run_dir)
    assert set(mine) == set(theirs)  # PyTorch's names, the tied head once (wte.weight)
    for name in theirs:
        np.testing.assert_allclose(mine[name], theirs[name], rtol=0, atol=1e-9, err_msg=name)


def test_jax_dp_takes_torch_ddps_float32_gpt_steps_from_the_same_first_loss(
    tmp_path: Path, shared_store: RunStore
):
    """float32: the same first loss (the same weights and tokens), the later ones within the
    image proofs' bound; the loss of random tokens starts at ln(vocabulary)."""
    ddp, _ = _ranks(GPT, "torch-ddp", "float32", shared_store)
    ours, _ = _ranks(GPT, "jax-dp", "float32", RunStore(tmp_path))
    for rank in (0, 1):
        assert ours[rank][0] == pytest.approx(ddp[rank][0], abs=1e-6, rel=0)
        assert ours[rank] == pytest.approx(ddp[rank], abs=PAPER_MODEL_TOLERANCE, rel=0)
        assert ours[rank][0] == pytest.approx(np.log(64), abs=0.1)


def test_jax_single_trains_gpt_nano_on_python_source(tmp_path: Path):
    """The bytes of the standard library: finite losses, and the held-out set counted per
    token (a whole number of sequences of block_size)."""
    point = dict(
        model="gpt-nano", dataset="python-source", n_layer=1, n_embd=32, n_head=2,
        block_size=16, batch_size=4, steps=3, windows=1, warmup_steps=0, comm_probe_steps=0,
    )  # fmt: skip
    result, run_dir = run_completed(
        RunConfig.make(backend="jax-single", **point), RunStore(tmp_path)
    )
    losses = result.metrics["train_loss_by_step"]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert losses[0] == pytest.approx(math.log(256), abs=0.2)  # bytes, from N(0, 0.02) weights
    (held,) = [e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "eval"]
    assert held["total"] > 16 and held["total"] % 16 == 0  # per token, whole sequences
    assert 0 <= held["correct"] <= held["total"]
    assert math.isfinite(held["loss_sum"] / held["total"])
