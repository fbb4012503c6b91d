"""dlscale ls models|backends|datasets|launchers|runs."""

from __future__ import annotations

import argparse
import importlib.util

from rich.table import Table

from dlscale.cli.tables import console
from dlscale.errors import UserError

WHAT = ("models", "backends", "datasets", "launchers", "runs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=WHAT, help="what to list")
    parser.add_argument(
        "--results",
        default="dlscale-results",
        metavar="DIR",
        help="results directory for `ls runs` (default: ./dlscale-results)",
    )


def main(args: argparse.Namespace) -> int:
    table = {
        "models": _models,
        "backends": _backends,
        "datasets": _datasets,
        "launchers": _launchers,
        "runs": lambda: _runs(args.results),
    }[args.what]()
    console().print(table)
    return 0


def _models() -> Table:
    if importlib.util.find_spec("torch") is None:
        raise UserError(
            "listing models builds them with PyTorch, which is not installed: "
            "pip install 'dlscale[torch]' -c constraints.txt"
        )
    from dlscale.models import MODELS
    from dlscale.models.profile import profile

    table = Table(title="models (parameters and forward FLOPs per image at the native size)")
    for column in (
        "name",
        "params (M)",
        "GFLOPs/image",
        "input",
        "classes",
        "BatchNorm",
        "description",
    ):
        table.add_column(column)
    for name, spec in MODELS:
        p = profile(name)
        table.add_row(
            name,
            f"{p.params / 1e6:.2f}",
            f"{p.forward_flops_per_sample / 1e9:.3f}",
            "x".join(map(str, p.input_shape)),
            str(p.num_classes),
            "yes" if spec.has_batchnorm else "no",
            spec.description,
        )
    return table


def _backends() -> Table:
    from dlscale.backends import BACKENDS

    table = Table(title="backends")
    for column in ("name", "framework", "installed", "max workers", "devices", "description"):
        table.add_column(column)
    for name, spec in BACKENDS:
        installed = "yes" if importlib.util.find_spec(spec.framework) else "no"
        table.add_row(
            name,
            spec.framework,
            installed,
            str(spec.max_workers or "any"),
            ",".join(spec.devices),
            spec.description,
        )
    return table


def _datasets() -> Table:
    from dlscale.datasets import DATASETS

    table = Table(title="datasets")
    for column in ("name", "needs --data-dir", "accuracy", "description"):
        table.add_column(column)
    for name, spec in DATASETS:
        table.add_row(
            name,
            "yes" if spec.needs_data_dir else "no",
            "yes" if spec.has_eval else "no",
            spec.description,
        )
    return table


def _launchers() -> Table:
    from dlscale.launchers import LAUNCHERS

    table = Table(title="launchers")
    table.add_column("name")
    table.add_column("description")
    for name, spec in LAUNCHERS:
        table.add_row(name, spec.description)
    return table


def _runs(results: str) -> Table:
    from dlscale.cli.tables import points_table
    from dlscale.metrics.scaling import add_scaling
    from dlscale.store.results import RunStore

    rows = add_scaling(RunStore(results).results())
    return points_table(rows, title=f"runs in {results} ({len(rows)})", run_ids=True)
