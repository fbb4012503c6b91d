"""The code a run was made by, as a fingerprint: a result made by other code is not reused
without saying so (issue 45: a point completed before a fix was kept on resume, silently).

A backend's *engine code* is every Python file of its worker's folder (``frameworks/torch/``
for torch-ddp; for a plug-in outside dlscale, the worker's top-level package), of its
framework's folder when that is another one (Horovod's engines run on ``frameworks/torch/``
and the others), and of what every worker runs around the engine: ``runtime/`` (the schedule,
the timed windows, the load readings), ``datasets/`` and ``worker.py``. The fingerprint is the
SHA-256 of those files' paths and bytes, its first 16 hex digits. Nothing is imported: the
files are read where the modules would be found.

What it leaves out: the parent's own code (the launchers, the aggregation of the ranks'
records, the report), which recomputes nothing a run stored from raw events it cannot
re-read, and the installed frameworks, whose versions each result records beside it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlscale.contract.text import excerpt, visible

PACKAGE = Path(__file__).resolve().parents[1]
"""dlscale's own source folder."""

AROUND_THE_ENGINE = ("runtime", "datasets", "worker.py")
"""What every worker runs besides its engine, relative to :data:`PACKAGE`."""

DIGITS = 16
_CODE = re.compile(rf"[0-9a-f]{{{DIGITS}}}")


def stored_code(value: object) -> str | None:
    """``value`` when it is an engine code as dlscale writes one (:data:`DIGITS` hexadecimal
    digits), else ``None``: what a stored run's ``engine_code`` may be used as, in a file name
    (``result.stale-CODE.json``) or a message, since anyone who can write to a shared store
    can plant a megabyte of text there."""
    return value if isinstance(value, str) and _CODE.fullmatch(value) else None


def engine_code(backend: str) -> str | None:
    """The fingerprint of ``backend``'s engine code; None where its files cannot be found
    (an unknown backend, a plug-in whose package is gone)."""
    from dlscale.contract.backends import BACKENDS

    worker = worker_folder(backend)
    if worker is None:
        return None
    framework = PACKAGE / "frameworks" / BACKENDS.get(backend).framework  # a plug-in's: its own
    paths = {worker, *([framework] if framework.is_dir() else [])}
    paths |= {PACKAGE / p for p in AROUND_THE_ENGINE}
    return _fingerprint(sorted(paths))


def worker_folder(backend: str) -> Path | None:
    """The folder of ``backend``'s worker code (``frameworks/horovod`` for every Horovod engine,
    a plug-in's top-level package); None for an unknown backend or a package that is gone."""
    from dlscale.contract.backends import BACKENDS

    if backend not in BACKENDS:
        return None
    return _folder(BACKENDS.get(backend).worker.partition(":")[0])


def _folder(module: str) -> Path | None:
    """The folder whose files make up ``module``'s engine: for dlscale's own, the folder
    under ``frameworks/`` it sits in; else its top-level package (or its file alone)."""
    parts = module.split(".")
    if parts[0] == "dlscale":
        path = PACKAGE.joinpath(*parts[1:])
        folder = path if path.is_dir() else path.parent
        if len(parts) >= 3 and parts[1] == "frameworks":
            folder = PACKAGE / "frameworks" / parts[2]
        return folder if folder.exists() else None
    found = importlib.util.find_spec(parts[0])  # a top-level name: nothing of it is run
    if found is None or found.origin is None:
        return None
    origin = Path(found.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _fingerprint(paths: list[Path]) -> str:
    """Read at each call: a run is fingerprinted with the files as they are when it ends."""
    digest = hashlib.sha256()
    for root in paths:
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for file in files:
            digest.update(str(file.relative_to(root.parent)).encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()[:DIGITS]


def other_code(environment: Mapping[str, Any], backend: str) -> str | None:
    """Why a stored run of ``backend`` was made by other code than this one's, in words
    (None: the same code, or this dlscale cannot tell its own)."""
    now = engine_code(backend)
    if now is None:
        return None
    made = environment.get("engine_code")
    version = environment.get("dlscale_version")
    by = f"dlscale {visible(version)[:40]}" if version else "an older dlscale"
    if not isinstance(made, str):
        return f"made by {by}, before runs recorded their engine's code"
    if made != now:
        shown = made if stored_code(made) else excerpt(made)  # a planted 1 MB code: cut
        return f"made by {by} with {backend}'s engine code {shown}, which is {now} now"
    return None
