"""The ``dlscale`` command. Subcommands live in one module each and import heavy things lazily,
so ``dlscale --help`` starts fast and imports no deep-learning framework."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import importlib
import os
import signal
import sys
from typing import NoReturn

from dlscale import __version__
from dlscale.contract.errors import ERROR_PREFIX, UserError
from dlscale.contract.numbers import whole_number
from dlscale.contract.plugins import load_plugins
from dlscale.contract.text import for_stream, visible

COMMANDS = {
    "run": ("dlscale.cli.run", "run a study: launch workers, measure, store results"),
    "ls": ("dlscale.cli.ls", "list models, backends, datasets, launchers, presets or stored runs"),
    "report": ("dlscale.cli.report", "write the HTML report, paper figures and tables"),
    "env": ("dlscale.cli.env", "show this machine's hardware and software"),
    "doctor": ("dlscale.cli.doctor", "check the nodes a study would run on, through its launcher"),
    "compare": ("dlscale.cli.compare", "compare two results directories: find regressions"),
    "microbench": ("dlscale.cli.microbench", "time collectives over message sizes on an engine"),
    "predict": ("dlscale.cli.predict", "predict scaling to many workers from a compute profile"),
    "hosts": ("dlscale.cli.hosts", "emulated hosts on this machine: a test bed of a cluster"),
    "explain": ("dlscale.cli.explain", "what a column of the results table means, and its unit"),
}


class _Parser(argparse.ArgumentParser):
    """Bad arguments get one line (not argparse's usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        said = f"dlscale: error: {visible(message)} (see {self.prog} --help)"
        print(for_stream(said, sys.stderr), file=sys.stderr)
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


INTERRUPTED = {
    "run": "completed points are kept; rerun the same command to resume from the first "
    "point not completed",
    "microbench": "the runs measured before are kept; microbench does not resume: rerun "
    "measures every size again",
    "predict": "a profile run that completed is kept and not measured again",
}
"""What an interrupted command leaves, in its own words (a command that writes nothing: none)."""


class Stopped(KeyboardInterrupt):
    """A signal that stops dlscale the way Ctrl-C does (workers stopped, locks freed), with
    the exit status a shell gives a process it killed: 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: object) -> None:
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    _drop_bad_terminal_size()
    _encodable_output()
    words = list(sys.argv[1:] if argv is None else argv)
    after = words.index("--") if "--" in words else len(words)
    try:
        args = build_parser().parse_args(words[:after])
    except KeyboardInterrupt:  # Ctrl-C while the commands are imported
        _say_quietly("dlscale: interrupted (Ctrl-C) while starting; nothing was run")
        return 128 + signal.SIGINT
    args.passed_on = words[after + 1 :]  # what follows "--": a script's own arguments
    if "--" in words and not getattr(args, "script", None):
        print(
            "dlscale: error: only dlscale run --script FILE.py takes arguments after --",
            file=sys.stderr,
        )
        return 2
    try:
        _install_handlers()
        load_plugins()
        return int(importlib.import_module(args.module).main(args) or 0)
    except UserError as error:
        print(for_stream(f"{ERROR_PREFIX}{visible(error)}", sys.stderr), file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:  # the reader went away (| head, | less quit early)
        _quiet_stdout()
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt as error:
        signum = error.signum if isinstance(error, Stopped) else int(signal.SIGINT)
        left = INTERRUPTED.get(args.command)
        said = f"dlscale: {args.command} {_signal_name(signum)}" + (f"; {left}" if left else "")
        _say_quietly(said)
        return 128 + signum


def _quiet_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone, so that nothing more (the flush at
    exit) writes to the closed pipe: a Unix tool's silent end, not a traceback."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _drop_bad_terminal_size() -> None:
    """``$COLUMNS`` and ``$LINES`` that are no whole number (``²``, 5,000 digits) are left
    out of this process's environment: rich reads them with ``str.isdigit()`` and ``int()``,
    which raises on ``²``; without them the terminal's own size is used."""
    for name in ("COLUMNS", "LINES"):
        if name in os.environ and whole_number(os.environ[name], 1, 100_000) is None:
            del os.environ[name]


_PLAIN = {"±": "+/-", "…": "...", "×": "x", "—": "-", "–": "-", "≥": ">=", "≤": "<=", "→": "->",
          "µ": "u", "─": "-", "│": "|", "·": "."}  # fmt: skip
"""What a character dlscale prints is written as where the output cannot encode it."""


def _plain(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(_PLAIN.get(char, "?") for char in text), error.end


def _encodable_output() -> None:
    """stdout and stderr that cannot encode every character (``PYTHONIOENCODING=ascii``, a
    POSIX locale without UTF-8) write ``±`` as ``+/-`` and what has no such spelling as
    ``?``, rather than end the command with UnicodeEncodeError."""
    codecs.register_error("dlscale-plain", _plain)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        with contextlib.suppress(LookupError, AttributeError, ValueError):
            if codecs.lookup(encoding).name != "utf-8":
                stream.reconfigure(errors="dlscale-plain")  # type: ignore[union-attr]


def _install_handlers() -> None:
    """Ctrl-C, SIGTERM and SIGHUP stop the command cleanly from here on (the early ones of
    :mod:`dlscale.start` are replaced); a signal a caller ignores (nohup) stays ignored."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup's choice is kept
        signal.signal(signal.SIGHUP, _interrupt)  # a closed terminal stops it cleanly too


def _signal_name(signum: int) -> str:
    if signum == signal.SIGINT:
        return "interrupted (Ctrl-C)"
    return f"stopped by {signal.Signals(signum).name}"


def _say_quietly(line: str) -> None:
    """One line on stderr; nothing where stderr is gone (a closed terminal after SIGHUP)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)
