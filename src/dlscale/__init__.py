"""dlscale: run, measure, explain and predict data-parallel training scaling.

Importing dlscale imports no deep-learning framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlscale.contract.version import __version__

if TYPE_CHECKING:
    import pandas as pd


def load_results(path: Any = "dlscale-results", *, per: str = "run") -> pd.DataFrame:
    """A results directory as a pandas DataFrame: one row per run (``per="run"``) or per
    point, its runs combined (``per="point"``); see :func:`dlscale.metrics.frame.load_results`."""
    from dlscale.metrics.frame import load_results as _load

    return _load(path, per=per)


def mark_step(samples: int | None = None) -> None:
    """In your own training script: one training step ended, having trained ``samples``
    images on this process (``None``: the run's ``batch_size``). ``dlscale run --script``
    then times these steps instead of the optimizer's; run any other way it does nothing.
    See :mod:`dlscale.runtime.script_steps`."""
    from dlscale.runtime.script_steps import mark_step as _mark

    _mark(samples)


__all__ = ["__version__", "load_results", "mark_step"]
