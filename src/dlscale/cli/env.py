"""dlscale env: the hardware and software a run here would record."""

from __future__ import annotations

import argparse
import json

from rich.table import Table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    from dlscale.contract.frameworks import FRAMEWORKS
    from dlscale.runtime.environment import host_environment

    env = host_environment()
    for _, framework in FRAMEWORKS:
        if framework.facts and framework.installed():
            env.update(framework.environment())
    if args.json:
        print(json.dumps(env, default=str))
        return 0
    from dlscale.cli.tables import console, markup

    table = Table(title="dlscale environment", show_header=False)
    for key, value in env.items():  # a plug-in's facts and package names are its text: escaped
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) or "-"
        table.add_row(markup(key), markup("-" if value is None else value))
    console().print(table)
    return 0
