"""``dlscale predict --validate DIR``: every measured point of DIR predicted on its own
pattern and network, beside what it measured (docs/perfmodel.md, "Predicted against
measured")."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from dlscale.cli.predict_trust import validation_rows
from dlscale.cli.tables import cell, console, say
from dlscale.contract.errors import UserError
from dlscale.contract.text import shell_command
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.networks import Fitted


def validate(results: Path, args: argparse.Namespace, given: Link | None, said: str) -> int:
    """Every measured point of ``results`` predicted on its network: ``given`` (``said``: in
    words), or the newest microbench (in ``--network-from``, else ``results``) run with the
    same launcher, emulated network and nodes."""
    from dlscale.perfmodel import validate
    from dlscale.perfmodel.networks import link_lookup
    from dlscale.report.model import errors_in_words, median_basis

    as_json = args.json
    if given is not None:
        sources = {"all points": said}
        link_of: Callable[[dict[str, Any]], Link | None] = lambda point: given  # noqa: E731
    else:
        link_of, sources = link_lookup(fitted_networks(Path(args.network_from or results)))

    rows = validation_rows(results, link_of)
    if not rows:
        raise UserError(
            f"no point in {results} to check: it needs completed points of 2 workers or more "
            "whose engine names its synchronization (sync_pattern: every multi-worker engine "
            "but tf-mirrored and PowerSGD) with its compute without synchronization (its no-sync "
            "probe, or its 1-worker baseline at the same threads in the same store), and a "
            "microbench run on the same network (dlscale microbench with the same --launcher "
            "and --set network/nnodes), or --bandwidth"
        )
    medians, engines = validate.median_errors(rows), validate.per_engine(rows)
    if as_json:
        for row in rows:
            print(json.dumps({"kind": "validation", **row}))
        for engine, errors in engines.items():
            print(json.dumps({"kind": "engine_median_abs_error", "backend": engine, **errors}))
        print(json.dumps({"kind": "median_abs_error", **medians}))
        return 0
    out = console()
    say(out, f"predicted against measured: {len(rows)} points of {results}", style="bold")
    out.print(_validation_table(rows))
    for where, said in sources.items():
        say(out, f"network ({where}): {said}", style="dim")
    for engine, errors in engines.items():
        basis = median_basis([r for r in rows if r["backend"] == engine])
        say(out, f"{engine}: median absolute error {errors_in_words(errors)} over {basis}")
    every = errors_in_words(medians)
    say(out, f"every engine: median absolute error {every} over {median_basis(rows)}")
    return 0


def _validation_table(rows: list[dict[str, Any]]) -> Table:
    """The validation rows, each throughput in the rows' unit (img/s, tok/s; samples/s for
    rows of several: :mod:`dlscale.metrics.units`)."""
    from dlscale.metrics.units import rate_for, sample_unit
    from dlscale.report.model import share_words

    rate = rate_for(sample_unit(row) for row in rows)
    table = Table()
    for column in ("backend", "model", "workers", "network", "algorithm",
                   f"measured {rate.label}", "compute ms (from)", "sync ms (from)",
                   f"predicted {rate.label} (error)", "overlap bound"):  # fmt: skip
        right = "/s" in column or "ms" in column or column == "overlap bound"
        table.add_column(column, justify="right" if right else "left")
    for row in rows:
        algorithm = row["algorithm"] + (f", {row['servers']} srv" if row["servers"] else "")
        measured, predicted, bound = (
            rate.of(row, f"{which}_samples_s") for which in ("measured", "predicted", "overlap")
        )
        overlap = (
            f"{bound:,.1f} ({row['overlap_error']:+.1%}; {share_words(row)})"
            if bound is not None
            else "-"
        )
        table.add_row(
            cell(row["backend"]), cell(row["model"]) + (" (noisy)" if row["noisy"] else ""),
            str(row["workers"]), cell(row["network"] or row["launcher"]), cell(algorithm),
            f"{measured:,.1f}",
            f"{row['compute_ms']:.1f} ({cell(row['compute_from'])})",
            f"{row['comm_ms']:.2f} ({cell(row['comm_from'])})",
            f"{predicted:,.1f} ({row['error']:+.1%})", overlap,
        )  # fmt: skip
    return table


def fitted_networks(results: Path) -> dict[tuple[Any, ...], Fitted]:
    """The stored fitted networks of ``results`` (:mod:`dlscale.perfmodel.networks`); none at
    all is one line (naming the files left out as damaged and the fits that cannot be used).
    Beside a usable fit, each file left out and each fit that cannot be used (a microbench whose
    times did not grow with the size: no bandwidth term) is one warning line: its engine's
    network is then unknown, and the other engines' are still used."""
    from dlscale.perfmodel.networks import fitted_networks as stored
    from dlscale.store.results import print_warning

    skipped: list[str] = []
    found = stored(results, on_problem=skipped.append, on_skipped=skipped.append)
    if not found:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise UserError(
            f"no microbench with a fitted network in {results}{why}: run `"
            + shell_command(["dlscale", "microbench", "--workers", "2", "--results", results])
            + "` first, or give --bandwidth"
        )
    for problem in skipped:
        print_warning(problem)
    return found
