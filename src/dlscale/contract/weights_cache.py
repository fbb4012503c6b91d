"""Another framework's initial weights, kept on disk between runs.

A TensorFlow or MXNet run with ``weights = "torch"`` (their default) starts every rank from the
model PyTorch builds with the run's seed. Building it means importing torch in every such
worker, on top of the worker's own framework: 2-4 s of CPU each, in every rank of every point
and repeat. The arrays depend only on what :func:`cache_key` names, so the first worker that
builds them keeps them in the user's cache and every later one, of this run or another, reads
them without importing torch.

:meth:`FrameworkSpec.initial_weights <dlscale.contract.frameworks.FrameworkSpec.initial_weights>`
goes through :func:`kept`, so every framework that starts from another's weights gets the
cache, however it asks.

The key: the framework and its packages' versions (read from their metadata), the model and
its builder, the classes it is built for, the seed, the dropout it is built with, and a digest
of dlscale's source and of the builder's module (an edited model is a new key). Only
registered models are kept (dlscale's and the plug-ins'); a user's own model or a library's is
built every time.

Where: ``$DLSCALE_CACHE_DIR/initial-weights/``, else ``$XDG_CACHE_HOME/dlscale/...``, else
``~/.cache/dlscale/...``; ``DLSCALE_CACHE_DIR=`` (empty) turns the cache off. A launcher passes
``DLSCALE_CACHE_DIR`` on to every rank. The files are numpy ``.npz`` archives (each array's
CRC is checked as it is read), written whole or not at all; the least recently used are
deleted once the folder holds more than :data:`LIMIT_BYTES`. The cache never fails a run: a file
that cannot be read is built again and replaced, a folder that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import UserError
from dlscale.contract.files import read_bounded, write_atomic
from dlscale.contract.models import MODELS
from dlscale.contract.text import visible
from dlscale.contract.user_models import source_digest

if TYPE_CHECKING:
    from dlscale.contract.frameworks import FrameworkSpec

CACHE_ENV = "DLSCALE_CACHE_DIR"
LIMIT_BYTES = 2 * 2**30
"""How much the folder may hold before the least recently used files are deleted; a file
larger than this is neither kept nor read."""
FORMAT = 1
"""Bumped when what a file holds changes: every earlier key is then unused."""


def cache_root() -> Path | None:
    """The user's dlscale cache (see the module's docstring); ``None`` when turned off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory to be found: no cache
            return None
    return Path(base) / "dlscale"


def _dlscale_source() -> str:
    """A digest of every Python file of the dlscale this worker runs."""
    root = Path(__file__).resolve().parents[1]
    return source_digest(sorted(root.rglob("*.py")))


def _builder_source(reference: str) -> str | None:
    """A digest of the module a ``module:function`` builder lives in (a plug-in's model may
    live outside dlscale), found without running it; ``None`` if it has no file."""
    spec = importlib.util.find_spec(reference.partition(":")[0])
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return None
    return source_digest([Path(spec.origin)])


def cache_key(framework: FrameworkSpec, config: Any) -> str | None:
    """What the initial weights of ``config``'s model built by ``framework`` depend on, as
    a digest; ``None`` for a model that is not kept (a user's own or a library's)."""
    model = MODELS.get(config.model)
    reference = model.builders.get(framework.name)
    if not model.builtin or reference is None:
        return None
    try:
        builder, source = _builder_source(reference), _dlscale_source()
    except UserError:  # a source file that cannot be read: built every time, never kept
        return None
    if builder is None:
        return None
    packages = {}
    for name in framework.packages:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    facts = {
        "format": FORMAT,
        "framework": framework.name,
        "packages": packages,
        "model": config.model,
        "builder": reference,
        "classes": DATASETS.get(config.dataset).num_classes or model.input_shape(config.options)[1],
        "seed": config.seed,
        "dropout": model.dropout_kwargs(config.dropout),
        "dlscale": source,
        "builder_source": builder,
    }
    if model.options:  # a GPT's dimensions (image models have none: their keys as before)
        facts["options"] = {o.name: config.options.get(o.name, o.default) for o in model.options}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _warn(text: str) -> None:
    """One line on the rank's stderr; a folder named by the user's variable shown with its
    control characters escaped (:func:`~dlscale.contract.text.visible`)."""
    print(f"dlscale: warning: {visible(text)}", file=sys.stderr)


def _read(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays kept at ``path``; ``None`` if there are none or they cannot be read."""
    try:
        raw = read_bounded(path, LIMIT_BYTES)
        with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
            state = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        return None
    except Exception as error:  # damaged, truncated, planted: built again and replaced
        _warn(f"{path} cannot be read ({error}); built again")
        return None
    if not state or any(value.dtype != np.float32 for value in state.values()):
        return None
    with contextlib.suppress(OSError):  # recently used: kept when the folder is trimmed
        os.utime(path)
    return state


def _write(folder: Path, path: Path, state: dict[str, np.ndarray]) -> None:
    """Keep ``state`` at ``path`` (whole or not at all), then trim the folder."""
    buffer = io.BytesIO()
    np.savez(buffer, **state)  # type: ignore[arg-type]  # numpy's stub: allow_pickle
    if buffer.tell() > LIMIT_BYTES:
        _warn(f"initial weights not kept in {folder} (larger than the cache's {LIMIT_BYTES} bytes)")
        return
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, buffer.getvalue())
        _trim(folder, keep=path)
    except Exception as error:  # a read-only or full cache: the run goes on without it
        _warn(f"initial weights not kept in {folder} ({error})")


def _trim(folder: Path, keep: Path) -> None:
    """Delete the least recently used files until the folder holds :data:`LIMIT_BYTES`."""
    files = []
    for path in folder.glob("*.npz"):
        try:
            status = path.stat()
        except OSError:  # deleted by another process meanwhile
            continue
        files.append((status.st_mtime, status.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files, key=lambda entry: entry[0]):
        if total <= LIMIT_BYTES:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            total -= size


def kept(
    framework: FrameworkSpec, config: Any, build: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """``framework``'s initial weights of ``config``'s model: from the cache when they are
    kept there, else ``build()`` and kept."""
    root = cache_root()
    key = cache_key(framework, config) if root is not None else None
    if root is None or key is None:
        return build()
    folder = root / "initial-weights"
    path = folder / f"{key}.npz"
    state = _read(path)
    if state is None:
        state = build()
        _write(folder, path, state)
    return state
