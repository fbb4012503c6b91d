"""The Keras GPT computes what the PyTorch GPT computes (frameworks/tensorflow/gpt.py).

With the torch twin's initial weights copied in: the same parameter count, the same logits in
float32 (rtol 1e-4), the same losses over 3 steps of PyTorch's SGD (momentum, weight decay) in
float64 to 1e-9, the trained parameters read back under torch's names; tied and untied heads,
with and without biases. The token pipeline gives the numpy batches, int64.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dlscale.contract.models import MODELS
from dlscale.frameworks.torch.weights import torch_state

pytestmark = pytest.mark.twins

DIMS = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)
VOCAB, BATCH = 50, 4
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 5e-4


@functools.cache
def _tf() -> SimpleNamespace:
    from dlscale.frameworks.tensorflow import gpt, transfer
    from dlscale.frameworks.tensorflow.env import import_tensorflow
    from dlscale.frameworks.tensorflow.sgd import TorchSGD
    from dlscale.frameworks.tensorflow.tasks import TASKS

    return SimpleNamespace(
        tf=import_tensorflow(), gpt=gpt, transfer=transfer, TorchSGD=TorchSGD, task=TASKS
    )


def _pair(floatx: str = "float32", **changes: object):
    dims = {**DIMS, **changes}
    torch.manual_seed(0)
    torch_model = MODELS.get("gpt").build(VOCAB, "torch", options=dims)
    tf = _tf().tf
    tf.keras.backend.set_floatx(floatx)
    try:
        keras_model = MODELS.get("gpt").build(VOCAB, "tensorflow", options=dims)
    finally:
        tf.keras.backend.set_floatx("float32")
    state = torch_state(torch_model)
    _tf().transfer.load_torch_weights(
        keras_model, {key: value.astype(floatx) for key, value in state.items()}
    )
    return torch_model, keras_model


def _batches(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, VOCAB, (BATCH, DIMS["block_size"] + 1)) for _ in range(count)]
    return [(t[:, :-1].astype(np.int64), t[:, 1:].astype(np.int64)) for t in tokens]


CASES = {
    "tied": {},
    "untied-without-bias": {"tie_embeddings": False, "bias": False},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_keras_gpt_takes_the_torch_gpts_steps(case: str) -> None:
    torch_model, keras_model = _pair(**CASES[case])
    trainable = sum(p.numel() for p in torch_model.parameters())
    assert sum(int(np.prod(w.shape)) for w in keras_model.trainable_weights) == trainable
    x, _ = _batches(1)[0]
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(x)).numpy()
    got = keras_model(x, training=False).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    torch_model, keras64 = _pair("float64", **CASES[case])
    torch_model = torch_model.double().train()
    opt = torch.optim.SGD(
        torch_model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY
    )
    keras_opt = _tf().TorchSGD(learning_rate=LR, momentum=MOMENTUM, l2=WEIGHT_DECAY)
    theirs, ours = _step_both(torch_model, opt, keras64, keras_opt, _batches(3))
    assert len(set(theirs)) == 3
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
    saved = _tf().transfer.keras_state(keras64, parameters_only=True)
    named = {n: p.detach().numpy() for n, p in torch_model.named_parameters()}
    assert saved.keys() == named.keys()
    for name, value in named.items():
        np.testing.assert_allclose(saved[name], value, rtol=0, atol=1e-9, err_msg=name)
    whole = _tf().transfer.keras_state(keras64)
    assert whole.keys() == torch_model.state_dict().keys()


def test_a_tied_head_that_is_not_tied_is_refused() -> None:
    torch_model, keras_model = _pair()
    state = torch_state(torch_model)
    state["lm_head.weight"] = state["lm_head.weight"] + 1
    with pytest.raises(ValueError, match="not tied"):
        _tf().transfer.load_torch_weights(keras_model, state)


def test_token_batches_are_the_numpy_ones_in_int64() -> None:
    from dlscale.datasets.tokens import TokenArrays
    from dlscale.frameworks.tensorflow.data import to_tf

    rng = np.random.default_rng(1)
    parts = tuple(rng.integers(0, VOCAB, 400, dtype=np.uint16) for _ in range(2))
    data = TokenArrays(
        name="t",
        train=parts,
        held_out=rng.integers(0, VOCAB, 300, dtype=np.uint16),
        block_size=8,
        num_classes=VOCAB,
        batch=3,
        seed=0,
        shard=0,
        shards=2,
        replicas=2,
    )
    tf_data = to_tf(data, "float64")
    for epoch in (0, 1):
        expected = list(data.train_batches(epoch))
        got = [(x.numpy(), y.numpy()) for x, y in tf_data.train_batches(epoch)]
        assert len(got) == len(expected) == data.steps_per_epoch
        for (gx, gy), (ex, ey) in zip(got, expected, strict=True):
            assert gx.dtype == gy.dtype == np.int64
            np.testing.assert_array_equal(gx, ex)
            np.testing.assert_array_equal(gy, ey)
        second = [x.numpy() for x, _ in tf_data.train_batches(epoch, part=(1, 3))]
        np.testing.assert_array_equal(second[0], expected[0][0][3:])
    stream = iter(tf_data.train_stream(0, 2))
    np.testing.assert_array_equal(next(stream)[0].numpy(), list(data.train_batches(0))[2][0])
    held = [(x.numpy(), y.numpy()) for x, y in tf_data.eval_batches()]
    for (gx, gy), (ex, ey) in zip(held, data.eval_batches(), strict=True):
        np.testing.assert_array_equal(gx, ex)
        np.testing.assert_array_equal(gy, ey)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_torch_adamw_in_keras_takes_torch_adamws_steps(precision: str) -> None:
    """frameworks/tensorflow/sgd.py's TorchAdamW against torch.optim.AdamW (decoupled weight
    decay, bias correction, the contract's betas and eps) on the GPT: 5 steps' losses and the
    trained parameters, to 1e-9 in float64 (the parameters to 1e-8) and to float32 rounding in
    float32."""
    from dlscale.contract.optimizers import ADAMW_BETAS, ADAMW_EPS
    from dlscale.frameworks.tensorflow.sgd import TorchAdamW

    lr, decay = 3e-3, 0.1
    torch_model, keras_model = _pair(precision)
    torch_model = torch_model.to(getattr(torch, precision)).train()
    opt = torch.optim.AdamW(
        torch_model.parameters(), lr=lr, betas=ADAMW_BETAS, eps=ADAMW_EPS, weight_decay=decay
    )
    beta_1, beta_2 = ADAMW_BETAS
    keras_opt = TorchAdamW(lr, beta_1, beta_2, ADAMW_EPS, decay)
    # one batch again and again: its loss must fall
    theirs, ours = _step_both(torch_model, opt, keras_model, keras_opt, _batches(1) * 5)
    bound = 1e-9 if precision == "float64" else 1e-4
    assert theirs == sorted(theirs, reverse=True) and len(set(theirs)) == 5
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=bound)
    # a parameter whose gradient is near 0 moves by m / sqrt(v), which turns the gradients'
    # float64 rounding (1e-16 of the loss) into 2e-9 for a few of them (measured): 1e-8
    saved = _tf().transfer.keras_state(keras_model, parameters_only=True)
    for name, p in torch_model.named_parameters():
        np.testing.assert_allclose(saved[name], p.detach().numpy(), rtol=0, atol=bound * 10)


def _step_both(torch_model, opt, keras_model, keras_opt, batches):
    """Each batch's next-token loss and step, in torch and in Keras: the two loss lists."""
    tf, task = _tf().tf, _tf().task["next-token"]
    theirs, ours = [], []
    for x, y in batches:
        logits = torch_model(torch.from_numpy(x))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), torch.from_numpy(y).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        theirs.append(loss.item())
        with tf.GradientTape() as tape:
            keras_loss = task.loss(y, keras_model(x, training=True))
        variables = keras_model.trainable_weights
        grads = tape.gradient(keras_loss, variables)
        keras_opt.apply_gradients(zip(grads, variables, strict=True))
        ours.append(float(keras_loss))
    return theirs, ours
