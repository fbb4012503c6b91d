"""dlscale report: the HTML report, paper figures and exported tables, from the store only."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dlscale.errors import UserError
from dlscale.text import visible


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        default="dlscale-results",
        metavar="DIR",
        help="results directory (default: ./dlscale-results)",
    )
    parser.add_argument(
        "--out",
        default="dlscale-report.html",
        type=Path,
        metavar="FILE",
        help="HTML file to write (default: ./dlscale-report.html)",
    )
    parser.add_argument(
        "--figures",
        type=Path,
        metavar="DIR",
        help="also write every figure as PNG and PDF into DIR",
    )
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="write the runs table")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write the runs table as CSV")
    parser.add_argument("--title", default="dlscale scaling report")


def main(args: argparse.Namespace) -> int:
    from dlscale.metrics.scaling import add_scaling
    from dlscale.perfmodel.networks import fitted_networks, microbench_runs
    from dlscale.report.html import build_html
    from dlscale.report.tables import to_csv, to_markdown
    from dlscale.runner import submitted_points
    from dlscale.store.results import RunStore

    store = RunStore(args.results)
    waiting = submitted_points(store)  # and jobs that ended without a result recorded failed
    if waiting:
        print(
            f"dlscale: {len(waiting)} submitted point(s) have no result yet and are not in this "
            f"report (dlscale ls runs --results {visible(args.results)} shows where they stand)",
            file=sys.stderr,
        )
    runs = store.results()
    rows = add_scaling(runs)
    microbench = microbench_runs(Path(args.results), on_problem=store.on_warning)
    if not rows and not microbench:
        raise UserError(
            f"no readable runs in {args.results} (none, or every one skipped above); "
            "run `dlscale run` first"
        )
    fitted = fitted_networks(Path(args.results), on_problem=store.on_warning)
    href = os.path.relpath(Path(args.results).absolute(), args.out.absolute().parent)
    page, plots = build_html(
        rows, title=args.title, source=str(args.results), results_href=Path(href).as_posix(),
        microbench=microbench, fitted=fitted,
    )  # fmt: skip
    _write(args.out, page)
    print(
        f"report: {args.out} ({len(rows)} points of {len(runs)} runs, "
        + (f"{len(microbench)} microbench runs, " if microbench else "")
        + f"{plots} plots, "
        f"{args.out.stat().st_size / 1e6:.1f} MB; opens offline in any browser)"
    )
    if args.markdown:
        _write(args.markdown, to_markdown(rows))
        print(f"table: {args.markdown}")
    if args.csv:
        _write(args.csv, to_csv(rows))
        print(f"table: {args.csv}")
    if args.figures:
        written = _figures(rows, microbench, fitted, args.figures)
        print(f"figures: {len(written)} files (PNG + PDF) in {args.figures}")
    return 0


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror}") from None


def _figures(rows: list[dict], microbench: list[dict], fitted: dict, directory: Path) -> list[Path]:
    """Every study's figures as ``<study slug>-<figure>.png/.pdf`` directly in ``directory``
    (with the model's predictions where a microbench measured the network), and each microbench
    run's as ``<run slug>-<figure>``: the slugs (``study_slugs``) have no dots or slashes, so
    nothing shares, hides or escapes."""
    from collections import defaultdict

    from dlscale.perfmodel.networks import link_lookup
    from dlscale.report.figures import Figure, study_figures, study_slugs
    from dlscale.report.model import collectives, prediction
    from dlscale.report.static import save_static

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {directory}: {error.strerror}") from None
    studies: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        studies[str(row.get("study") or "unnamed")].append(row)
    slugs = study_slugs([*studies, *(run["run_id"] for run in microbench)])
    drawn: list[tuple[str, Figure]] = []
    for name, study_rows in sorted(studies.items()):
        link_of, sources = link_lookup(fitted)
        predicted = prediction(study_rows, link_of, sources)
        figures = study_figures(study_rows) + ([predicted] if predicted else [])
        drawn += [(slugs[name], figure) for figure in figures]
    for run in microbench:
        drawn += [(slugs[run["run_id"]], figure) for figure in collectives(run)]
    written: list[Path] = []
    for slug, figure in drawn:
        stem = directory / f"{slug}-{figure.key}"
        try:
            written += save_static(figure, stem)
        except OSError as error:
            raise UserError(f"cannot write {stem}.png/.pdf: {error.strerror}") from None
    return written
