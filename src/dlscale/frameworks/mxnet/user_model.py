"""A Gluon block of the user's own in the MXNet engines (``--model mymodels:build`` whose module
imports MXNet): a ``mx.gluon.Block`` taking NCHW images of the run's size, its classes read from
its output as a PyTorch model of the user's are, initialized by Gluon (Xavier for parameters
without an initializer of their own, seeded) and hybridized when it is a ``HybridBlock``. It
has no PyTorch twin, so it starts from Gluon's initializers whatever ``weights`` says, and its
trained parameters are saved under Gluon's own names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import UserError
from dlscale.contract.models import MODELS
from dlscale.contract.user_models import classes_from_output, refused_input
from dlscale.frameworks.mxnet.declare import MXLoopOptions


def is_own(cfg: Any) -> bool:
    return not MODELS.get(cfg.model).builtin


def initial_weights(cfg: Any) -> str:
    """Where the run's initial weights come from, as its facts say: ``weights`` for
    dlscale's models; ``mxnet`` (Gluon's initializers) for the user's own."""
    return "mxnet" if is_own(cfg) else cfg.typed(MXLoopOptions).weights


def build_own(cfg: Any, mx: Any) -> tuple[Any, int]:
    """The user's block, initialized (and hybridized where it can be), and its classes."""
    spec = MODELS.get(cfg.model)
    mx.random.seed(cfg.seed)
    net = spec.build(DATASETS.get(cfg.dataset).num_classes or spec.default_classes, "mxnet")
    if not isinstance(net, mx.gluon.Block):
        kind = f"{type(net).__module__}.{type(net).__name__}"
        raise UserError(
            f"model {cfg.model} returned {kind}, not a Gluon Block: the MXNet engines need one"
        )
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    size = cfg.image_size or spec.input_size
    try:
        out = net(mx.nd.zeros((2, 3, size, size), ctx=mx.cpu()))
        shape = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
    except UserError:
        raise
    except Exception as error:
        raise refused_input(cfg.model, size, error) from None
    classes = classes_from_output(
        cfg.model, shape, cfg.dataset, DATASETS.get(cfg.dataset).num_classes
    )
    if isinstance(net, mx.gluon.HybridBlock):
        net.hybridize(static_alloc=True, static_shape=True)
    return net, classes


def own_state(net: Any) -> dict[str, np.ndarray]:
    """The trained parameters by Gluon's names (no PyTorch keys: no twin)."""
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    return {f"{i:03d}/{p.name}": p.data().asnumpy() for i, p in enumerate(params)}
