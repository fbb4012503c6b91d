"""Errors that reach the user as one readable line and exit code 2 (no traceback)."""

from __future__ import annotations

ERROR_PREFIX = "dlscale: error: "
"""What begins the one line a :class:`UserError` is printed as."""


class UserError(Exception):
    """A problem with the user's input (names, values, files): exit code 2, one line."""

    exit_code = 2


class DataError(UserError):
    """A data set file is missing, truncated or of the wrong shape."""


class SchemaError(UserError):
    """A stored file has a schema this version cannot read."""


class UnsupportedPoint(UserError):
    """A valid setting that the chosen backend cannot run (a grid skips such points)."""


class TooManyWorkers(UnsupportedPoint):
    """A backend's worker limit (a 1-process loop at 2 workers): in a grid whose other
    backends run that many workers, the expected gap of the grid, skipped without a note."""


class WorkerFault(Exception):
    """A worker's failure that is not the user's input but needs no traceback to explain (a
    loader process killed from outside): the worker exits 1 with this one line."""
