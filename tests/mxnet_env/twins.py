"""Run under MXNet's interpreter by tests/unit/test_gluon_twins.py: each Gluon twin against its
PyTorch model from the same weights, in float64 (MXNet's float32 BatchNorm backward sums less
exactly than PyTorch's: a ResNet-20's float32 gradients differed by up to 3e-3 relative, its
float64 ones by 3e-14, so float64 shows the architectures are the same). Prints one JSON line
per model: parameter counts and keys, the forward output's difference, the losses of 3 SGD
steps (momentum, weight decay) and the largest relative parameter difference after them."""

import json
import sys

import numpy as np
import torch

from dlscale.frameworks.mxnet.env import import_mxnet

mx = import_mxnet(mkldnn=False, threads=1)  # float64 kernels are the plain ones anyway

from dlscale.config import RunConfig  # noqa: E402
from dlscale.contract.models import MODELS  # noqa: E402
from dlscale.frameworks.mxnet.sgd import make_sgd  # noqa: E402
from dlscale.frameworks.mxnet.transfer import gluon_state, load_torch_weights  # noqa: E402
from dlscale.frameworks.torch.weights import torch_state  # noqa: E402

STEPS = 3
LR, MOMENTUM, WD = 2**-7, 0.875, 2**-11
"""Exact in float32: MXNet's optimizer kernels take the learning rate and weight decay as
float32 attributes, so 0.01 is 0.009999999776 there, a 2e-8 relative difference per update
that the ill-conditioned BatchNorm of a deep net at batch 4 amplified to 3% of a tensor in 3
steps (ResNet-50); with these values the float64 parameters agree to 1e-10."""
# Dropout off on both sides (its masks cannot match across engines); smaller inputs for the
# ImageNet nets (their pooling adapts), as tests/unit/test_keras_twins.py does.
SIZE_BATCH = {"alexnet": (224, 2), "googlenet": (100, 4), "resnet50": (64, 4)}


def _models(name: str) -> tuple:
    from dlscale.frameworks.mxnet import models as gm

    spec = MODELS.get(name)
    if name == "alexnet":
        from dlscale.frameworks.torch.models.alexnet import AlexNet

        return AlexNet(10, dropout=0.0), gm.alexnet(10, dropout=0.0)
    if name == "googlenet":
        from dlscale.frameworks.torch.models.googlenet import GoogLeNet

        return GoogLeNet(10, dropout=0.0), gm.googlenet(10, dropout=0.0)
    return spec.build(10, "torch"), spec.build(10, "mxnet")


def check(name: str) -> dict:
    spec = MODELS.get(name)
    size, batch = SIZE_BATCH.get(name, (spec.input_size, 8))
    torch.manual_seed(0)
    model, net = _models(name)
    model = model.train().double()
    net.initialize()
    net.cast("float64")
    load_torch_weights(net, {k: v.astype(np.float64) for k, v in torch_state(model).items()})
    net.hybridize()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, size, size))
    y = rng.integers(0, 10, batch)
    cfg = RunConfig.make(
        backend="mxnet-single", model=name, lr=LR, momentum=MOMENTUM, weight_decay=WD
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    trainer = mx.gluon.Trainer(net.collect_params(), make_sgd(cfg), kvstore=None)
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    xm, ym = mx.nd.array(x, dtype="float64"), mx.nd.array(y, dtype="float64")
    with mx.autograd.record():
        forward = np.abs(net(xm).asnumpy() - model(xt).detach().numpy()).max()
    torch_losses, gluon_losses = [], []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        optimizer.step()
        torch_losses.append(loss.item())
        with mx.autograd.record():
            losses = loss_fn(net(xm), ym)
        losses.backward()
        trainer.step(batch)
        gluon_losses.append(float(losses.mean().asscalar()))
    params = gluon_state(net, parameters_only=True)
    named = {k: p.detach().numpy() for k, p in model.named_parameters()}
    return {
        "model": name,
        "torch_params": int(sum(v.size for v in named.values())),
        "gluon_params": int(sum(v.size for v in params.values())),
        "same_keys": sorted(params) == sorted(named),
        "forward_max_abs": float(forward),
        "torch_losses": torch_losses,
        "gluon_losses": gluon_losses,
        "params_max_rel": max(
            float(np.abs(params[k] - v).max() / (np.abs(v).max() + 1e-300))
            for k, v in named.items()
        ),
    }


for model_name in sys.argv[1:]:
    print(json.dumps(check(model_name)), flush=True)
