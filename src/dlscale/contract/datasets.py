"""The data set contract: what a data set declares (light descriptors; readers and tensors are
loaded inside the workers), and the registry of data sets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.contract.options import Option
from dlscale.contract.registry import Registry, load_object


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    """What the core knows about a data set without importing a framework."""

    name: str
    description: str
    loader: str
    """``module:function`` called in a worker as
    ``load(cfg, *, shard, shards, replicas=1, input_size, num_classes)``; returns a
    :class:`dlscale.datasets.arrays.NumpyDataset` (numpy only) of the process that trains
    replicas ``shard`` to ``shard + replicas - 1`` of ``shards``;
    :func:`dlscale.frameworks.torch.data.to_torch` puts it on a torch device."""
    needs_data_dir: bool
    has_eval: bool
    """Whether an accuracy on held-out data means anything (not for synthetic data)."""
    num_classes: int | None
    """Classes of the data set (a token data set: its vocabulary); ``None`` follows the model
    (synthetic data, random tokens)."""
    sample: str = "image"
    """The kind of sample it holds (:data:`dlscale.contract.workload.KINDS`: ``image``, one
    image of C x H x W with its class; ``tokens``, a sequence of the model's ``block_size``
    tokens with its next-token targets). Its loader's ``input_size`` is then the sequence's
    length and ``num_classes`` the vocabulary."""
    checker: str | None = None
    """``module:function(data_dir: Path | None, options: dict) -> list[str] | None`` run by the
    parent before launching, with the data set's resolved options (and, for a token data set,
    the model's ``block_size`` and ``vocab_size``); raises
    :class:`dlscale.contract.errors.DataError` naming the bad file, or returns notes for the user
    (what it left out). Needs no framework."""

    options: tuple[Option, ...] = ()
    """The data set's own settings (study keys)."""
    generated: bool = False
    """Made in memory by the loader (random images or tokens), not read from files: no input
    pipeline to judge (the input findings leave its points out)."""
    script_data: bool = False
    """The data a training script reads itself (``own``): the only data set of a script
    backend's points, and none of any other's."""
    loader_processes: str | None = None
    """The option whose value is how many processes each training process starts to load
    data (the resource guard counts them); ``None``: none."""

    def helper_processes(self, options: dict[str, Any]) -> int:
        """Loader processes per training process under ``options``."""
        return int(options[self.loader_processes]) if self.loader_processes else 0

    def check(self, data_dir: Path | None, options: dict[str, Any] | None = None) -> list[str]:
        """The checker's notes (none without a checker)."""
        if self.checker is None:
            return []
        return list(load_object(self.checker)(data_dir, options or {}) or [])

    def load(self, *args: Any, **kwargs: Any) -> Any:
        return load_object(self.loader)(*args, **kwargs)


DATASETS: Registry[DatasetSpec] = Registry("dataset")
"""Filled by the ``datasets`` entry point (:mod:`dlscale.datasets.plugin`) and by plug-ins."""
