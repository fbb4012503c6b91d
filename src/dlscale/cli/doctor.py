"""dlscale doctor: check the nodes a study would run on before it is spent.

The check runs where the ranks would: through the study's launcher (Slurm: one task on each of
``nodes`` nodes, an srun step of this allocation or of one srun asks for; mpirun and horovodrun:
one rank on each host of ``hosts``/``hostfile``; ``ray``: a Ray task pinned to each live node
of the ``ray_address`` cluster; ``local``: here),
under the interpreter the backend's workers run (``dlscale.runtime.node_check``). Each node
reports its Python, dlscale, the frameworks' versions, CUDA, the GPUs its ranks would see,
NCCL, MPI and its address with the interface holding it; a table shows one row per node with
what it lacks for the backend and device given, and the exit status is 1 when any node lacks
something the study needs (2: the check itself could not run).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from typing import Any

from dlscale.contract.errors import ERROR_PREFIX, UserError

CHECK_TIMEOUT_S = 600.0
"""The longest the check may take, queueing for the nodes included."""
LABELLED = re.compile(r"^\s*(?:([0-9]{1,9}): |\[(?:[0-9]{1,9},)?([0-9]{1,9})\]<stdout>:)(.*)$")
"""A line labelled with its task's number, then what it printed: srun --label's ``3: ``,
mpirun --tag-output's ``[1,3]<stdout>:``, horovodrun's ``[3]<stdout>:``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from dlscale.cli.run import add_set_flag

    parser.add_argument(
        "--launcher",
        default="local",
        help="how the ranks start (slurm, mpirun, horovodrun, ray, local)",
    )
    parser.add_argument(
        "--backend", default="torch-ddp", help="the backend whose needs are checked"
    )
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: a GPU on every node")
    add_set_flag(parser, "a launcher's setting: nodes=4, partition=gpu, slurm_args='--account=p'")
    parser.add_argument("--json", action="store_true", help="one JSON object per node")


def main(args: argparse.Namespace) -> int:
    from dlscale import __version__
    from dlscale.config.study import parse_set
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.launchers import LAUNCHERS
    from dlscale.contract.run_config import RunConfig
    from dlscale.launchers.launch_run import interpreter
    from dlscale.preflight import check_interpreter
    from dlscale.runtime.node_check import missing

    settings: dict[str, Any] = parse_set(args.overrides)
    grids = [key for key, value in settings.items() if isinstance(value, list)]
    if grids:
        raise UserError(f"doctor checks one setting at a time: {grids[0]} has several values")
    config = RunConfig.make(
        backend=args.backend, launcher=args.launcher, device=args.device, **settings
    )
    python = interpreter(config)
    if LAUNCHERS.get(config.launcher).on_this_machine(config.options):
        check_interpreter(python, BACKENDS.get(config.backend), given=config.python)
    argv = (python, "-P", "-m", "dlscale.runtime.node_check")
    launcher = LAUNCHERS.get(config.launcher).create()
    launcher.check(python)  # its tool installed (srun), and its scheduler answering
    launcher.check_ready()
    command = launcher.on_each_node(config, argv)
    nodes = _run(command)
    packages = _packages(config.backend)
    rows = []
    for index, facts in nodes:
        lacks = missing(
            facts, packages=packages, cuda=config.device == "cuda", dlscale_version=__version__
        )
        rows.append((index, facts, lacks))
    if args.json:
        for index, facts, lacks in rows:
            print(json.dumps({"node": index, **facts, "missing": lacks}, default=str))
    else:
        _table(rows, packages, f"{config.backend} on {config.device}", python)
    return 1 if any(lacks for _, _, lacks in rows) else 0


def _packages(backend: str) -> tuple[str, ...]:
    """The distributions a backend's workers need: its framework's and those of the modules
    it requires beyond it (Horovod)."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.frameworks import FRAMEWORKS

    spec = BACKENDS.get(backend)
    needed = list(FRAMEWORKS.get(spec.framework).packages[:1])
    by_module = {f.module: f.packages[0] for _, f in FRAMEWORKS if f.packages}
    needed += [by_module.get(module, module) for module in spec.requires]
    return tuple(dict.fromkeys(needed))


def _run(command: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    """Each node's facts, by node number, from the command's output (one JSON object a node,
    labelled ``N: `` where there are several)."""
    from dlscale.launchers.slurm_controller import said

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError(f"cannot run {command[0]}: not installed here") from None
    except OSError as error:  # not a program (a directory, /etc/passwd)
        raise UserError(f"cannot run {command[0]}: {error.strerror or error}") from None
    except subprocess.TimeoutExpired:
        raise UserError(
            f"the node check did not end in {CHECK_TIMEOUT_S:.0f} s (waiting for nodes?)"
        ) from None
    nodes: dict[int, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        labelled = LABELLED.match(line)
        index, text = (0, line)
        if labelled:
            index, text = int(labelled.group(1) or labelled.group(2)), labelled.group(3)
        try:
            facts = json.loads(text)
        except ValueError:
            continue
        if isinstance(facts, dict):
            nodes[index] = facts
    if done.returncode != 0 or not nodes:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        if len(lines) == 1 and lines[0].startswith(ERROR_PREFIX):  # its own words: say them
            raise UserError(lines[0].removeprefix(ERROR_PREFIX))
        words = said(done.stderr or done.stdout)[-400:]
        raise UserError(f"the node check failed on the nodes ({command[0]}: {words})")
    return sorted(nodes.items())


def _table(rows: list[tuple[int, dict[str, Any], list[str]]], packages: tuple[str, ...],
           study: str, python: str) -> None:  # fmt: skip
    from rich.table import Table

    from dlscale.cli.tables import console, markup

    table = Table(title=markup(f"nodes for {study} (workers' Python: {python})"))
    for column in ("node", "Python", "dlscale", "needs", "CUDA / GPUs", "MPI", "address"):
        table.add_column(column)
    table.add_column("missing for the study")
    for index, facts, lacks in rows:
        installed = facts.get("parent_packages") or {}
        frameworks = ", ".join(f"{name} {installed.get(name, '-')}" for name in packages)
        gpus = facts.get("gpu_names")
        cuda = f"{facts.get('cuda_version') or '-'} / {len(gpus) if gpus is not None else '?'}"
        address = f"{facts.get('address') or '?'} ({facts.get('interface') or '?'})"
        cells = (
            f"{index} {facts.get('hostname', '?')}",
            facts.get("python", "?"),
            facts.get("dlscale_version", "?"),
            frameworks or "-",
            cuda,
            facts.get("mpirun") or "-",
            address,
            "; ".join(lacks) or "nothing",
        )
        table.add_row(*(markup(str(cell)) for cell in cells))  # a node's text is data
    console().print(table)
