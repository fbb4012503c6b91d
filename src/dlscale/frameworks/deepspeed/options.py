"""What the deepspeed-zero* backends declare: their options (DeepSpeed's own settings that
change how ZeRO communicates or updates, under DeepSpeed's names and units), the checks of a
point before launch, and the DeepSpeed configuration a run passes to ``deepspeed.initialize``,
built as data. No torch or DeepSpeed import.

Every other setting of the DeepSpeed configuration is DeepSpeed's default but one:
``gradient_clipping``, whose DeepSpeed default (1.0) would clip the global gradient norm and so
change the update against every other engine; dlscale's default is 0 (off)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.options import declared, setting
from dlscale.frameworks.torch.options import TorchLoopOptions, check_torch_loop

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

INSTALL = "pip install 'dlscale[deepspeed]' -c constraints.txt"
STAGES = (1, 2, 3)
PRECISION_NOTE = (
    "DeepSpeed 0.19 shards float16, bfloat16 and float32 parameters only (ZeRO-3 refuses "
    "float64 ones), and ZeRO-1 and -2 send float64 gradients as float32 "
    "(communication_data_type has no fp64)"
)


MOST_ELEMENTS = 2**36
"""The largest element count a bucket or threshold option takes (64 Gi elements, 256 GiB of
float32): DeepSpeed allocates some of them up front (``reduce_bucket_size``), and a count past
int64 fails inside torch with a C++ stack."""


def _elements(name: str, *, even: bool = False) -> Callable[[Any], None]:
    """The check of an element-count option: at most :data:`MOST_ELEMENTS`, and a multiple
    of 2 where DeepSpeed aligns all-gather buffers to 4 bytes of 16-bit elements."""

    def check(value: Any) -> None:
        if value > MOST_ELEMENTS:
            raise UserError(
                f"{name} must be at most {MOST_ELEMENTS:,} elements (2^36), got {value:,}"
            )
        if even and value % 2:
            raise UserError(
                f"{name} must be a multiple of 2 (DeepSpeed aligns its all-gather buffers to "
                f"4 bytes of 16-bit elements), got {value:,}"
            )

    return check


@dataclass(frozen=True)
class ZeroCommon:
    """Every stage's."""

    gradient_clipping: float = setting(
        0.0,
        "clip the global gradient norm to this before each update; 0: off, as in every other "
        "engine (DeepSpeed's own default, 1.0, changes the update)",
        minimum=0.0,
    )
    contiguous_gradients: bool = setting(
        True, "copy each gradient into one contiguous buffer as it is produced"
    )
    reduce_bucket_size: int = setting(
        500_000_000,
        "elements reduced at a time (a bucket of gradients; ZeRO-1 and -2 allocate one, two "
        "with overlap_comm, at the first backward: 2 GB of float32 at the default)",
        minimum=1,
        validate=_elements("reduce_bucket_size"),
    )
    overlap_comm: bool = setting(
        False,
        "reduce gradient buckets during the backward pass, beside the computation "
        "(DeepSpeed's own default is true for ZeRO-3; false in every stage here, so the "
        "stages differ only in what they shard)",
    )


@dataclass(frozen=True)
class Zero12Options(ZeroCommon):
    """ZeRO-1 and -2: the optimizer state (and, in 2, the gradients) sharded."""

    reduce_scatter: bool = setting(
        True,
        "reduce the gradients bucket by bucket to their shards (DeepSpeed's "
        "use_multi_rank_bucket_allreduce all-reduces each bucket); false: one all-reduce of "
        "each averaged gradient",
    )
    allgather_bucket_size: int = setting(
        500_000_000,
        "elements all-gathered at a time after the update (a multiple of 2)",
        minimum=2,
        validate=_elements("allgather_bucket_size", even=True),
    )


@dataclass(frozen=True)
class Zero3Options(ZeroCommon):
    """ZeRO-3: the parameters sharded too, gathered module by module."""

    stage3_prefetch_bucket_size: int = setting(
        50_000_000,
        "elements of the next modules' parameters gathered ahead",
        minimum=0,
        validate=_elements("stage3_prefetch_bucket_size"),
    )
    stage3_param_persistence_threshold: int = setting(
        100_000,
        "parameters of fewer elements stay whole on every rank (not sharded; all-gathered "
        "after each update, as ZeRO-1 does)",
        minimum=0,
        validate=_elements("stage3_param_persistence_threshold"),
    )
    stage3_max_live_parameters: int = setting(
        1_000_000_000,
        "most elements kept gathered at once",
        minimum=0,
        validate=_elements("stage3_max_live_parameters"),
    )
    stage3_max_reuse_distance: int = setting(
        1_000_000_000,
        "a gathered parameter used again within this many elements is kept, not released "
        "and gathered again (so the backward pass reuses the forward's gather)",
        minimum=0,
        validate=_elements("stage3_max_reuse_distance"),
    )


ZERO12_OPTIONS = declared(Zero12Options)
ZERO3_OPTIONS = declared(Zero3Options)


def options_of(stage: int) -> type[Zero12Options] | type[Zero3Options]:
    return Zero3Options if stage == 3 else Zero12Options


def check_zero(config: RunConfig) -> None:
    """What no single option sees: the torch loop's checks, and its ``compile``, which would
    compile DeepSpeed's engine module with its hooks (not offered)."""
    check_torch_loop(config)
    if config.typed(TorchLoopOptions).compile:
        raise UnsupportedPoint(
            "deepspeed-zero* run DeepSpeed's engine eagerly: compile = true is not offered "
            "(DeepSpeed compiles through its own engine.compile()); set compile = false, or "
            "use torch-ddp or torch-fsdp to measure torch.compile"
        )


def deepspeed_config(config: RunConfig, stage: int, world: int) -> dict[str, Any]:
    """The configuration ``deepspeed.initialize`` gets for ``config`` at ``world`` workers:
    one micro-batch of the run's batch per worker (under strong scaling, the global batch's
    share) a step (no accumulation), the optimizer the
    engine builds (SGD, which ZeRO calls untested, or AdamW as torch's, not DeepSpeed's fused
    one), no loss scaling and no DeepSpeed precision mode (dlscale's amp is torch's autocast),
    nothing printed per step."""
    options = config.typed(options_of(stage))
    zero: dict[str, Any] = {
        "stage": stage,
        "contiguous_gradients": options.contiguous_gradients,
        "overlap_comm": options.overlap_comm,
        "reduce_bucket_size": options.reduce_bucket_size,
    }
    if isinstance(options, Zero3Options):
        zero.update(
            stage3_prefetch_bucket_size=options.stage3_prefetch_bucket_size,
            stage3_param_persistence_threshold=options.stage3_param_persistence_threshold,
            stage3_max_live_parameters=options.stage3_max_live_parameters,
            stage3_max_reuse_distance=options.stage3_max_reuse_distance,
        )
    else:
        zero.update(
            reduce_scatter=options.reduce_scatter,
            allgather_bucket_size=options.allgather_bucket_size,
        )
    return {
        "train_micro_batch_size_per_gpu": config.batch_per_worker,
        "gradient_accumulation_steps": 1,
        "train_batch_size": config.batch_per_worker * world,
        "gradient_clipping": options.gradient_clipping,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**62,
        "wall_clock_breakdown": False,
    }


def backend_name(stage: int) -> str:
    return f"deepspeed-zero{stage}"
