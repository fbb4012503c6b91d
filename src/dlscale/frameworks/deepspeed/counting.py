"""The bytes ZeRO sends, counted from the tensors DeepSpeed hands to ``torch.distributed``.

DeepSpeed's communication layer (``deepspeed.comm``, its ``TorchBackend``) calls the
collectives of ``torch.distributed`` by attribute at each call, on gloo or NCCL; dlscale cannot
see their wire traffic, so, as for torch-ddp, each call's tensor bytes are counted and scaled
to what one rank sends when the collective runs as a ring of N ranks: an all-reduce
2(N-1)/N x its tensor, an all-gather (N-1)/N x its gathered output, a reduce-scatter
(N-1)/N x its whole input, a broadcast or reduce (N-1)/N x its tensor. A call counts once it
returned (a call torch refuses sends nothing), and not while counting is paused: the gathers
of an evaluation or of the final parameters are no step's. The counts are kept per collective
for the tests (ZeRO-1 and -2 all-reduce the gradient buckets and all-gather the updated shards
in DeepSpeed 0.19; ZeRO-3 all-gathers parameters and reduce-scatters gradients)."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

_COUNTED: dict[str, tuple[str, float]] = {
    "all_reduce": ("tensor", 2.0),
    "all_reduce_coalesced": ("tensors", 2.0),
    "all_gather_into_tensor": ("output_tensor", 1.0),
    "all_gather_single": ("output_tensor", 1.0),
    "all_gather": ("tensor_list", 1.0),
    "reduce_scatter_tensor": ("input", 1.0),
    "reduce_scatter_single": ("input", 1.0),
    "reduce_scatter": ("input_list", 1.0),
    "broadcast": ("tensor", 1.0),
    "reduce": ("tensor", 1.0),
}
"""Each collective counted: the argument whose bytes it moves and its ring factor's multiple
of (N-1)/N."""


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(_nbytes(item) for item in value)
    return 0


class CollectiveBytes:
    """Counts, per collective, the bytes a rank sends between two :meth:`take` calls, while
    installed on ``torch.distributed``."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.sent: dict[str, float] = {}
        """Bytes sent per collective since :meth:`install`."""
        self._taken = 0.0
        self._originals: dict[str, Callable[..., Any]] = {}
        self._paused = 0
        """Depth of :meth:`paused` contexts (one may hold another)."""

    def install(self) -> None:
        for name, (argument, factor) in _COUNTED.items():
            original = getattr(dist, name, None)
            if original is not None and name not in self._originals:
                self._originals[name] = original
                setattr(dist, name, self._counting(name, original, argument, factor))

    def _counting(
        self, name: str, original: Callable[..., Any], argument: str, factor: float
    ) -> Callable[..., Any]:
        position = list(inspect.signature(original).parameters).index(argument)
        share = factor * (self.world - 1) / self.world

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            done = original(*args, **kwargs)  # one refused raises here: nothing was sent
            if not self._paused:
                moved = args[position] if len(args) > position else kwargs.get(argument)
                self.sent[name] = self.sent.get(name, 0.0) + _nbytes(moved) * share
            return done

        return counted

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Collectives that are no training step's (an evaluation's gathers) go uncounted."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def take(self) -> int:
        """Bytes sent since the last take."""
        total = sum(self.sent.values())
        taken, self._taken = total - self._taken, total
        return round(taken)

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()
