"""Training FLOPs per sample (the numerator of MFU), worked out from each model's architecture
(dlscale.contract.flops, no framework) and counted by PyTorch's FlopCounterMode
(dlscale.frameworks.torch.profile), checked against each other for every built-in model.

Everything torch builds here is on the meta device (no memory, nothing computed) except the
small attention models that check the CPU's SDPA, which FlopCounterMode counts as 0 there.
"""

from __future__ import annotations

import textwrap

import pytest

from dlscale.contract.cnn_flops import analytic_forward_flops
from dlscale.contract.errors import UserError
from dlscale.contract.flops import TrainingFlops, training_flops
from dlscale.contract.gpt import forward_flops
from dlscale.contract.models import BUILT_IN, MODELS, TOKEN_MODELS

torch = pytest.importorskip("torch")
from dlscale.frameworks.torch.profile import (  # noqa: E402
    FlopsNotCounted,
    count_training_flops,
    counted_training_flops,
)

F = torch.nn.functional


def _relative(a: int, b: int) -> float:
    return abs(a - b) / max(a, b)


@pytest.mark.parametrize("name", [*BUILT_IN, *TOKEN_MODELS])
def test_analytic_and_counted_training_flops_agree(name):
    analytic = training_flops(MODELS.get(name), {})
    counted = count_training_flops(name, {})
    assert analytic is not None and analytic.source == "analytic"
    assert counted.source == "counted"
    difference = _relative(analytic.per_sample, counted.per_sample)
    assert difference < 0.02, (
        f"{name}: analytic {analytic.per_sample:,} vs counted {counted.per_sample:,} "
        f"({difference:.2%})"
    )
    if name in BUILT_IN:  # the layer tables count exactly what the counter counts
        assert analytic.per_sample == counted.per_sample, name


@pytest.mark.parametrize("name", BUILT_IN)
def test_analytic_forward_flops_are_the_declared_ones(name):
    spec = MODELS.get(name)
    analytic = analytic_forward_flops(name, spec.default_classes, spec.input_size)
    declared = spec.forward_flops_per_sample
    assert analytic is not None and declared is not None
    assert _relative(analytic, declared) < 0.02, (
        f"{name}: analytic {analytic:,}, declared {declared:,}"
    )
    assert analytic == declared, name


def test_image_models_at_another_size_are_counted_the_same_both_ways():
    sizes = {"image_size": 64, "num_classes": 100}
    for name in ("resnet20", "resnet50", "googlenet", "tiny"):
        analytic = training_flops(MODELS.get(name), {}, **sizes)
        assert analytic is not None
        assert analytic.per_sample == count_training_flops(name, {}, **sizes).per_sample, name
        assert training_flops(MODELS.get(name), {**sizes, "n_layer": 2}) == analytic, name
        assert training_flops(MODELS.get(name), {"image_size": None}) == training_flops(
            MODELS.get(name), {}
        )


def test_a_declared_image_model_not_in_the_tables():
    """A plug-in's model: 3 x what it declares, at its own size only; none declared: None."""
    from dlscale.contract.models import ModelSpec

    common = {"description": "", "input_size": 32, "default_classes": 10}
    spec = ModelSpec(name="plugin-net", has_batchnorm=False, forward_flops_per_sample=100, **common)
    flops = training_flops(spec, {})
    assert flops == TrainingFlops(per_sample=300, rule=flops.rule, source="counted")
    assert training_flops(spec, {}, image_size=64) is None
    assert training_flops(ModelSpec(name="mine", has_batchnorm=False, **common), {}) is None


def test_gpt_mini_by_hand():
    """torchtitan's rule, written out for gpt-mini: 6 layers, width 256, context 256, 256
    tokens, MLP 4 x 256, biases, head tied to the token embedding."""
    layers, d, context, vocab, hidden = 6, 256, 256, 256, 4 * 256
    norms = 2 * (2 * d)  # two LayerNorms a block, weight and bias
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # c_attn, c_proj
    mlp = (d * hidden + hidden) + (hidden * d + d)  # c_fc, c_proj
    block = norms + attention + mlp  # 1,024 + 263,168 + 525,568 = 789,760
    dense = layers * block + 2 * d + d * vocab  # + final LayerNorm + the tied head's matrix
    assert dense == 4_804_608
    per_token = 6 * dense + 12 * layers * d * context  # 28,827,648 + 4,718,592
    causal_per_token = 6 * dense + 6 * layers * d * context  # 28,827,648 + 2,359,296
    assert (per_token, causal_per_token) == (33_546_240, 31_186_944)

    flops = training_flops(MODELS.get("gpt-mini"), {})
    assert flops is not None
    assert flops.per_sample == per_token * context == 8_587_837_440
    assert flops.causal_per_sample == causal_per_token * context == 7_983_857_664
    assert "6 x (params - embedding params)" in flops.rule
    assert "tied" in flops.rule and "not halved" in flops.rule


