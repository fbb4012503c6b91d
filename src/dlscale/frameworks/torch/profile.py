"""Static cost profile of a registered model: parameters and forward FLOPs per sample.

What is counted, exactly:

* ``params``: the number of trainable parameters (``requires_grad``) of the model built for
  ``num_classes`` classes. BatchNorm running statistics are buffers and are not counted;
  BatchNorm affine weights and biases are.
* ``forward_flops_per_sample``: the FLOPs of one forward pass of one image at
  ``image_size x image_size``, as counted by :class:`torch.utils.flop_counter.FlopCounterMode`.
  That counter covers convolutions and matrix products only (``convolution``, ``mm``,
  ``addmm``, ``bmm``, ``baddbmm`` and attention kernels, so every ``Conv2d`` and ``Linear``),
  and counts one multiply-add as 2 FLOPs: a convolution costs
  ``2 * C_out * H_out * W_out * C_in / groups * k_h * k_w``, a linear layer
  ``2 * in_features * out_features``. Bias additions, BatchNorm, activations (ReLU), pooling,
  residual additions, concatenation, dropout and softmax are NOT counted; they are a few percent
  of the total for the convolutional networks here. Divide by 2 for multiply-accumulates (MACs),
  the unit most papers quote. The backward pass costs about twice the forward.

The model is built on PyTorch's ``meta`` device, and the counter runs on a meta input of batch 1,
so profiling allocates no real memory and computes nothing; if a model cannot run on ``meta``,
the profile falls back to the CPU.

Training FLOPs (:func:`counted_training_flops`, :func:`count_training_flops`): 3 x the counted
forward, as :class:`dlscale.contract.flops.TrainingFlops` with ``source="counted"``.
``scaled_dot_product_attention`` is counted by the counter on ``meta`` (PyTorch's math path:
two ``bmm`` over the whole ``T x T`` square, the causal mask not halving it), but on the CPU
(torch 2.13) it dispatches to ``_scaled_dot_product_flash_attention_for_cpu``, which the
counter has no formula for and counts as 0; there the attention's two products are added
analytically (``4 x B x H x T_q x T_k x head_dim``), and the rule says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.flops import TrainingFlops
from dlscale.contract.models import MODELS

__all__ = [
    "FlopsNotCounted",
    "ModelProfile",
    "count_training_flops",
    "counted_training_flops",
    "gradient_bytes",
    "profile",
]

INPUT_CHANNELS = 3


@dataclass(frozen=True)
class ModelProfile:
    """Parameter count and forward cost of one model at one input size."""

    name: str
    params: int
    """Trainable parameters."""
    forward_flops_per_sample: int
    """FLOPs (multiply-add = 2) of conv/linear/matmul in one forward pass of one image."""
    input_shape: tuple[int, int, int]
    """``(C, H, W)`` of one input image."""
    num_classes: int


def profile(
    name: str, num_classes: int | None = None, image_size: int | None = None
) -> ModelProfile:
    """Profile the registered model ``name`` (see the module docstring for what is counted)."""
    spec = MODELS.get(name)
    classes = spec.default_classes if num_classes is None else num_classes
    size = spec.input_size if image_size is None else image_size
    shape = (INPUT_CHANNELS, size, size)
    try:
        params, flops = _measure(spec.build, classes, shape, "meta")
    except (NotImplementedError, RuntimeError):
        params, flops = _measure(spec.build, classes, shape, "cpu")
    return ModelProfile(
        name=spec.name,
        params=params,
        forward_flops_per_sample=flops,
        input_shape=shape,
        num_classes=classes,
    )


def _measure(
    build: Callable[[int], Any], num_classes: int, shape: tuple[int, int, int], device: str
) -> tuple[int, int]:
    """Build on ``device``, count trainable parameters, count FLOPs of a batch-1 forward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device(device):
        model = build(num_classes)
        inputs = torch.zeros((1, *shape))
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    model.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(inputs)
    return int(params), int(counter.get_total_flops())


def gradient_bytes(params: int, dtype_bytes: int = 4) -> int:
    """Bytes of one full gradient, the payload of one all-reduce: ``params * dtype_bytes``."""
    if params < 0 or dtype_bytes <= 0:
        raise ValueError(f"need params >= 0 and dtype_bytes > 0, got {params}, {dtype_bytes}")
    return params * dtype_bytes


COUNTED_RULE = (
    "3 x forward as FlopCounterMode counts it; conv, linear, matmul: 2 FLOPs a multiply-add"
)
"""The rule of a counted :class:`TrainingFlops`."""
ATTENTION_ADDED = "; attention added analytically: the counter counted none"
"""Appended to :data:`COUNTED_RULE` where some ``scaled_dot_product_attention`` was counted 0."""


class FlopsNotCounted(UserError):
    """The model could not be counted: its forward raised under the counter, or it cannot be
    built here. ``str(error)`` is one line naming the model and the cause (a
    :class:`~dlscale.contract.errors.UserError`: the command line shows just that line)."""


