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


__all__ = ["__version__", "load_results"]