@pytest.mark.parametrize("name", TOKEN_MODELS)
def test_gpt_rule_against_three_forward_passes(name):
    """3 x gpt.forward_flops counts only the matrix products; the rule's 6 x N also counts
    the biases and LayerNorm parameters, so it is a little more, by under 1 % (gpt-mini:
    8,587,837,440 vs 8,556,380,160, +0.37 %)."""
    spec = MODELS.get(name)
    flops = training_flops(spec, {})
    values = {o.name: o.default for o in spec.options}
    three_forwards = 3 * forward_flops(values, values["vocab_size"])
    assert flops is not None and flops.causal_per_sample is not None
    assert three_forwards < flops.per_sample < 1.01 * three_forwards, name
    assert flops.causal_per_sample < flops.per_sample, name


def test_gpt_options_change_the_count():
    small = training_flops(MODELS.get("gpt"), {"n_layer": 2, "block_size": 32})
    large = training_flops(MODELS.get("gpt"), {"n_layer": 4, "block_size": 32})
    assert small is not None and large is not None and small.per_sample < large.per_sample
    counted = count_training_flops("gpt", {"n_layer": 2, "block_size": 32})
    assert _relative(small.per_sample, counted.per_sample) < 0.02


def test_training_flops_round_trip_and_junk():
    flops = training_flops(MODELS.get("gpt-nano"), {})
    assert flops is not None
    assert TrainingFlops.from_dict(flops.to_dict()) == flops
    image = TrainingFlops(per_sample=3, rule="r", source="counted")
    assert TrainingFlops.from_dict(image.to_dict()) == image
    good = image.to_dict()
    for junk in (
        None,
        [],
        "x",
        {},
        {**good, "per_sample": -1},
        {**good, "per_sample": True},
        {**good, "per_sample": 1.5},
        {**good, "rule": None},
        {**good, "source": "guessed"},
        {**good, "causal_per_sample": "half"},
    ):
        assert TrainingFlops.from_dict(junk) is None, junk


class Attention(torch.nn.Module):
    """One linear projection to q, k, v of 2 heads, then SDPA."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x):
        batch, time, width = x.shape
        q, k, v = (
            t.view(batch, time, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, 2)
        )
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_a_users_model_with_sdpa_gets_its_attention_added_on_the_cpu():
    """torch 2.13 on the CPU runs SDPA as _scaled_dot_product_flash_attention_for_cpu, which
    FlopCounterMode counts as 0; on meta it takes the math path (two bmm, counted)."""
    time, width, heads = 8, 16, 2
    by_hand = 3 * (2 * time * width * 3 * width + 4 * heads * time * time * (width // heads))
    cpu = counted_training_flops(Attention(width, heads), torch.zeros(1, time, width))
    assert cpu.per_sample == by_hand
    assert cpu.rule.endswith("attention added analytically: the counter counted none")
    with torch.device("meta"):
        model, inputs = Attention(width, heads), torch.zeros(1, time, width)
    meta = counted_training_flops(model, inputs)
    assert meta.per_sample == by_hand and "attention added" not in meta.rule
    batch_of_4 = counted_training_flops(Attention(width, heads), torch.zeros(4, time, width))
    assert batch_of_4.per_sample == by_hand  # per sample


class Broken(torch.nn.Module):
    def forward(self, x):
        raise ValueError("shapes do not fit\nsecond line")


def test_a_forward_that_raises_is_one_line():
    with pytest.raises(FlopsNotCounted) as raised:
        counted_training_flops(Broken(), torch.zeros(1, 3))
    assert isinstance(raised.value, UserError)
    assert str(raised.value) == (
        "cannot count the FLOPs of Broken: its forward raised ValueError: shapes do not fit"
    )


def test_a_users_model_file_is_counted_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(
        textwrap.dedent(
            """
            import torch

            def build(num_classes):
                return torch.nn.Sequential(
                    torch.nn.Conv2d(3, 4, 3, padding=1),
                    torch.nn.Flatten(),
                    torch.nn.Linear(4 * 32 * 32, num_classes),
                )

            def broken(num_classes):
                class Broken(torch.nn.Module):
                    def forward(self, x):
                        raise RuntimeError("no")
                return Broken()
            """
        )
    )
    spec = MODELS.get("net.py:build")
    assert training_flops(spec, {}) is None  # a user's model declares no FLOPs
    counted = count_training_flops("net.py:build", {})
    forward = 2 * 32 * 32 * 9 * 3 * 4 + 2 * 4 * 32 * 32 * 10
    assert counted.per_sample == 3 * forward and counted.source == "counted"
    with pytest.raises(FlopsNotCounted, match=r"^cannot count the FLOPs of net\.py:broken: "):
        count_training_flops("net.py:broken", {})