def counted_training_flops(model: Any, sample_input: Any) -> TrainingFlops:
    """Training FLOPs of one sample of a torch ``model`` (an ``nn.Module``) given one sample's
    input (a batch of 1; a larger batch is divided by its size): 3 x the forward FLOPs
    ``FlopCounterMode`` counts, with ``scaled_dot_product_attention`` added analytically
    wherever the counter counted 0 for it (see the module docstring). Runs on the device the
    model and input are on (``meta``: nothing computed). Raises :class:`FlopsNotCounted`
    where the forward raises."""
    try:
        forward, added = _count_forward(model, sample_input)
    except Exception as error:
        raise FlopsNotCounted(_cannot(type(model).__name__, error)) from error
    batch = int(sample_input.shape[0]) if getattr(sample_input, "ndim", 0) else 1
    rule = COUNTED_RULE + (ATTENTION_ADDED if added else "")
    return TrainingFlops(per_sample=3 * forward // max(batch, 1), rule=rule, source="counted")


def count_training_flops(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    image_size: int | None = None,
    num_classes: int | None = None,
) -> TrainingFlops:
    """Build the registered model ``name`` (built-in, a plug-in's, a user's ``MODULE:FUNCTION``
    or a library's ``torchvision:NAME``) with its torch builder and count its training FLOPs
    per sample (:func:`counted_training_flops`): on the ``meta`` device, else (a model that
    cannot be built or run there) on the CPU. ``options``: the run's resolved model options (a
    GPT's dimensions); an image model takes ``image_size x image_size`` images and has
    ``num_classes`` outputs (given as keywords or as keys of ``options``; ``None`` or absent:
    the model's own). Raises :class:`FlopsNotCounted` (one line) where it cannot be counted,
    and a user's model's own :class:`UserError` where it cannot be built."""
    import torch

    spec, values = MODELS.get(name), dict(options or {})
    if "torch" not in spec.builders:
        raise FlopsNotCounted(f"cannot count the FLOPs of {name}: it has no PyTorch model")
    shape: tuple[int, ...]
    if spec.sample == "tokens":
        context, classes = spec.input_shape(values)
        shape, dtype = (1, context), torch.long
    else:
        size = int(image_size or values.get("image_size") or spec.input_size)
        classes = int(num_classes or values.get("num_classes") or spec.default_classes)
        shape, dtype = (1, INPUT_CHANNELS, size, size), torch.float32
    try:
        with torch.device("meta"):
            model, inputs = spec.build(classes, options=values), torch.zeros(shape, dtype=dtype)
        forward, added = _count_forward(model, inputs)
    except Exception:  # a model that cannot be built or run on meta: count it on the CPU
        with torch.device("cpu"):
            model, inputs = spec.build(classes, options=values), torch.zeros(shape, dtype=dtype)
        try:
            forward, added = _count_forward(model, inputs)
        except Exception as error:
            raise FlopsNotCounted(_cannot(name, error)) from error
    rule = COUNTED_RULE + (ATTENTION_ADDED if added else "")
    return TrainingFlops(per_sample=3 * forward, rule=rule, source="counted")


def _cannot(what: str, error: BaseException) -> str:
    said = str(error).strip().splitlines()
    return f"cannot count the FLOPs of {what}: its forward raised {type(error).__name__}" + (
        f": {said[0]}" if said else ""
    )


def _count_forward(model: Any, inputs: Any) -> tuple[int, bool]:
    """``(forward FLOPs, whether attention was added)`` of ``model(inputs)`` under the
    counter, in eval mode without gradients (the model's mode is restored)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    spy = _attention_spy(counter)
    training = model.training
    model.eval()
    try:
        with torch.no_grad(), counter, spy:
            model(inputs)
    finally:
        model.train(training)
    return int(counter.get_total_flops()) + spy.added, spy.added > 0


def _attention_spy(counter: Any) -> Any:
    """A torch function mode that watches every ``scaled_dot_product_attention`` call: where
    ``counter`` counted 0 for it, it adds the call's FLOPs (:func:`_attention_flops`) to its
    ``added``. (Defined here, not at import: this module imports torch only when it counts.)"""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class AttentionSpy(TorchFunctionMode):
        added = 0

        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func is not F.scaled_dot_product_attention:
                return func(*args, **kwargs)
            before = counter.get_total_flops()
            out = func(*args, **kwargs)
            if counter.get_total_flops() == before:
                named = [kwargs.get(k) for k in ("query", "key", "value")]
                self.added += _attention_flops(*(list(args[:3]) + named[len(args) :])[:3])
            return out

    return AttentionSpy()


def _attention_flops(query: Any, key: Any, value: Any) -> int:
    """``2 x batch x heads x T_q x T_k x (head_dim + value head_dim)``: the scores and the
    weighted sum over the whole ``T_q x T_k`` square (the causal mask not halving it); for
    equal head dims, ``4 x B x H x T^2 x head_dim``."""
    heads = 1
    for n in query.shape[:-2]:
        heads *= int(n)
    t_q, t_k = int(query.shape[-2]), int(key.shape[-2])
    return 2 * heads * t_q * t_k * (int(query.shape[-1]) + int(value.shape[-1]))
