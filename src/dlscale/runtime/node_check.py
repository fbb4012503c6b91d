"""What one node offers a study, read on that node by the interpreter its ranks would run
(``python -P -m dlscale.runtime.node_check`` prints one JSON object; ``dlscale doctor`` starts
it on every node through the study's launcher and tabulates what comes back), and what a study
needs of it (:func:`missing`: pure, so the rules are tested as data).

The facts: ``dlscale env``'s (Python, dlscale, the frameworks' versions from their metadata,
torch's CUDA build, its GPUs and NCCL), and what a multi-node run uses besides: OpenMPI's
``mpirun`` and its version, the node's address (its name resolved, as every rank resolves its
peers from Slurm's node list) and the interface that holds it, and the GPUs the scheduler left
visible (``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from typing import Any

MIN_PYTHON = (3, 11)
TOOL_TIMEOUT_S = 20.0


def probe() -> dict[str, Any]:
    """This node's facts (module docstring); a framework whose facts fail to load is said."""
    from dlscale.contract.frameworks import FRAMEWORKS
    from dlscale.runtime.environment import host_environment

    facts = host_environment()
    for name, framework in FRAMEWORKS:
        if framework.facts and framework.installed():
            try:
                facts.update(framework.environment())
            except Exception as error:  # a broken install is what this check is for
                facts[f"{name}_error"] = f"{type(error).__name__}: {error}"[:300]
    facts["mpirun"] = _mpirun()
    facts["address"], facts["interface"] = _address()
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return facts


def _mpirun() -> str | None:
    """``mpirun --version``'s first line, or None where there is none."""
    if shutil.which("mpirun") is None:
        return None
    try:
        done = subprocess.run(
            ["mpirun", "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return "mpirun (does not answer --version)"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "mpirun"


def _address() -> tuple[str | None, str | None]:
    """The node's name resolved, and the interface holding that address (``ip``)."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None, None
    try:
        done = subprocess.run(
            ["ip", "-o", "-4", "addr", "show"],
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return address, None
    for line in done.stdout.splitlines():  # "2: eth0    inet 10.0.0.5/24 brd ... "
        words = line.split()
        if len(words) > 3 and words[3].split("/")[0] == address:
            return address, words[1]
    return address, None


def missing(
    facts: dict[str, Any], *, packages: tuple[str, ...], cuda: bool, dlscale_version: str
) -> list[str]:
    """What a node lacks for a study whose backend needs ``packages`` (its framework's and
    Horovod's, by distribution name), on GPUs when ``cuda``: each as a few words."""
    lacks: list[str] = []
    python = str(facts.get("python") or "0")
    version = tuple(int(p) for p in python.split(".")[:2] if p.isdigit())
    if version < MIN_PYTHON:
        lacks.append(f"Python >= {'.'.join(map(str, MIN_PYTHON))} (has {python})")
    if facts.get("dlscale_version") != dlscale_version:
        lacks.append(f"dlscale {dlscale_version} (has {facts.get('dlscale_version')})")
    installed = facts.get("parent_packages") or {}
    lacks += [package for package in packages if package not in installed]
    lacks += [f"{key[: -len('_error')]} loads ({value})" for key, value in facts.items()
              if key.endswith("_error")]  # fmt: skip
    if cuda:
        gpus = facts.get("gpu_names")
        if gpus is None:
            lacks.append("a framework that sees GPUs (torch reports them)")
        elif not gpus:
            lacks.append(f"a CUDA GPU (sees none; cuda {facts.get('cuda_version') or 'absent'})")
    return lacks


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, default=str)
    sys.stdout.write("\n")
