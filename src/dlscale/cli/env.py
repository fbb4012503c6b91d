"""dlscale env: the hardware and software a run here would record."""

from __future__ import annotations

import argparse
import importlib.util
import json

from rich.console import Console
from rich.table import Table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    from dlscale.runtime.environment import host_environment

    env = host_environment()
    if importlib.util.find_spec("torch") is not None:
        import torch

        from dlscale.frameworks.torch.env import torch_environment

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        env.update(torch_environment(device))
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
