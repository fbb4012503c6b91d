"""What the MXNet backends declare: their interpreter, options, roles, DMLC variables (no MXNet).

MXNet 1.9.1 needs numpy 1.23 (it uses aliases numpy 1.24 removed), so it lives in its own
virtual environment (``make mxnet``: ``.venv-mxnet`` beside the parent's ``.venv``, or
``$DLSCALE_MXNET_PYTHON``; a study's ``python`` key overrides both). The engines are in
``loop`` (the Gluon training loop, mxnet-single and horovod-mxnet) and ``kv``
(Gluon's Trainer on a kvstore, the ps-lite roles).

Processes and roles of ``mxnet-kv``:

* ``kvstore = "local"``: one process, a ``local`` KVStore inside it (no other role);
* ``dist_sync``, ``dist_async``, ``dist_device_sync``: ``worker`` processes (ranks 0..N-1, they
  train), then ps-lite's ``scheduler`` and ``num_servers`` ``server`` processes. The scheduler
  and servers serve inside ``import mxnet`` and leave by themselves once every worker has
  finished (they exit, as workers do). Every process learns the cluster from DMLC_* variables:
  the scheduler's address and port, the number of servers and workers, and its own role.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.contract.algorithms import async_update_setting
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.layout import Addresses, Process, ProcessLayout, Role
from dlscale.contract.options import declared, setting

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

INSTALL = "make mxnet"
PYTHON_ENV = "DLSCALE_MXNET_PYTHON"
"""An MXNet environment's interpreter other than ``.venv-mxnet/bin/python``."""


def mxnet_python() -> str:
    """The interpreter of the MXNet environment: ``$DLSCALE_MXNET_PYTHON``, else
    ``.venv-mxnet/bin/python`` beside the environment dlscale runs in (``make mxnet``)."""
    return os.environ.get(PYTHON_ENV) or str(
        Path(sys.prefix).absolute().parent / ".venv-mxnet" / "bin" / "python"
    )


@dataclass(frozen=True)
class MXLoopOptions:
    """Read by every MXNet engine."""

    weights: str = setting(
        "torch",
        "initial weights: the PyTorch twin's (same seed as the torch backends) or Gluon's own",
        choices=("torch", "gluon"),
    )
    mkldnn: bool = setting(True, "MXNet's MKLDNN (oneDNN) CPU kernels (MXNET_MKLDNN_ENABLED)")


@dataclass(frozen=True)
class KVOptions:
    kvstore: str = setting(
        "dist_sync",
        "MXNet kvstore: local (one process) or ps-lite's parameter server",
        choices=("local", "dist_sync", "dist_async", "dist_device_sync"),
    )
    num_servers: int = setting(1, "ps-lite server processes", minimum=1)
    async_update: str = async_update_setting(applies=("kvstore", "dist_async"), earlier="sum")


SYNCHRONOUS = ("dist_sync", "dist_device_sync")
"""The kvstores whose push and pull go through the parameter servers and wait for every
worker: what ``dlscale microbench --backend mxnet-kv`` times."""


def check_kv_collectives(config: RunConfig) -> None:
    """mxnet-kv's microbench (``BackendSpec.collectives_check``): a synchronous kvstore."""
    kind = config.typed(KVOptions).kvstore
    if kind not in SYNCHRONOUS:
        raise UserError(
            f"the microbench times the parameter servers' synchronous push and pull: "
            f"--set kvstore={' or '.join(SYNCHRONOUS)}, not {kind}"
        )


MX_LOOP_OPTIONS = declared(MXLoopOptions)
KV_OPTIONS = declared(KVOptions)
WEIGHTS = MX_LOOP_OPTIONS[0]


def kv_roles(config: RunConfig) -> tuple[Role, ...]:
    """Workers first (rank 0 trains), then ps-lite's scheduler and servers for a dist kvstore."""
    if config.typed(KVOptions).kvstore == "local":
        if config.workers != 1:
            raise UnsupportedPoint(
                f"kvstore=local trains in one process, got workers={config.workers}; "
                "use kvstore=dist_sync or dist_async across processes"
            )
        return (Role(name="worker", count=1),)
    return (
        Role(name="worker", count=config.workers),
        Role(name="scheduler", count=1, trains=False),
        Role(name="server", count=config.typed(KVOptions).num_servers, trains=False),
    )


def kv_ports(config: RunConfig) -> int:
    """The scheduler's port (the others bind their own)."""
    return 0 if config.typed(KVOptions).kvstore == "local" else 1


def dmlc_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    """ps-lite's variables: where the scheduler listens, how many servers and workers, the
    role, and the address this process binds (its host, so a loopback run stays on loopback)."""
    if config.typed(KVOptions).kvstore == "local":
        return {}
    scheduler = next(p.rank for p in layout.processes if p.role == "scheduler")
    return {
        "DMLC_PS_ROOT_URI": addresses.hosts[scheduler],
        "DMLC_PS_ROOT_PORT": str(addresses.ports[0]),
        "DMLC_NUM_SERVER": str(config.typed(KVOptions).num_servers),
        "DMLC_NUM_WORKER": str(config.workers),
        "DMLC_ROLE": process.role,
        "DMLC_NODE_HOST": addresses.hosts[process.rank],
    }


def mxnet_installed(python: str | None) -> str:
    """What ``dlscale ls backends`` says of mxnet-single and mxnet-kv."""
    path = Path(python or mxnet_python())
    if not path.exists():
        return f"no: {INSTALL}"
    stamp = path.absolute().parent.parent / ".installed-mxnet"
    return "yes: .venv-mxnet" if stamp.exists() else f"yes: {path}"
