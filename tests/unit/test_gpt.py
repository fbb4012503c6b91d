"""The GPT as declared (issue 72): its sizes are what PyTorch counts, its dimensions are checked
before launch, a model and a data set of different sample kinds are refused in one line, and
the learning-rate schedule is one function."""

import math

import pytest

from dlscale.config import RunConfig
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.gpt import SIZES, dimensions
from dlscale.contract.models import MODELS, TOKEN_MODELS
from dlscale.contract.optimizers import lr_factor, training_steps
from dlscale.contract.workload import workload_of


def _gpt(**settings) -> RunConfig:
    return RunConfig.make(**{"backend": "torch-single", "model": "gpt", "dataset": "tokens",
                             **settings})  # fmt: skip


@pytest.mark.parametrize("size", TOKEN_MODELS)
def test_the_declared_sizes_are_what_pytorch_counts(size):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    spec = MODELS.get(size)
    with torch.device("meta"):
        model = spec.build(spec.default_classes, "torch", None, {})
    assert sum(p.numel() for p in model.parameters()) == spec.params
    assert spec.embedding_params == model.wte.weight.numel() + model.wpe.weight.numel()
    if spec.params > 20_000_000:
        return  # counting gpt2-small's FLOPs would compute on the CPU
    model = spec.build(spec.default_classes, "torch", None, {})
    values = dimensions({}, size)
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, values["block_size"], dtype=torch.long))
    # torch's counter counts scaled_dot_product_attention as 0 on the CPU (pytorch#195460);
    # the declared figure adds attention's two T x T products per layer
    attention = values["n_layer"] * 4 * values["block_size"] ** 2 * values["n_embd"]
    assert spec.forward_flops_per_sample == counter.get_total_flops() + attention


def test_gpt2_small_is_gpt2s_124m_parameters():
    assert MODELS.get("gpt2-small").params == 124_439_808  # nanoGPT: 124.44 M with wpe
    assert set(SIZES) == set(TOKEN_MODELS)


def test_a_gpts_dimensions_are_settings_and_change_its_sizes_and_run_id():
    small, large = _gpt(n_layer=2), _gpt(n_layer=4)
    assert small.run_id() != large.run_id()
    spec = MODELS.get("gpt")
    assert spec.sized(small.options)[0] < spec.sized(large.options)[0]
    assert workload_of(_gpt(block_size=128)).units_per_sample == 128
    assert workload_of(RunConfig.make(model="resnet20")).units_per_sample == 1


@pytest.mark.parametrize(
    ("settings", "error", "said"),
    [
        ({"n_head": 7}, UserError, "n_head = 7 does not divide n_embd = 256"),
        ({"n_layr": 2}, UnsupportedPoint, "n_layr: not an option .*did you mean n_layer"),
        ({"n_layer": 0}, UserError, "n_layer must be >= 1, got 0"),
        ({"dataset": "synthetic"}, UnsupportedPoint,
         "model gpt takes token sequences and dataset synthetic holds images: choose --dataset "
         "from python-source, token-file, tokens"),
        ({"model": "resnet20"}, UnsupportedPoint,
         "model resnet20 takes images and dataset tokens holds token sequences"),
        ({"backend": "mxnet-kv"}, UnsupportedPoint,
         r"backend mxnet-kv \(mxnet\) has no next-token task for token sequences yet"),
        ({"backend": "mxnet-kv", "model": "resnet20", "dataset": "synthetic",
          "optimizer": "adamw"}, UnsupportedPoint, "implements optimizer = sgd, not adamw"),
        ({"lr_warmup_steps": 5}, UserError, "lr_warmup_steps = 5 needs lr_schedule = cosine"),
        ({"optimizer": "adam"}, UserError, "optimizer must be one of sgd, adamw"),
        ({"backend": "torch-ps", "lr_schedule": "cosine"}, UnsupportedPoint,
         "torch-ps applies updates at its servers with a constant learning rate"),
        # it would cut the sequences to 16 tokens while tok/s counted block_size's 256
        ({"image_size": 16}, UnsupportedPoint,
         r"image_size is the side of an image.*--set block_size=N"),
    ],
)  # fmt: skip
def test_a_bad_gpt_point_is_refused_in_one_line_before_launch(settings, error, said):
    with pytest.raises(error, match=said) as refused:
        _gpt(**settings)
    assert "\n" not in str(refused.value)


def test_image_points_keep_their_run_ids():
    """Keys and the model option group added after results were stored leave earlier ids as
    they were (a store of image runs resumes)."""
    assert RunConfig.make(model="resnet44").run_id() == "resnet44-torch-ddp-synthetic-w1-83d14f8ae7"


def test_the_cosine_schedule_warms_up_linearly_then_decays_to_zero_at_the_last_step():
    config = _gpt(lr_schedule="cosine", lr_warmup_steps=4, steps=10, windows=2, warmup_steps=4)
    total = training_steps(config, steps_per_epoch=1)
    assert total == 24
    factors = [lr_factor(config, step, total) for step in range(total + 2)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[14] == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))
    assert factors[24] == factors[25] == pytest.approx(0.0)
    assert lr_factor(_gpt(), 7, total) == 1.0


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_a_frameworks_declared_tasks_are_the_tasks_its_loop_has(framework):
    """What a framework declares (read by the parent, which imports no framework) is what its
    folder's tasks.py implements (what its loops call)."""
    import importlib

    from dlscale.contract.frameworks import FRAMEWORKS

    pytest.importorskip(FRAMEWORKS.get(framework).module)
    tasks = importlib.import_module(f"dlscale.frameworks.{framework}.tasks")
    assert set(FRAMEWORKS.get(framework).tasks) == set(tasks.TASKS)


def test_a_held_out_loss_a_hair_below_zero_is_rounding_and_far_below_is_impossible():
    """A held-out set predicted almost surely sums losses of about 0, which float32 rounding
    took to -1.4e-6 nats (MXNet, CI); a loss of -0.5 no cross-entropy gives."""
    from dlscale.metrics.impossible import impossible_figures

    assert impossible_figures({"eval_loss": -1.4e-6})[1] is None
    assert "eval_loss is -0.5 nats" in (impossible_figures({"eval_loss": -0.5})[1] or "")
