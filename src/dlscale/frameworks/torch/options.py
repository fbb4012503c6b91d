"""What the torch.* backends declare: their options and roles (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlscale.layout import Role
from dlscale.options import Option

if TYPE_CHECKING:
    from dlscale.config.run_config import RunConfig

TORCH_LOOP_OPTIONS = (
    Option(
        name="amp",
        type="str",
        default="none",
        choices=("none", "bf16"),
        help="mixed precision on cuda",
    ),
    Option(name="channels_last", type="bool", default=False, help="channels_last memory format"),
    Option(name="compile", type="bool", default=False, help="torch.compile the model"),
)
"""Read by the shared torch training loop, so every torch.* backend has them."""

_BUCKET_MB = Option(
    name="bucket_mb",
    type="float",
    default=25.0,
    minimum=0.0,
    exclusive_minimum=True,
    help="gradient bucket / fusion buffer size in MB",
)
DDP_OPTIONS = (
    _BUCKET_MB,
    Option(
        name="compression",
        type="str",
        default="none",
        choices=("none", "fp16", "bf16", "powersgd"),
        help="gradient compression (comm hook)",
    ),
    Option(name="powersgd_rank", type="int", default=1, minimum=1, help="PowerSGD matrix rank"),
    Option(
        name="gradient_as_bucket_view",
        type="bool",
        default=False,
        help="gradients are views into the buckets",
    ),
    Option(name="static_graph", type="bool", default=False, help="DDP static_graph=True"),
)
RING_OPTIONS = (
    _BUCKET_MB,
    Option(
        name="compression",
        type="str",
        default="none",
        choices=("none", "fp16", "bf16"),
        help="gradient compression (cast before the ring, back after)",
    ),
)
FSDP_OPTIONS = (
    Option(
        name="reshard_after_forward",
        type="bool",
        default=True,
        help="FSDP2: free each block's gathered parameters after its forward and gather them "
        "again for its backward (ZeRO-3); false keeps them to the backward (ZeRO-2)",
    ),
)
PS_OPTIONS = (
    Option(
        name="ps_mode",
        type="str",
        default="sync",
        choices=("sync", "async"),
        help="sync: wait for all workers (dist_sync); async: apply on arrival (dist_async)",
    ),
    Option(
        name="num_servers",
        type="int",
        default=1,
        minimum=1,
        help="server processes; parameters sharded over them by bytes",
    ),
)


def ps_roles(config: RunConfig) -> tuple[Role, ...]:
    """Workers take ranks 0..N-1, servers the ranks after them; servers end by themselves
    once every worker has told them it is done."""
    return (
        Role(name="worker", count=config.workers),
        Role(name="server", count=config.option("num_servers"), trains=False),
    )
