"""What a hostile or careless user types at the deepspeed-zero* backends, refused before launch.

Every case is one line naming the setting (and, where there is one, the way out), raised while
the point's config is built, so ``--dry-run`` says it and nothing starts: a misspelt or cased
stage, numbers no option can take (negative, NaN, infinities, past a float, text, a list, a
bool for a count), a ZeRO-3 setting on ZeRO-1 or -2 and the reverse, ``compile``, ``float64``,
``fp16``, and ``max_restarts`` under torchrun (ZeRO is not resumable). No torch or DeepSpeed
import: the parent refuses these without them."""

from __future__ import annotations

import pytest

from dlscale.config import RunConfig
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.launchers.torchrun import TorchrunLauncher

ZERO12_COUNTS = ("reduce_bucket_size", "allgather_bucket_size")
ZERO3_COUNTS = (
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
)
BOOLS = ("contiguous_gradients", "overlap_comm")


def _refused(**settings) -> str:
    with pytest.raises(UserError) as refused:
        RunConfig.make(**settings)
    message = str(refused.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    "backend", ["deepspeed-zero0", "deepspeed-zero4", "", "deepspeed-zero*", "deepspeed-zero2 3"]
)
def test_a_stage_that_does_not_exist_is_refused_naming_the_real_ones(backend):
    message = _refused(backend=backend)
    assert "unknown backend" in message and "deepspeed-zero2" in message


@pytest.mark.parametrize(
    "value", ["-1", "nan", "inf", "-inf", "1e400", "text", "", "[1,2]", "true", -0.5]
)
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_gradient_clipping_takes_only_a_finite_number_from_0(stage, value):
    assert "gradient_clipping" in _refused(
        backend=f"deepspeed-zero{stage}", gradient_clipping=value
    )


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e400", "1e9", "1.5", "lots", ""])
@pytest.mark.parametrize("option", ZERO12_COUNTS)
def test_a_zero12_count_takes_only_a_whole_number_from_1(option, value):
    assert option in _refused(backend="deepspeed-zero2", **{option: value})


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400", "1.5", "text", "", True])
@pytest.mark.parametrize("option", ZERO3_COUNTS)
def test_a_zero3_count_takes_only_a_whole_number_from_0(option, value):
    assert option in _refused(backend="deepspeed-zero3", **{option: value})


@pytest.mark.parametrize("value", ["maybe", "2", "", "nan"])
@pytest.mark.parametrize(("stage", "option"), [(2, "reduce_scatter"), (3, "contiguous_gradients"),
                                               (1, "overlap_comm")])  # fmt: skip
def test_a_switch_takes_only_a_bool(stage, option, value):
    assert option in _refused(backend=f"deepspeed-zero{stage}", **{option: value})


@pytest.mark.parametrize("option", ZERO3_COUNTS)
@pytest.mark.parametrize("stage", [1, 2])
def test_a_zero3_setting_on_zero1_or_2_is_not_an_option_of_it(stage, option):
    with pytest.raises(UnsupportedPoint, match=f"{option}: not an option of backend "
                       f"deepspeed-zero{stage}"):  # fmt: skip
        RunConfig.make(backend=f"deepspeed-zero{stage}", **{option: 5})


@pytest.mark.parametrize("option", ["allgather_bucket_size", "reduce_scatter"])
def test_a_zero12_setting_on_zero3_is_not_an_option_of_it(option):
    with pytest.raises(UnsupportedPoint, match=f"{option}: not an option of backend "
                       "deepspeed-zero3"):  # fmt: skip
        RunConfig.make(backend="deepspeed-zero3", **{option: 2})


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_compile_float64_and_fp16_are_refused_naming_the_way_out(stage):
    backend = f"deepspeed-zero{stage}"
    assert "compile = false" in _refused(backend=backend, compile=True)
    refused = _refused(backend=backend, precision="float64")
    assert "float32 only" in refused and "torch-ddp" in refused  # who can, named
    assert "amp" in _refused(backend=backend, amp="fp16")


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_options_a_user_may_set_are_taken_and_reach_deepspeeds_configuration(stage):
    from dlscale.frameworks.deepspeed.options import deepspeed_config

    extra = (
        {"stage3_max_live_parameters": 0, "stage3_prefetch_bucket_size": 0}
        if stage == 3
        else {"reduce_scatter": False, "allgather_bucket_size": 2}
    )
    config = RunConfig.make(
        backend=f"deepspeed-zero{stage}",
        gradient_clipping="1e308",
        reduce_bucket_size=1,
        overlap_comm="yes",
        amp="bf16",
        optimizer="adamw",
        lr_schedule="cosine",
        **extra,
    )
    zero = deepspeed_config(config, stage, 2)["zero_optimization"]
    assert zero["reduce_bucket_size"] == 1 and zero["overlap_comm"] is True
    assert all(zero[key] == value for key, value in extra.items())


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_torchrun_restarts_are_refused_before_launch_since_zero_cannot_resume(stage):
    config = RunConfig.make(
        backend=f"deepspeed-zero{stage}", launcher="torchrun", max_restarts=1, workers=2
    )
    with pytest.raises(UserError) as refused:
        TorchrunLauncher().check_point(config)
    message = str(refused.value)
    assert f"deepspeed-zero{stage} cannot resume" in message and "\n" not in message
    assert "torch-ddp" in message  # who can
    plain = RunConfig.make(backend=f"deepspeed-zero{stage}", launcher="torchrun", workers=2)
    TorchrunLauncher().check_point(plain)  # without restarts: runs
