"""TensorFlow's entry in dlscale (the ``dlscale.plugins`` entry point ``tensorflow``): the tf-*
and keras-fit backends and the Keras twin of every built-in model (horovod-tf and horovod-keras
are Horovod's: :mod:`dlscale.frameworks.horovod.plugin`). Importing it imports no framework."""

from __future__ import annotations

from typing import Any

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.contract.models import BUILT_IN, TOKEN_MODELS, register_builder
from dlscale.frameworks.tensorflow import declare as tfd
from dlscale.runtime.script_run import SCRIPT_OPTIONS

FLOAT64_TOO = ("float32", "float64")
"""The engines whose model, inputs, gradients and all-reduce or parameter servers can all be
float64: the custom loops, both parameter servers, and Keras fit (its float32 metric losses
aside: held to torch-ddp by its parameters)."""

FRAMEWORKS.register(
    "tensorflow",
    FrameworkSpec(
        name="tensorflow",
        module="tensorflow",
        packages=("tensorflow", "tensorflow-cpu", "tf-keras", "keras"),
        imports=("tf_keras", "keras"),
        install=tfd.INSTALL,
        tasks=("classification", "next-token"),  # frameworks/tensorflow/tasks.py
        optimizers=("sgd", "adamw"),  # frameworks/tensorflow/sgd.py (tf-ps sync: SGD only)
        schedules=("constant", "cosine"),  # sgd.Schedule (tf-ps: constant only)
    ),
)
COMMON: dict[str, Any] = {  # every backend on TensorFlow, Horovod's too
    "framework": "tensorflow",
    "install": tfd.INSTALL,
    "requires": tfd.TF_REQUIRES,
    "device_probe": tfd.DEVICE_PROBE,
}
for _spec in (
    BackendSpec(
        name="tf-script",
        description="your own TensorFlow Keras script (model.fit under "
        "MultiWorkerMirroredStrategy), unmodified, with TF_CONFIG; measured from its batches",
        worker="dlscale.frameworks.tensorflow.script:run",
        options=SCRIPT_OPTIONS,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        runs_scripts=True,
        loader_only=False,
        **COMMON,
    ),
    BackendSpec(
        name="tf-single",
        precisions=FLOAT64_TOO,
        description="TensorFlow custom training loop, one process (the TensorFlow baseline)",
        worker="dlscale.frameworks.tensorflow.strategies:run_single",
        max_workers=1,
        reference=True,
        options=tfd.TF_LOOP_OPTIONS,
        **COMMON,
    ),
    BackendSpec(
        name="tf-mirrored",
        precisions=FLOAT64_TOO,
        description="TensorFlow MirroredStrategy: every replica in one process (logical CPU "
        "devices on a CPU)",
        worker="dlscale.frameworks.tensorflow.strategies:run_mirrored",
        options=tfd.TF_LOOP_OPTIONS,
        roles=tfd.mirrored_roles,
        **COMMON,
    ),
    BackendSpec(
        name="tf-mwms",
        precisions=FLOAT64_TOO,
        description="TensorFlow MultiWorkerMirroredStrategy: collective all-reduce, custom loop",
        worker="dlscale.frameworks.tensorflow.strategies:run_mwms",
        collectives="dlscale.frameworks.tensorflow.collectives:run",
        collectives_check=tfd.check_cpu_collectives,
        options=tfd.TF_LOOP_OPTIONS + tfd.MWMS_OPTIONS,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        **COMMON,
    ),
    BackendSpec(
        name="tf-ps",
        precisions=FLOAT64_TOO,
        description="TensorFlow parameter server, num_ps ps tasks: TF2's asynchronous "
        "ParameterServerStrategy, or TF1's SyncReplicasOptimizer (ps_mode = sync)",
        worker="dlscale.frameworks.tensorflow.ps:run",
        collectives="dlscale.frameworks.tensorflow.ps_collectives:run",
        collectives_check=tfd.check_ps_collectives,
        collectives_options=(("ps_mode", "sync"),),
        check=tfd.check_ps_optimizer,
        options=tfd.TF_LOOP_OPTIONS + tfd.PS_OPTIONS,
        roles=tfd.ps_roles,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        loader_only=False,
        **COMMON,
    ),
    BackendSpec(
        name="keras-fit",
        precisions=FLOAT64_TOO,
        description="Keras model.fit under MultiWorkerMirroredStrategy (legacy Keras 2)",
        worker="dlscale.frameworks.tensorflow.keras_fit:run_mwms",
        options=tfd.TF_LOOP_OPTIONS + tfd.MWMS_OPTIONS + tfd.FIT_OPTIONS,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        loader_only=False,
        **COMMON,
    ),
):
    BACKENDS.register(_spec.name, _spec)

for _model in BUILT_IN:  # a twin of every built-in model, under the same name
    register_builder(_model, "tensorflow", f"dlscale.frameworks.tensorflow.models:{_model}")
for _model in TOKEN_MODELS:  # the GPT's twin, every size
    register_builder(_model, "tensorflow", "dlscale.frameworks.tensorflow.gpt:gpt")
