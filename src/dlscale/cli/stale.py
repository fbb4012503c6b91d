"""Stored runs made by other code (`dlscale.contract.engine_code`), said once before a study
runs: they are run again unless the user keeps them (``--keep-stale``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dlscale.runner import stale
from dlscale.store.results import RunStore


def say_stale(store: RunStore, study: Any, keep_stale: bool, warn: Callable[[str], None]) -> None:
    """One line naming the stored runs of the study's rounds that other code made (the first
    one's why), and whether they run again."""
    found = []
    for point in study.points:
        for number in range(study.repeats.repeats):
            config = dataclasses.replace(point, repeat_id=point.repeat_id + number)
            why = stale(config, store.read(config.run_id()))
            if why is not None:
                found.append(why)
    if not found:
        return
    runs = f"{len(found)} stored run(s) of this study were made by other code ({found[0]})"
    if keep_stale:
        warn(f"{runs}: kept (--keep-stale); their figures may not be this code's")
    else:
        warn(f"{runs}: running them again (--keep-stale keeps them; each old result stays in "
             "its run directory as result.stale-CODE.json)")  # fmt: skip
