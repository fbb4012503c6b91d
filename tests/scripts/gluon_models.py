"""Gluon blocks of a user's own, in a module of their own (dlscale run --model
gluon_models:FUNCTION --backend mxnet-kv), written as MXNet's Gluon guides write them."""

from mxnet import gluon


def small_cnn(num_classes):
    net = gluon.nn.HybridSequential()
    net.add(
        gluon.nn.Conv2D(8, kernel_size=3, padding=1, activation="relu"),
        gluon.nn.MaxPool2D(4),
        gluon.nn.Dense(num_classes),
    )
    return net


class Imperative(gluon.nn.Block):
    """A plain Block (not hybridizable): its forward is Python."""

    def __init__(self, num_classes):
        super().__init__()
        self.flat = gluon.nn.Flatten()
        self.out = gluon.nn.Dense(num_classes)

    def forward(self, x):
        return self.out(self.flat(x))


def imperative(num_classes):
    return Imperative(num_classes)
