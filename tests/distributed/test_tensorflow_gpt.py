"""The Keras GPT (frameworks/tensorflow/gpt.py) through TensorFlow's engines, proven as every
twin is: tf-mwms at 2 workers takes torch-ddp's steps on a small GPT over random tokens, from
the PyTorch twin's initial weights, rank by rank and step by step: in float64 to 1e-9 (and to
its trained parameters), in float32 within the image proofs' bound; tf-single learns bytes of
Python source (finite, falling losses; a held-out loss per token below the uniform one) and
records the corpus it read, as the torch engines do.
"""

from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.store import RunStore
from tests.distributed.references import GPT_POINT, PAPER_MODEL_TOLERANCE
from tests.runs import final_params, per_rank_losses, run_completed

pytestmark = pytest.mark.dist

GPT = dict(
    GPT_POINT, n_layer=1, vocab_size=256, optimizer="sgd", lr=0.1, weight_decay=5e-4, seed=17
)
"""One block of width 32 over gpt-nano's 256 byte tokens, PyTorch's SGD (momentum 0.9, weight
decay 5e-4): every parameter kind of a GPT (embeddings, a tied head, LayerNorms, attention,
MLP)."""


def _pair(tmp_path: Path, shared: RunStore, precision: str, **changes: object):
    """torch-ddp's run (once a session) and tf-mwms' at ``precision``: each one's run
    directory."""
    point = {**GPT, **changes}
    ddp = RunConfig.make(backend="torch-ddp", precision=precision, **point)
    _, ddp_dir = run_completed(ddp, shared, study="tf-gpt-reference")
    mwms = RunConfig.make(backend="tf-mwms", precision=precision, **point)
    result, run_dir = run_completed(mwms, RunStore(tmp_path))
    assert result.config["precision"] == precision
    return ddp_dir, run_dir


ADAMW = dict(optimizer="adamw", lr=3e-3, weight_decay=0.1)
"""torch.optim.AdamW's rule (frameworks/tensorflow/sgd.py: TorchAdamW)."""
COSINE = dict(lr_schedule="cosine", lr_warmup_steps=2, steps=4)
"""The learning rate warmed up over 2 steps, then cosine to 0 at the run's last step: factors
0.5, 1, 1 and 0.5 at the 4 measured steps (sgd.Schedule against torch's LambdaLR)."""


@pytest.mark.parametrize("optimizer", ["sgd", "adamw", "sgd-cosine", "adamw-cosine"])
def test_tf_mwms_takes_torch_ddps_float64_gpt_steps_rank_by_rank(
    tmp_path: Path, shared_store: RunStore, optimizer
):
    changes = dict(ADAMW if optimizer.startswith("adamw") else {})
    if optimizer.endswith("cosine"):
        changes.update(COSINE)
    ddp_dir, run_dir = _pair(tmp_path, shared_store, "float64", **changes)
    ddp, ours = per_rank_losses(ddp_dir), per_rank_losses(run_dir)
    steps = changes.get("steps", 3)
    assert len(ours[0]) == steps and ours[0] != ours[1]  # each rank its own tokens
    assert len(set(ddp[0])) == steps  # the steps moved the loss
    for rank in (0, 1):
        assert ours[rank] == pytest.approx(ddp[rank], abs=1e-9, rel=0), rank
    theirs, mine = final_params(ddp_dir), final_params(run_dir)
    assert set(theirs) == set(mine)  # torch's names; the tied head once, as wte.weight
    for name, value in theirs.items():  # AdamW: m / sqrt(v) of a near-0 gradient: 1e-8
        assert mine[name].dtype == value.dtype == np.float64, name
        bound = 1e-8 if optimizer.startswith("adamw") else 1e-9
        np.testing.assert_allclose(mine[name], value, rtol=0, atol=bound, err_msg=name)


def test_tf_mwms_takes_torch_ddps_float32_gpt_steps(tmp_path: Path, shared_store: RunStore):
    """float32: the same first loss (the same weights and tokens; about ln 256 for random
    bytes), the later ones within the image proofs' bound."""
    ddp_dir, run_dir = _pair(tmp_path, shared_store, "float32")
    ddp, ours = per_rank_losses(ddp_dir), per_rank_losses(run_dir)
    for rank in (0, 1):
        assert ours[rank][0] == pytest.approx(ddp[rank][0], abs=1e-5, rel=0)
        assert ours[rank] == pytest.approx(ddp[rank], abs=PAPER_MODEL_TOLERANCE, rel=0)
        assert ours[rank][0] == pytest.approx(np.log(256), abs=0.1)


def test_tf_single_learns_python_source(tmp_path: Path):
    config = RunConfig.make(
        backend="tf-single",
        model="gpt-nano",
        dataset="python-source",
        n_layer=1,
        n_embd=32,
        n_head=2,
        block_size=32,
        batch_size=8,
        steps=4,
        windows=3,
        warmup_steps=0,
        comm_probe_steps=0,
        lr=0.3,
        seed=19,
        held_out_tokens=4096,
    )
    result, _ = run_completed(config, RunStore(tmp_path))
    losses = result.metrics["train_loss_by_step"]
    assert losses is not None and len(losses) == 12 and np.isfinite(losses).all(), losses
    assert np.mean(losses[:3]) > np.mean(losses[-3:]), losses
    (held_out,) = result.metrics["eval_history"]  # evaluated once, at the end, per token
    assert np.isfinite(held_out["loss"]) and held_out["loss"] < np.log(256), held_out
    assert 0 < held_out["accuracy"] < 1, held_out
    corpus = result.environment["worker"]["data"]
    assert corpus["corpus"] == "python-source" and len(corpus["sha256"]) == 64, corpus


def test_keras_fit_takes_torch_ddps_float64_adamw_cosine_steps_by_its_parameters(
    tmp_path: Path, shared_store: RunStore
):
    """Keras fit logs a running mean of the losses, so it is held by its parameters; its
    optimizer is the same TorchAdamW with the same schedule."""
    point = {**GPT, **ADAMW, **COSINE}
    ddp = RunConfig.make(backend="torch-ddp", precision="float64", **point)
    _, ddp_dir = run_completed(ddp, shared_store, study="tf-gpt-reference")
    fit = RunConfig.make(backend="keras-fit", precision="float64", **point)
    _, run_dir = run_completed(fit, RunStore(tmp_path))
    theirs, mine = final_params(ddp_dir), final_params(run_dir)
    assert set(theirs) == set(mine)
    for name, value in theirs.items():
        np.testing.assert_allclose(mine[name], value, rtol=0, atol=1e-8, err_msg=name)
