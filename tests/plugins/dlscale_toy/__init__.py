"""A toy engine registered from outside dlscale: the proof that a backend needs no core edit.

It imports no deep-learning framework (numpy and the standard library only): a softmax
regression whose workers exchange gradients with a parameter server over localhost TCP, in
sync or async mode, and a launcher that starts every rank from one command. Importing this
module (``DLSCALE_PLUGINS=dlscale_toy``) registers:

* model ``softmax`` with a ``numpy`` builder;
* model library ``toyzoo`` (``--model toyzoo:softmax``), and ``toyzoo_absent``, which needs a
  module that is nowhere;
* backend ``toy-single`` (the numpy reference: one process, no server);
* backend ``toy-ps``: one server (rank 0, never exits by itself, like a TensorFlow ps task)
  and N workers (ranks 1..N); options ``toy_mode`` (sync/async) and ``toy_timing``
  (step: per-step times; window: the engine runs whole windows, like Keras ``fit``);
* launcher ``toy-all``: one command for all ranks (``python -m dlscale_toy.launch``), which
  names ranks its own way (TOY_RANK, TOY_SIZE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.launchers import LAUNCHERS, LauncherSpec
from dlscale.contract.layout import Addresses, Process, ProcessLayout, Role
from dlscale.contract.model_libraries import MODEL_LIBRARIES, ModelLibrary
from dlscale.contract.models import MODELS, ModelSpec
from dlscale.contract.options import declared, setting


@dataclass(frozen=True)
class ToyPsOptions:
    """toy-ps's options, declared once: the core validates the Options ``declared`` derives,
    and the engine reads them typed (``cfg.typed(ToyPsOptions).toy_mode``)."""

    toy_mode: str = setting(
        "sync",
        "sync: average every worker's gradient; async: apply each on arrival",
        choices=("sync", "async"),
    )
    toy_timing: str = setting(
        "step",
        "step: the kernel times each step; window: whole windows (like fit)",
        choices=("step", "window"),
    )


@dataclass(frozen=True)
class ToyLaunchOptions:
    toy_launch_delay_s: float = setting(
        0.0, "seconds the toy launcher waits before starting the ranks", minimum=0.0
    )


def toy_roles(config: Any) -> tuple[Role, ...]:
    return (
        Role(name="server", count=1, trains=False, exits=False),
        Role(name="worker", count=config.workers),
    )


def toy_cluster_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: Any
) -> dict[str, str]:
    server = layout.of_role("server")[0]
    return {
        "TOY_SERVER": f"{addresses.hosts[server.rank]}:{addresses.ports[0]}",
        "TOY_ROLE": process.role,
    }


MODELS.register(
    "softmax",
    ModelSpec(
        name="softmax",
        description="softmax regression (toy plug-in; numpy only)",
        builders={"numpy": "dlscale_toy.engine:softmax"},
        input_size=8,
        default_classes=10,
        has_batchnorm=False,
    ),
)
for _name, _requires in (("toyzoo", "numpy"), ("toyzoo_absent", "dlscale_toy_absent")):
    MODEL_LIBRARIES.register(
        _name,
        ModelLibrary(
            name=_name,
            framework="numpy",
            builder="dlscale_toy.engine:zoo_model",
            probe="dlscale_toy.engine:zoo_unknown",
            requires=(_requires,),
            install=f"pip install {_requires}",
            input_size=8,
            default_classes=10,
        ),
    )
_COMMON = {"framework": "numpy", "devices": ("cpu",), "install": "pip install numpy"}
BACKENDS.register(
    "toy-single",
    BackendSpec(
        name="toy-single",
        description="numpy softmax regression, one process (toy plug-in reference)",
        worker="dlscale_toy.engine:run_single",
        max_workers=1,
        reference=True,
        **_COMMON,  # type: ignore[arg-type]
    ),
)
BACKENDS.register(
    "toy-ps",
    BackendSpec(
        name="toy-ps",
        description="numpy workers and one parameter server over localhost TCP (toy plug-in)",
        worker="dlscale_toy.engine:run_ps",
        options=declared(ToyPsOptions),
        roles=toy_roles,
        cluster_env=toy_cluster_env,
        ports=1,
        **_COMMON,  # type: ignore[arg-type]
    ),
)
LAUNCHERS.register(
    "toy-all",
    LauncherSpec(
        name="toy-all",
        description="every rank from one command (toy plug-in)",
        implementation="dlscale_toy.launcher:ToyLauncher",
        options=declared(ToyLaunchOptions),
    ),
)
