"""The ``dlscale`` command's first lines, before anything heavy is imported.

A Ctrl-C (or SIGTERM, SIGHUP) that lands while dlscale imports its commands, before its own
handlers are in place (:func:`dlscale.cli.main`), ends it at once with one line and the status
a shell gives a process it stopped, never with a traceback: nothing was started yet.
"""

from __future__ import annotations

import os
import signal
import sys

_EARLY = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stopped_early(signum: int, _frame: object) -> None:
    name = "interrupted (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
    os.write(2, f"dlscale: {name} while starting; nothing was run\n".encode())
    os._exit(128 + signum)


def entry() -> None:
    for signum in _EARLY:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's choice is kept
            signal.signal(signum, _stopped_early)
    from dlscale.cli import main

    sys.exit(main())
