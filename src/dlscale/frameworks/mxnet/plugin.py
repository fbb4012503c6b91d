"""MXNet's entry in dlscale (the ``dlscale.plugins`` entry point ``mxnet``): mxnet-single,
mxnet-kv and the Gluon twin of every built-in model (horovod-mxnet is Horovod's). Importing it
imports no framework (the workers run under the MXNet environment's interpreter,
``declare.mxnet_python``)."""

from __future__ import annotations

from typing import Any

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.contract.models import BUILT_IN, register_builder
from dlscale.frameworks.mxnet import declare as mxd

FLOAT64_TOO = ("float32", "float64")
"""Gluon engines that train every parameter, input, gradient and all-reduce in float64
(``net.cast``; the numpy pipeline makes the inputs in the run's dtype; the SGD rule in double:
``sgd.CountingSGD``): mxnet-single, and horovod-mxnet (Horovod's). Not mxnet-kv: MXNet's
ps-lite kvstore keeps parameters in float32 (one dist_sync step leaves each 3e-8 to 1e-7 off
the local kvstore's; docs/equivalence.md)."""

FRAMEWORKS.register(
    "mxnet",
    FrameworkSpec(name="mxnet", module="mxnet", packages=("mxnet",), install=mxd.INSTALL),
)
COMMON: dict[str, Any] = {  # every backend on MXNet, Horovod's too
    "framework": "mxnet",
    "python": mxd.mxnet_python(),
    "install": mxd.INSTALL,
    "devices": ("cpu",),  # the mxnet 1.9.1 wheel is CPU-only (CUDA builds were other wheels)
    "installed": "dlscale.frameworks.mxnet.declare:mxnet_installed",
}
for _spec in (
    BackendSpec(
        name="mxnet-single",
        precisions=FLOAT64_TOO,
        description="MXNet Gluon training loop, one process (the MXNet baseline)",
        worker="dlscale.frameworks.mxnet.loop:run_single",
        max_workers=1,
        reference=True,
        options=mxd.MX_LOOP_OPTIONS,
        **COMMON,
    ),
    BackendSpec(
        name="mxnet-kv",
        description="MXNet Gluon Trainer on a kvstore: local, or ps-lite's parameter server "
        "(dist_sync, dist_async, dist_device_sync)",
        worker="dlscale.frameworks.mxnet.kv:run",
        precision_note="MXNet's ps-lite kvstore servers hold float32 (a float64 dist_sync "
        "step leaves every parameter 3e-8 to 1e-7 off)",
        collectives="dlscale.frameworks.mxnet.collectives:run",
        collectives_check=mxd.check_kv_collectives,
        options=mxd.MX_LOOP_OPTIONS + mxd.KV_OPTIONS,
        roles=mxd.kv_roles,
        cluster_env=mxd.dmlc_env,
        ports=mxd.kv_ports,
        **COMMON,
    ),
):
    BACKENDS.register(_spec.name, _spec)

for _model in BUILT_IN:  # a twin of every built-in model, under the same name
    register_builder(_model, "mxnet", f"dlscale.frameworks.mxnet.models:{_model}")
