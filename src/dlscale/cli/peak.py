"""``dlscale microbench --peak``: this machine's CPU matrix-multiply peak for each thread count
and type, the denominator MFU reads a CPU run against (:mod:`dlscale.runtime.peak`), measured
or read from the cache the runs read it from; no collective is launched."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from dlscale.cli.arguments import whole_list
from dlscale.cli.tables import cell, console, say
from dlscale.contract.errors import UserError
from dlscale.contract.layout import usable_cores
from dlscale.contract.text import excerpt

MAX_THREADS = 4096
"""The most threads a peak is measured with (a typo past it is refused, not run)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--peak`` and its options, beside microbench's own."""
    parser.add_argument(
        "--peak", action="store_true",
        help="measure this machine's CPU matmul peak (MFU's denominator) instead of collectives",
    )  # fmt: skip
    parser.add_argument(
        "--threads", default=None,
        help="with --peak: thread counts, a list like 1,2,4 (default: 1 and the usable cores)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", default=None, help="with --peak: fp32 (default), fp64 or a list: fp32,fp64"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="with --peak: measure again, replacing the cache"
    )


def refuse_without_peak(args: argparse.Namespace) -> None:
    """A :class:`UserError` naming ``--threads``, ``--dtype`` or ``--fresh`` given without
    ``--peak``: they would be ignored by the collectives benchmark."""
    asked = {"--threads": args.threads is not None, "--dtype": args.dtype is not None,
             "--fresh": args.fresh}  # fmt: skip
    given = [flag for flag, there in asked.items() if there]
    if given:
        names = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
        raise UserError(
            f"{names} belong{'s' if len(given) == 1 else ''} to --peak (the CPU's matmul peak): "
            "add --peak, or leave them out for the collectives benchmark"
        )


def thread_counts(text: str | None) -> list[int]:
    """The ``--threads`` list (``None``: 1 and the cores this process may use)."""
    if text is None:
        return list(dict.fromkeys((1, usable_cores())))
    counts = whole_list(text, low=1, high=MAX_THREADS)
    if counts is None:
        raise UserError(
            f"--threads {excerpt(text)}: give a thread count from 1 to {MAX_THREADS:,} or a "
            "list like 1,2,4"
        )
    return counts


def dtypes(text: str | None) -> list[str]:
    """The ``--dtype`` list (``None``: fp32): each of fp32 and fp64, in order, once."""
    from dlscale.runtime.peak import CPU_DTYPES

    if text is None:
        return ["fp32"]
    parts = [part.strip() for part in text.split(",")]
    for part in parts:
        if part not in CPU_DTYPES:
            raise UserError(
                f"--dtype {excerpt(part)}: a CPU peak is measured for "
                f"{' and '.join(CPU_DTYPES)}; give one or a list like fp32,fp64"
            )
    return list(dict.fromkeys(parts))


def main(args: argparse.Namespace) -> int:
    """Measure (or read) each peak asked for and show them, a table or JSON lines."""
    from dlscale.runtime.peak import measured_cpu_peak, peak_cache_dir

    counts, types = thread_counts(args.threads), dtypes(args.dtype)
    rows = []
    for dtype in types:
        for threads in counts:
            found = measured_cpu_peak(threads, dtype, fresh=args.fresh)
            rows.append({
                "kind": "peak", "threads": threads, "dtype": dtype, "flops_s": found.flops_s,
                "gflops_s": found.flops_s / 1e9,
                "per_thread_gflops_s": found.flops_s / 1e9 / threads,
                "cached": found.cached, "busy": found.busy, "measured_at": found.measured_at,
                "path": None if found.path is None else str(found.path),
            })  # fmt: skip
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    _show(rows, peak_cache_dir())
    return 0


def _show(rows: list[dict[str, Any]], folder: Any) -> None:
    out = console()
    table = Table(title="CPU matmul peak (numpy)", title_justify="left")
    for column in ("threads", "dtype", "peak GFLOP/s", "per thread GFLOP/s", "source"):
        table.add_column(column, justify="left" if column in ("dtype", "source") else "right")
    for row in rows:
        source = f"cached at {row['measured_at']}" if row["cached"] else "measured now"
        source += ", on a busy machine" if row["busy"] else ""
        table.add_row(
            str(row["threads"]), row["dtype"], f"{row['gflops_s']:,.1f}",
            f"{row['per_thread_gflops_s']:,.1f}", cell(source),
        )  # fmt: skip
    out.print(table)
    if folder is None:
        say(out, "not kept: the cache is turned off (DLSCALE_CACHE_DIR is set empty); each "
                 "run measures its own peak for MFU")  # fmt: skip
    elif any(row["path"] is None for row in rows):
        say(out, f"not kept: {folder} cannot be written; each run measures its own peak for MFU")
    else:
        say(out, f"kept in {folder}; runs on this machine with these threads read it for MFU "
                 "(--fresh measures again)")  # fmt: skip
    if any(row["busy"] for row in rows):
        say(out, "on a busy machine: other processes kept the machine busy as it was measured, "
                 "so it may read low; runs measure it again after 10 minutes, keeping the "
                 "better, and --fresh on a quiet machine replaces it")  # fmt: skip
    if any(threads > usable_cores() for threads in (row["threads"] for row in rows)):
        say(console(stderr=True), f"dlscale: warning: more threads than the {usable_cores()} "
            "cores this process may use: the peak is of the cores shared")  # fmt: skip
