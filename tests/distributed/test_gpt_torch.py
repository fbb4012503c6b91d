"""The GPT through every PyTorch engine (issue 72): each takes torch-ddp's steps on a small GPT
with AdamW, rank by rank and step by step, in float64 (to 1e-9) and in float32 (to the
float32 bound of the image proofs); gpt-nano's held-out loss falls on python-source; and a
run records its corpus."""

from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.store import RunStore
from tests.distributed.references import GPT_POINT, PAPER_MODEL_TOLERANCE
from tests.runs import final_params, per_rank_losses, run_completed

pytestmark = pytest.mark.dist

GPT = GPT_POINT
"""Two blocks of width 32 over 64 random tokens, AdamW with decoupled weight decay: every
parameter kind of a GPT (embeddings, a tied head, LayerNorms, attention, MLP)."""


def _ddp(store: RunStore, precision: str) -> tuple[dict[int, list[float]], Path]:
    config = RunConfig.make(backend="torch-ddp", precision=precision, **GPT)
    _, run_dir = run_completed(config, store, study="gpt-reference")
    return per_rank_losses(run_dir), run_dir


@pytest.mark.parametrize("backend", ["torch-ring", "torch-fsdp", "torch-ps", "horovod-torch"])
def test_each_torch_engine_takes_torch_ddps_float64_gpt_steps_rank_by_rank(
    tmp_path: Path, shared_store: RunStore, backend
):
    if backend == "horovod-torch":
        pytest.importorskip("horovod.torch")
    ddp, ddp_dir = _ddp(shared_store, "float64")
    config = RunConfig.make(backend=backend, precision="float64", **GPT)
    _, run_dir = run_completed(config, RunStore(tmp_path))
    losses = per_rank_losses(run_dir)
    assert len(losses[0]) == 3 and losses[0] != losses[1]  # each rank its own tokens
    for rank in (0, 1):
        assert losses[rank] == pytest.approx(ddp[rank], abs=1e-9, rel=0), backend
    theirs, ours = final_params(run_dir), final_params(ddp_dir)
    assert set(theirs) == set(ours)
    for name in ours:
        np.testing.assert_allclose(theirs[name], ours[name], rtol=0, atol=1e-9, err_msg=name)


def test_torch_fsdp_takes_torch_ddps_float32_gpt_steps_from_the_same_first_loss(
    tmp_path: Path, shared_store: RunStore
):
    """float32: the same first loss (the same weights and tokens), the later ones within the
    image proofs' bound; the loss of random tokens starts at ln(vocabulary)."""
    ddp, _ = _ddp(shared_store, "float32")
    config = RunConfig.make(backend="torch-fsdp", **GPT)
    _, run_dir = run_completed(config, RunStore(tmp_path))
    losses = per_rank_losses(run_dir)
    for rank in (0, 1):
        assert losses[rank][0] == pytest.approx(ddp[rank][0], abs=1e-6, rel=0)
        assert losses[rank] == pytest.approx(ddp[rank], abs=PAPER_MODEL_TOLERANCE, rel=0)
        assert losses[rank][0] == pytest.approx(np.log(64), abs=0.1)


def test_gpt_nanos_held_out_loss_falls_on_python_source_and_the_corpus_is_recorded(
    tmp_path: Path,
):
    config = RunConfig.make(
        backend="torch-single",
        model="gpt-nano",
        dataset="python-source",
        n_layer=1,
        n_embd=64,
        batch_size=8,
        steps=15,
        windows=3,
        warmup_steps=0,
        comm_probe_steps=0,
        optimizer="adamw",
        lr=3e-3,
        lr_schedule="cosine",
        lr_warmup_steps=5,
        evaluate="window",
        held_out_tokens=8192,
        target_loss=4.0,
    )
    result, _ = run_completed(config, RunStore(tmp_path))
    history = result.metrics["eval_history"]
    assert [e["epoch"] for e in history] == [1, 2, 3]
    held_out = [e["loss"] for e in history]
    assert held_out[0] > held_out[1] > held_out[2], held_out
    assert held_out[0] < np.log(256)  # it learned something from 15 steps of bytes
    assert result.metrics["eval_loss"] == held_out[2]
    reached = [e["elapsed_s"] for e in history if e["loss"] <= 4.0]  # time to the target loss
    assert result.metrics["time_to_loss_s"] == (reached[0] if reached else None)
    corpus = result.environment["worker"]["data"]
    assert corpus["corpus"] == "python-source" and len(corpus["sha256"]) == 64
    assert corpus["train_tokens"] > 1_000_000 and corpus["files"] > 100
