"""What the torch.* backends declare: their options, once each as a dataclass whose fields the
core validates (:func:`dlscale.contract.options.declared`) and the engines read typed
(``cfg.typed(DDPOptions)``), and their roles. No torch import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlscale.contract.algorithms import async_update_setting
from dlscale.contract.errors import UnsupportedPoint
from dlscale.contract.layout import Role
from dlscale.contract.options import declared, setting
from dlscale.contract.run_checks import refuse_float64_with

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig


@dataclass(frozen=True)
class TorchLoopOptions:
    """Read by the shared torch training loop, so every torch.* backend has them."""

    amp: str = setting("none", "mixed precision on cuda", choices=("none", "bf16"))
    channels_last: bool = setting(False, "channels_last memory format")
    compile: bool = setting(False, "torch.compile the model")


@dataclass(frozen=True)
class Buckets:
    bucket_mb: float = setting(
        25.0, "gradient bucket / fusion buffer size in MB", minimum=0.0, exclusive_minimum=True
    )


@dataclass(frozen=True)
class DDPOptions(Buckets):
    compression: str = setting(
        "none",
        "gradient compression (comm hook)",
        choices=("none", "fp16", "bf16", "powersgd"),
    )
    powersgd_rank: int = setting(1, "PowerSGD matrix rank", minimum=1)
    gradient_as_bucket_view: bool = setting(False, "gradients are views into the buckets")
    static_graph: bool = setting(False, "DDP static_graph=True")


@dataclass(frozen=True)
class RingOptions(Buckets):
    compression: str = setting(
        "none",
        "gradient compression (cast before the ring, back after)",
        choices=("none", "fp16", "bf16"),
    )


@dataclass(frozen=True)
class FSDPOptions:
    reshard_after_forward: bool = setting(
        True,
        "FSDP2: free each block's gathered parameters after its forward and gather them again "
        "for its backward (ZeRO-3); false keeps them to the backward (ZeRO-2)",
    )


@dataclass(frozen=True)
class PSOptions:
    ps_mode: str = setting(
        "sync",
        "sync: wait for all workers (dist_sync); async: apply on arrival (dist_async)",
        choices=("sync", "async"),
    )
    num_servers: int = setting(
        1, "server processes; parameters sharded over them by bytes", minimum=1
    )
    async_update: str = async_update_setting(applies=("ps_mode", "async"), earlier="mean")


TORCH_LOOP_OPTIONS = declared(TorchLoopOptions)
DDP_OPTIONS = declared(DDPOptions)
RING_OPTIONS = declared(RingOptions)
FSDP_OPTIONS = declared(FSDPOptions)
PS_OPTIONS = declared(PSOptions)


def check_torch_loop(config: RunConfig) -> None:
    """Every torch engine's contradictions (:attr:`BackendSpec.check`): its loop's ``amp``
    beside float64."""
    refuse_float64_with(config, "amp", config.typed(TorchLoopOptions).amp, "none")


def check_ddp(config: RunConfig) -> None:
    """torch-ddp's: the loop's, a compression beside float64, and a point torch's hooks cannot
    run: the bf16 hook all-reduces on NCCL (2.10+) only, and gloo, the CPU's backend, refuses
    it."""
    check_torch_loop(config)
    compression = config.typed(DDPOptions).compression
    refuse_float64_with(config, "compression", compression, "none")
    if config.device == "cpu" and compression == "bf16":
        raise UnsupportedPoint(
            "torch-ddp compression=bf16 needs CUDA (torch's bf16 hook runs on NCCL 2.10+ only, "
            "not on gloo); on the CPU use compression=fp16, or torch-ring, whose own ring sums "
            "bf16 on any device"
        )


def check_ring(config: RunConfig) -> None:
    """torch-ring's: the loop's, and its ring's compression beside float64."""
    check_torch_loop(config)
    refuse_float64_with(config, "compression", config.typed(RingOptions).compression, "none")


def check_ps(config: RunConfig) -> None:
    """torch-ps's: the loop's, and a learning-rate schedule, which its servers (who apply
    the updates) do not follow."""
    check_torch_loop(config)
    if config.lr_schedule != "constant":
        raise UnsupportedPoint(
            f"torch-ps applies updates at its servers with a constant learning rate, not "
            f"lr_schedule = {config.lr_schedule}; use torch-ddp, torch-ring, torch-fsdp or "
            "horovod-torch for a schedule"
        )


def ps_roles(config: RunConfig) -> tuple[Role, ...]:
    """Workers take ranks 0..N-1, servers the ranks after them; servers end by themselves
    once every worker has told them it is done."""
    return (
        Role(name="worker", count=config.workers),
        Role(name="server", count=config.typed(PSOptions).num_servers, trains=False),
    )
