"""The ``dlscale`` command. Subcommands live in one module each and import heavy things lazily,
so ``dlscale --help`` starts fast and imports no deep-learning framework."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from typing import NoReturn

from dlscale import __version__
from dlscale.errors import UserError
from dlscale.plugins import load_plugins
from dlscale.text import visible

COMMANDS = {
    "run": ("dlscale.cli.run", "run a study: launch workers, measure, store results"),
    "ls": ("dlscale.cli.ls", "list models, backends, datasets, launchers or stored runs"),
    "report": ("dlscale.cli.report", "write the HTML report, paper figures and tables"),
    "env": ("dlscale.cli.env", "show this machine's hardware and software"),
    "compare": ("dlscale.cli.compare", "compare two results directories: find regressions"),
    "microbench": ("dlscale.cli.microbench", "time collectives over message sizes on an engine"),
    "predict": ("dlscale.cli.predict", "predict scaling to many workers from a compute profile"),
}


class _Parser(argparse.ArgumentParser):
    """Bad arguments get one line (not argparse's usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"dlscale: error: {visible(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dlscale",
        description="Run, measure and explain the scaling of data-parallel training.",
    )
    parser.add_argument("--version", action="version", version=f"dlscale {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(command)
        command.set_defaults(module=module)
    return parser


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM takes the Ctrl-C path: workers are stopped, locks freed


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        load_plugins()
        return int(importlib.import_module(args.module).main(args) or 0)
    except UserError as error:
        print(f"dlscale: error: {visible(error)}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("dlscale: interrupted; completed runs are kept, rerun to resume", file=sys.stderr)
        return 130


def entry() -> None:
    sys.exit(main())
