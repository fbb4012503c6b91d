"""dlscale env: the hardware and software a run here would record."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
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
    table = Table(title="dlscale environment", show_header=False)
    for key, value in env.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) or "-"
        table.add_row(key, "-" if value is None else str(value))
    Console().print(table)
    return 0
