"""The Flax GPT computes what PyTorch's computes (dlscale.frameworks.jax.gpt against
dlscale.frameworks.torch.models.gpt), and the JAX engines' AdamW and cosine schedule are
PyTorch's (dlscale.frameworks.jax.steps against torch.optim.AdamW and LambdaLR).

In float64 from the same weights: the logits of a tied GPT with biases and of an untied one
without, to 1e-12; the written-out causal attention against ``scaled_dot_product_attention``;
3 AdamW steps under the cosine schedule against PyTorch's optimizer and scheduler. Every named
GPT's Flax twin has the parameters :mod:`dlscale.contract.gpt` counts (shapes only). The
computations run in a process of their own, as tests/unit/test_flax_twins.py's do (JAX beside
TensorFlow took a pytest-xdist worker down)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlscale

pytestmark = pytest.mark.twins

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, math
from types import SimpleNamespace

import numpy as np
import torch

from dlscale.contract.gpt import SIZES, dimensions, parameter_counts
from dlscale.contract.models import MODELS, TOKEN_MODELS
from dlscale.contract.optimizers import lr_factor
from dlscale.frameworks.jax import steps, transfer
from dlscale.frameworks.jax.env import import_jax
from dlscale.frameworks.jax.gpt import causal_attention
from dlscale.frameworks.torch.models.gpt import gpt as torch_gpt

jax = import_jax(threads=1, precision="float64")
out = {}


def state_of(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def variables(model, state, dtype="float64"):
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), np.zeros((1, 4), np.int64), train=False)
    )
    return transfer.load_torch_state(shapes, state, dtype, model.tied)


for case, dims in {
    "tied": dict(n_layer=2, n_head=2, n_embd=32, block_size=16),
    "untied": dict(n_layer=1, n_head=4, n_embd=32, block_size=16, mlp_ratio=2,
                   tie_embeddings=False, bias=False),
}.items():
    torch.manual_seed(0)
    theirs = torch_gpt(50, **dims).double()
    ours = MODELS.get("gpt").build(50, "jax", options=dims)
    loaded = variables(ours, state_of(theirs))
    names = {k: v.shape for k, v in transfer.flatten(dict(loaded["params"])).items()}
    idx = np.random.default_rng(1).integers(0, 50, (3, 16))
    with torch.no_grad():
        expected = theirs(torch.from_numpy(idx)).numpy()
    got = np.asarray(ours.apply(loaded, idx, train=False))
    out[case] = {
        "names": names == {n: tuple(p.shape) for n, p in theirs.named_parameters()},
        "error": float(np.max(np.abs(got - expected))),
        "scale": float(np.max(np.abs(expected))),
    }

# the tied head must be the embedding: a state whose lm_head differs is refused
torch.manual_seed(0)
theirs = torch_gpt(50, n_layer=1, n_head=2, n_embd=8, block_size=4, tie_embeddings=False)
ours = MODELS.get("gpt").build(50, "jax", options=dict(n_layer=1, n_head=2, n_embd=8, block_size=4))
try:
    variables(ours, state_of(theirs))
    out["untied_refused"] = ""
except ValueError as error:
    out["untied_refused"] = str(error)

# dropout: training draws masks from the key, evaluation none
dropping = MODELS.get("gpt").build(
    50, "jax", dropout=0.5, options=dict(n_layer=1, n_head=2, n_embd=8, block_size=4)
)
torch.manual_seed(0)
loaded = variables(dropping, state_of(torch_gpt(50, n_layer=1, n_head=2, n_embd=8, block_size=4)))
idx = np.arange(8).reshape(2, 4)
runs = [np.asarray(dropping.apply(loaded, idx, train=True, rngs={"dropout": jax.random.PRNGKey(k)}))
        for k in (0, 1)]
still = [np.asarray(dropping.apply(loaded, idx, train=False)) for _ in range(2)]
out["dropout"] = [bool(np.any(runs[0] != runs[1])), bool(np.all(still[0] == still[1]))]

# causal attention against PyTorch's SDPA
rng = np.random.default_rng(2)
q, k, v = (rng.standard_normal((2, 16, 4, 8)) for _ in range(3))
sdpa = torch.nn.functional.scaled_dot_product_attention(
    *(torch.from_numpy(t).transpose(1, 2) for t in (q, k, v)), is_causal=True
).transpose(1, 2).numpy()
out["attention"] = float(np.max(np.abs(np.asarray(causal_attention(q, k, v)) - sdpa)))

# AdamW under the cosine schedule: 3 steps of PyTorch's optimizer and LambdaLR, and the engine's
cfg = SimpleNamespace(optimizer="adamw", lr_schedule="cosine", lr_warmup_steps=1,
                      weight_decay=0.1, effective_lr=0.01, momentum=0.9)
total = 3
start = {"a": rng.standard_normal((5, 3)), "b": rng.standard_normal(3)}
grads = [{n: rng.standard_normal(p.shape) for n, p in start.items()} for _ in range(total)]
tensors = {n: torch.tensor(p, requires_grad=True) for n, p in start.items()}
optimizer = torch.optim.AdamW(tensors.values(), lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                              weight_decay=0.1)
schedule = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: lr_factor(cfg, s, total)
)
params = {n: np.array(p) for n, p in start.items()}
state = {name: {n: np.zeros_like(p) for n, p in start.items()} for name in steps.STATE["adamw"]}
update = jax.jit(lambda p, s, g, r: steps.UPDATES["adamw"](p, s, g, r, cfg))
for step, grad in enumerate(grads):
    for n, t in tensors.items():
        t.grad = torch.from_numpy(grad[n])
    optimizer.step()
    schedule.step()
    lr = cfg.effective_lr * lr_factor(cfg, step, total)
    params, state = update(params, state, grad, np.asarray(steps.rates(cfg, lr, step)))
out["adamw"] = max(
    float(np.max(np.abs(np.asarray(params[n]) - t.detach().numpy()))) for n, t in tensors.items()
)
out["adamw_moved"] = max(float(np.max(np.abs(np.asarray(params[n]) - start[n]))) for n in start)

# every named GPT's twin: the parameters dlscale.contract.gpt counts (shapes, nothing computed)
counts = {}
for size in TOKEN_MODELS:
    values = dimensions({}, size)
    spec = MODELS.get(size)
    model = spec.build(values["vocab_size"], "jax", options=values)
    tree = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), np.zeros((1, 2), np.int64), train=False)
    )
    ours = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(tree["params"]))
    counts[size] = [ours, parameter_counts(values, values["vocab_size"])[0]]
out["counts"] = counts
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def checks() -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{Path(dlscale.__file__).parents[1]}"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("case", ["tied", "untied"])
def test_the_flax_gpt_computes_pytorchs_logits_in_float64(checks, case: str) -> None:
    row = checks[case]
    assert row["names"]  # PyTorch's parameter names and shapes (the tied head once)
    assert row["error"] <= 1e-12 and row["scale"] > 0.01, row


def test_a_head_that_is_not_the_embedding_is_refused(checks) -> None:
    assert "lm_head.weight is not wte.weight" in checks["untied_refused"]


def test_dropout_draws_masks_in_training_only(checks) -> None:
    assert checks["dropout"] == [True, True]


def test_the_written_out_causal_attention_is_pytorchs(checks) -> None:
    assert checks["attention"] <= 1e-12


def test_adamw_under_the_cosine_schedule_takes_pytorchs_steps(checks) -> None:
    assert checks["adamw"] <= 1e-12 and checks["adamw_moved"] > 1e-3, checks


def test_every_named_gpt_has_the_parameters_the_contract_counts(checks) -> None:
    for size, (ours, counted) in checks["counts"].items():
        assert ours == counted, size
    assert np.isclose(checks["counts"]["gpt2-small"][0], 124.4e6, rtol=0.01)
