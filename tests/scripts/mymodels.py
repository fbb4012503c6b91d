"""Models of a user's own, in a module of their own (dlscale run --model mymodels:FUNCTION)."""

import torch.nn as nn


def small_cnn(num_classes):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, num_classes),
    )


def fixed_head():
    """Takes no argument: dlscale calls it with none."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))


def not_a_model(num_classes):
    return num_classes


def broken(num_classes):
    raise ValueError("no such layer size")


def five_classes():
    """Five classes, said by nothing but its output: dlscale finds them from it."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 5))


def quits(num_classes):
    """A model file that ends the program instead of returning (a leftover of testing it)."""
    import sys

    sys.exit(0)


def no_classes():
    """A head of no outputs: nothing to classify into."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 0))
