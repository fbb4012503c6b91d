"""The processes that decode a disk data set's batches (:class:`dlscale.datasets.imagenet.
ImageFiles`) ahead of the training step: spawned, a few batches in flight each, gone with the
training process."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

import numpy as np

from dlscale.contract.errors import WorkerFault

if TYPE_CHECKING:
    from dlscale.datasets.imagenet import BadImage, ImageFiles

PREFETCH = 2
"""Batches in flight per loader process."""
LOADER_DIED = (
    "a loader process of this worker died{detail} (killed from outside, or out of memory: "
    "fewer loader_workers need less)"
)


class LoaderPool:
    """``loader_workers`` decoding processes (spawned: the training process may hold threads
    that a fork would copy mid-lock), ``PREFETCH`` batches in flight per process; in this
    process when ``loader_workers`` is 0. Each process dies with the training process."""

    def __init__(self, data: ImageFiles) -> None:
        self.workers = data.loader_workers
        self.executor: ProcessPoolExecutor | None = None
        if self.workers:
            self.executor = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_loader,
                initargs=(os.getpid(), data),
            )

    def map(
        self, data: ImageFiles, jobs: list[tuple[np.ndarray, np.ndarray | None]]
    ) -> Iterator[tuple[np.ndarray, np.ndarray] | BadImage]:
        if self.executor is None:
            for indices, seeds in jobs:
                yield data.load_batch(indices, seeds)
            return
        try:
            yield from self._prefetched(jobs)
        except BrokenProcessPool:
            raise WorkerFault(LOADER_DIED.format(detail="")) from None

    def _prefetched(
        self, jobs: list[tuple[np.ndarray, np.ndarray | None]]
    ) -> Iterator[tuple[np.ndarray, np.ndarray] | BadImage]:
        assert self.executor is not None
        pending: deque[Future[Any]] = deque()
        queue = iter(jobs)
        for job in queue:
            pending.append(self.executor.submit(_load, *job))
            if len(pending) >= self.workers * PREFETCH:
                break
        while pending:
            result = pending.popleft().result()
            following = next(queue, None)
            if following is not None:
                pending.append(self.executor.submit(_load, *following))
            yield result


_POOLS: weakref.WeakKeyDictionary[ImageFiles, LoaderPool] = weakref.WeakKeyDictionary()
"""Held only as long as its data set: keyed by ``id()``, a later data set given a dead one's
address took the dead one's pool, and its processes decoded the dead one's images."""


def loader_pool(data: ImageFiles) -> LoaderPool:
    """One pool per data set object in this process (made at its first batch; its processes
    shut down when the data set is collected)."""
    pool = _POOLS.get(data)
    if pool is None:
        pool = _POOLS[data] = LoaderPool(data)
    return pool


_LOADER_DATA: list[ImageFiles] = []
"""In a loader process: the data set it decodes (sent once, at its start)."""


def _load(
    indices: np.ndarray, seeds: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | BadImage:
    return _LOADER_DATA[0].load_batch(indices, seeds)


def _start_loader(parent: int, data: ImageFiles) -> None:
    """In a loader process: keep the data set; exit once the training process is gone."""
    _LOADER_DATA.append(data)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
