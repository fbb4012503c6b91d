"""Model zoo: every registered model builds, runs, and matches its published size and cost."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from dlscale.contract.errors import UserError  # noqa: E402
from dlscale.contract.models import MODELS  # noqa: E402
from dlscale.frameworks.torch import profile as profile_module  # noqa: E402
from dlscale.frameworks.torch.profile import ModelProfile, gradient_bytes, profile  # noqa: E402

ALL_MODELS = [name for name, spec in MODELS if spec.sample == "image"]  # GPTs: test_gpt.py
CIFAR_MODELS = [name for name, spec in MODELS if spec.input_size == 32]
BATCHNORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)

# Published parameter counts, in millions, at each model's default number of classes.
# CIFAR ResNets: He et al. 2016, "Deep Residual Learning for Image Recognition", Table 6.
# ImageNet models: torchvision's weight metadata ("num_params": resnet50 25,557,032,
# alexnet 61,100,840, googlenet 6,624,904), which our layouts reproduce exactly.
PUBLISHED_PARAMS_M = {
    "resnet20": 0.27,
    "resnet32": 0.46,
    "resnet44": 0.66,
    "resnet56": 0.85,
    "resnet110": 1.7,
    "resnet50": 25.6,
    "alexnet": 61.1,
}

# Forward FLOPs per 224x224 (32x32 for CIFAR) sample, multiply-add = 2 FLOPs, with tolerance.
# - resnet50: 4.089 G multiply-adds in torchvision's ResNet50_Weights metadata ("_ops": 4.089,
#   which torchvision labels GFLOPS but counts MACs) -> 8.18 GFLOPs. He et al. 2016, Table 1,
#   quote 3.8e9 for the original ResNet-50 whose stride sits on the first 1x1 conv; v1.5 (stride
#   on the 3x3, as built here) costs more.
# - resnet20: 40.55 M MACs -> 81.1 MFLOPs, by hand: stem 3*16*9*32*32 = 0.44M; stage 1, six
#   16->16 3x3 convs at 32x32 = 14.16M; stages 2 and 3, 12.98M each (the stride-2 first conv
#   costs half a regular one); fc 64*10. The usually quoted figure is "41M FLOPs" (i.e. MACs).
# - alexnet: 0.714 G MACs in torchvision's AlexNet_Weights metadata ("_ops": 0.714) -> 1.43 G.
REFERENCE_FLOPS = {
    "resnet50": (8.2e9, 0.05),
    "resnet20": (82e6, 0.10),
    "alexnet": (1.43e9, 0.10),
}

# 2 * (conv1 8*3*9*32*32 + conv2 16*8*9*16*16 + fc 256*10) at 32x32; biases are not counted.
TINY_FLOPS = 2 * (8 * 3 * 9 * 32 * 32 + 16 * 8 * 9 * 16 * 16 + 256 * 10)


def _build(name: str, device: str = "cpu") -> nn.Module:
    spec = MODELS.get(name)
    with torch.device(device):
        return spec.build(spec.default_classes)


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_every_model_with_a_published_count_is_registered() -> None:
    assert set(PUBLISHED_PARAMS_M) | {"googlenet", "tiny"} == set(ALL_MODELS)


@pytest.mark.parametrize("name", CIFAR_MODELS)
def test_cifar_models_forward_on_cpu(name: str) -> None:
    spec = MODELS.get(name)
    model = _build(name).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, spec.input_size, spec.input_size))
    assert out.shape == (2, spec.default_classes)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ALL_MODELS)
def test_forward_shape_at_native_size_on_meta(name: str) -> None:
    spec = MODELS.get(name)
    model = _build(name, "meta").eval()
    with torch.device("meta"):
        out = model(torch.empty(2, 3, spec.input_size, spec.input_size))
    assert out.shape == (2, spec.default_classes)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_custom_class_count(name: str) -> None:
    spec = MODELS.get(name)
    with torch.device("meta"):
        model = spec.build(7)
        out = model.eval()(torch.empty(1, 3, spec.input_size, spec.input_size))
    assert out.shape == (1, 7)


def test_googlenet_runs_on_a_small_input_on_cpu() -> None:
    model = _build("googlenet").eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 1000)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("size", [8, 13, 32, 64])
def test_tiny_runs_on_any_input_of_at_least_8(size: int) -> None:
    model = MODELS.get("tiny").build(10)
    assert model(torch.randn(2, 3, size, size)).shape == (2, 10)


def test_tiny_is_per_sample_deterministic() -> None:
    torch.manual_seed(0)
    model = MODELS.get("tiny").build(10)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        whole = model(x)
        parts = torch.cat([model(x[:1]), model(x[1:])])
    torch.testing.assert_close(whole, parts)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS_M))
def test_parameter_count_matches_published(name: str) -> None:
    expected = PUBLISHED_PARAMS_M[name] * 1e6
    assert _count(_build(name, "meta")) == pytest.approx(expected, rel=0.02)


def test_googlenet_parameter_count() -> None:
    assert 6.6e6 <= _count(_build("googlenet", "meta")) <= 7.0e6


def test_exact_parameter_counts_of_reference_layouts() -> None:
    assert _count(_build("resnet50", "meta")) == 25_557_032
    assert _count(_build("alexnet", "meta")) == 61_100_840
    assert _count(_build("googlenet", "meta")) == 6_624_904
    # conv 3*8*9+8, conv 8*16*9+16, linear 256*10+10
    assert _count(_build("tiny")) == 224 + 1168 + 2570


def test_option_a_shortcuts_add_no_parameters() -> None:
    model = _build("resnet20", "meta")
    assert not any(isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) for m in model.modules())


@pytest.mark.parametrize("name", ALL_MODELS)
def test_has_batchnorm_matches_spec(name: str) -> None:
    model = _build(name, "meta")
    found = any(isinstance(m, BATCHNORM_TYPES) for m in model.modules())
    assert found == MODELS.get(name).has_batchnorm


def test_tiny_has_no_batchnorm_or_dropout() -> None:
    model = _build("tiny")
    assert not any(isinstance(m, (*BATCHNORM_TYPES, nn.Dropout)) for m in model.modules())


@pytest.mark.parametrize("name", ["tiny", "resnet20", "resnet110", "googlenet"])
def test_same_seed_gives_identical_weights(name: str) -> None:
    torch.manual_seed(1234)
    first = _build(name).state_dict()
    torch.manual_seed(1234)
    second = _build(name).state_dict()
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def test_different_seeds_give_different_weights() -> None:
    torch.manual_seed(1)
    first = _build("tiny").state_dict()
    torch.manual_seed(2)
    second = _build("tiny").state_dict()
    assert not torch.equal(first["fc.weight"], second["fc.weight"])


@pytest.mark.parametrize("name", sorted(REFERENCE_FLOPS))
def test_forward_flops_match_reference(name: str) -> None:
    expected, tolerance = REFERENCE_FLOPS[name]
    assert profile(name).forward_flops_per_sample == pytest.approx(expected, rel=tolerance)


def test_tiny_flops_by_hand() -> None:
    assert profile("tiny").forward_flops_per_sample == TINY_FLOPS


@pytest.mark.parametrize("name", ALL_MODELS)
def test_profile_defaults(name: str) -> None:
    spec = MODELS.get(name)
    result = profile(name)
    assert isinstance(result, ModelProfile)
    assert result.name == name
    assert result.num_classes == spec.default_classes
    assert result.input_shape == (3, spec.input_size, spec.input_size)
    assert result.params == _count(_build(name, "meta"))
    assert isinstance(result.params, int)
    assert isinstance(result.forward_flops_per_sample, int)
    assert result.forward_flops_per_sample > 0


def test_profile_overrides() -> None:
    base = profile("resnet20")
    wide = profile("resnet20", num_classes=100, image_size=64)
    assert wide.num_classes == 100
    assert wide.input_shape == (3, 64, 64)
    assert wide.params == base.params + 90 * 64 + 90
    # Conv cost scales with pixels (4x); the linear layer does not.
    assert wide.forward_flops_per_sample == pytest.approx(4 * base.forward_flops_per_sample, 0.01)


def test_profile_is_frozen() -> None:
    result = profile("tiny")
    with pytest.raises(AttributeError):
        result.params = 0  # type: ignore[misc]


def test_profile_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    real = profile_module._measure
    devices: list[str] = []

    def measure(build, num_classes, shape, device):  # type: ignore[no-untyped-def]
        devices.append(device)
        if device == "meta":
            raise NotImplementedError("no meta kernel")
        return real(build, num_classes, shape, device)

    monkeypatch.setattr(profile_module, "_measure", measure)
    assert profile("tiny") == ModelProfile(
        name="tiny",
        params=224 + 1168 + 2570,
        forward_flops_per_sample=TINY_FLOPS,
        input_shape=(3, 32, 32),
        num_classes=10,
    )
    assert devices == ["meta", "cpu"]


def test_profile_unknown_model() -> None:
    with pytest.raises(UserError, match="unknown model"):
        profile("nope")


def test_gradient_bytes() -> None:
    assert gradient_bytes(25_557_032) == 102_228_128
    assert gradient_bytes(1000, dtype_bytes=2) == 2000
    assert gradient_bytes(0) == 0
    with pytest.raises(ValueError):
        gradient_bytes(-1)
    with pytest.raises(ValueError):
        gradient_bytes(10, dtype_bytes=0)


def test_dropout_is_a_key_that_reaches_every_frameworks_builder_and_keeps_earlier_run_ids():
    """Each framework draws its own dropout masks, so comparing engines step by step on AlexNet
    or GoogLeNet needs dropout off (docs/equivalence.md); runs that do not set it keep their
    ids, and a value a model cannot take is refused or skipped with one line."""
    import torch

    from dlscale.contract.errors import UnsupportedPoint
    from dlscale.contract.run_config import RunConfig

    plain = RunConfig.make(model="alexnet")
    assert plain.run_id() == "alexnet-torch-ddp-synthetic-w1-86db75f1e0"  # as before the key
    assert RunConfig.make(model="alexnet", dropout=0.5).run_id() == plain.run_id()  # its own
    assert RunConfig.make(model="resnet20", dropout=0.0).dropout is None  # has none anyway
    assert RunConfig.make(model="alexnet", dropout=0.0).run_id() != plain.run_id()
    for model in ("alexnet", "googlenet"):
        net = MODELS.get(model).build(10, "torch", dropout=0.0)
        rates = [m.p for m in net.modules() if isinstance(m, torch.nn.Dropout)]
        assert rates and set(rates) == {0.0}
        assert MODELS.get(model).dropout_kwargs(0.25) == {"dropout": 0.25}
    assert MODELS.get("resnet20").dropout_kwargs(0.25) == {}
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(UserError, match="dropout must"):
            RunConfig.make(model="alexnet", dropout=bad)
    with pytest.raises(UnsupportedPoint, match="model resnet20 has no dropout to set"):
        RunConfig.make(model="resnet20", dropout=0.3)
