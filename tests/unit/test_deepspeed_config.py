"""The deepspeed-zero* backends as data: the DeepSpeed configuration a run passes to
``deepspeed.initialize``, their options and the points refused before launch (no DeepSpeed
import: the parent and ``dlscale ls`` run without it)."""

from __future__ import annotations

import sys

import pytest

from dlscale.config import RunConfig
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.frameworks.deepspeed.options import deepspeed_config
from dlscale.frameworks.deepspeed.zero import modelled_bytes, pattern


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_configuration_is_ddps_batch_and_update_with_the_stage(stage):
    config = RunConfig.make(backend=f"deepspeed-zero{stage}", batch_size=16, workers=4)
    ds = deepspeed_config(config, stage, 4)
    assert ds["train_micro_batch_size_per_gpu"] == 16
    assert ds["gradient_accumulation_steps"] == 1
    assert ds["train_batch_size"] == 64  # DeepSpeed checks micro x accumulation x world
    assert ds["gradient_clipping"] == 0.0  # DeepSpeed's default 1.0 would change the update
    assert ds["zero_allow_untested_optimizer"] is True  # the run's SGD
    zero = ds["zero_optimization"]
    assert zero["stage"] == stage and zero["overlap_comm"] is False
    assert ("stage3_param_persistence_threshold" in zero) == (stage == 3)
    assert ("allgather_bucket_size" in zero) == (stage < 3)
    assert "fp16" not in ds and "bf16" not in ds and "optimizer" not in ds


def test_a_stages_options_reach_the_configuration_and_are_in_the_run_id():
    plain = RunConfig.make(backend="deepspeed-zero3")
    tuned = RunConfig.make(
        backend="deepspeed-zero3",
        stage3_param_persistence_threshold=0,
        gradient_clipping=1.0,
        overlap_comm=True,
    )
    zero = deepspeed_config(tuned, 3, 2)
    assert zero["gradient_clipping"] == 1.0
    assert zero["zero_optimization"]["stage3_param_persistence_threshold"] == 0
    assert zero["zero_optimization"]["overlap_comm"] is True
    assert plain.run_id() != tuned.run_id()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"backend": "deepspeed-zero4"}, "deepspeed-zero"),
        ({"backend": "deepspeed-zero2", "gradient_clipping": -1}, "gradient_clipping"),
        ({"backend": "deepspeed-zero2", "gradient_clipping": float("nan")}, "gradient_clipping"),
        ({"backend": "deepspeed-zero1", "reduce_bucket_size": 0}, "reduce_bucket_size"),
        ({"backend": "deepspeed-zero2", "reduce_bucket_size": "lots"}, "reduce_bucket_size"),
        # past what any machine holds (DeepSpeed allocates the bucket as the engine starts)
        ({"backend": "deepspeed-zero2", "reduce_bucket_size": 10**20}, "at most"),
        ({"backend": "deepspeed-zero3", "stage3_max_live_parameters": 2**37}, "at most"),
        # DeepSpeed aligns its all-gather buffers to 4 bytes of 16-bit elements
        ({"backend": "deepspeed-zero1", "allgather_bucket_size": 3}, "multiple of 2"),
        # a ZeRO-3 setting on ZeRO-2, which has no such thing
        ({"backend": "deepspeed-zero2", "stage3_max_live_parameters": 5}, "stage3_max_live"),
        ({"backend": "deepspeed-zero3", "allgather_bucket_size": 5}, "allgather_bucket_size"),
    ],
)
def test_bad_settings_are_refused_in_one_line(settings, expected):
    with pytest.raises(UserError, match=expected) as refused:
        RunConfig.make(**settings)
    assert "\n" not in str(refused.value)


def test_compile_and_float64_are_refused_naming_why():
    with pytest.raises(UnsupportedPoint, match=r"engine\.compile"):
        RunConfig.make(backend="deepspeed-zero1", compile=True)
    with pytest.raises(UnsupportedPoint, match="communication_data_type"):
        RunConfig.make(backend="deepspeed-zero3", precision="float64")


def test_the_model_of_each_stage_in_bytes():
    config = RunConfig.make(backend="deepspeed-zero3")
    # ZeRO-1/2: all-reduce + all-gather of 1 MB at 4 workers, 3 x 3/4 MB
    assert modelled_bytes(1, 4, 1_000_000, 0, config) == 2_250_000
    assert modelled_bytes(2, 1, 1_000_000, 0, config) == 0
    # ZeRO-3, the whole model within the reuse distance: one gather of what is sharded, the
    # reduce-scatter of every gradient, an all-gather of what stays whole after the update
    assert modelled_bytes(3, 4, 1_000_000, 600_000, config) == round(0.75 * 2_000_000)
    assert pattern(3, 1_000_000, config) == "fsdp-no-reshard"
    assert pattern(1, 1_000_000, config) == "fsdp"
    close = RunConfig.make(backend="deepspeed-zero3", stage3_max_reuse_distance=10)
    assert modelled_bytes(3, 4, 1_000_000, 600_000, close) == round(0.75 * 2_600_000)
    assert pattern(3, 1_000_000, close) == "fsdp"


def test_declaring_the_backends_imports_neither_torch_nor_deepspeed():
    assert {"deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3"} <= set(BACKENDS.names())
    import subprocess

    code = (
        "import sys, dlscale.frameworks.deepspeed.plugin, dlscale.frameworks.deepspeed.options;"
        "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
