"""The import path of a worker: dlscale and the plug-ins, nothing else of the parent's.

A worker may run under another virtual environment (MXNet's, with its own numpy). Putting the
directory that holds the parent's dlscale on its PYTHONPATH would put the parent's whole
site-packages there for an installed (non-editable) dlscale and hide that environment's numpy.
Instead each run gets a directory of links: ``dlscale`` and each plug-in's top-level package.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from dlscale.contract.files import make_directory, output_failure


def worker_path_dir(run_dir: Path) -> Path:
    return run_dir / "pythonpath"


def prepare_worker_path(run_dir: Path, plugins: list[str]) -> Path:
    """Create the run's link directory (idempotent); returns it. The run directory must exist
    (one removed is not made again); a link or a file planted at ``pythonpath`` is refused with
    one line (:class:`OutputError`), never written through, and an old link inside it is
    replaced (the link, never its target)."""
    directory = worker_path_dir(run_dir)
    make_directory(directory, "the workers' import path")
    sources = {"dlscale": Path(__file__).resolve().parents[1]}  # this copy of dlscale
    for module in plugins:
        top = module.partition(".")[0]
        spec = importlib.util.find_spec(top)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin).resolve()
        sources[top] = origin.parent if origin.name == "__init__.py" else origin
    for top, source in sources.items():
        link = directory / (source.name if source.is_file() else top)
        if link.is_symlink() and Path(os.readlink(link)) == source:
            continue
        try:
            link.unlink(missing_ok=True)  # our link to an older source: the link, not its target
            link.symlink_to(source, target_is_directory=source.is_dir())
        except OSError as error:
            raise output_failure(link, error) from None
    return directory
