"""dlscale report: the HTML report, paper figures and exported tables, from the store only.

The report goes into the results directory (``DIR/dlscale-report.html``, beside the runs it
shows and links to) unless ``-o/--out FILE`` says where. Every file is written whole or not at
all (`dlscale.contract.files.write_atomic`: a full disk leaves the file there as it was, and
says so in one line), and never through a symbolic link: a link where an output goes (the
report, a table, ``--figures DIR`` itself or a figure file in it) is refused before anything
is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.contract.errors import UserError
from dlscale.contract.files import OutputError, output_failure, refuse_link, write_atomic
from dlscale.contract.text import visible

if TYPE_CHECKING:
    from dlscale.report.series import Figure

REPORT_NAME = "dlscale-report.html"
"""The report's file name in the results directory, where it goes unless ``--out`` says."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        help="results directory, as --results gives it (as `predict --validate DIR` takes it)",
    )
    parser.add_argument(
        "--results",
        metavar="DIR",
        help="results directory (default: ./dlscale-results)",
    )
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        metavar="FILE",
        help=f"HTML file to write (default: DIR/{REPORT_NAME}, beside the runs it shows)",
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
    from dlscale.store.claims import read_claims
    from dlscale.store.results import RunStore

    args.results = _results_directory(args.directory, args.results)
    beside = args.out is None  # the default: in the results directory, beside its runs
    if beside:
        args.out = Path(args.results) / REPORT_NAME
    files = [
        (args.out, "the report" if beside else "--out"),
        (args.markdown, "--markdown"),
        (args.csv, "--csv"),
    ]
    for path, flag in files:
        if path is not None:
            refuse_link(path, flag)  # before any work: never followed, never replaced
    if args.figures is not None:
        refuse_link(args.figures, "--figures")
    store = RunStore(args.results)
    waiting = submitted_points(store)  # and jobs that ended without a result recorded failed
    if waiting:
        from dlscale.cli.tables import results_command

        listing = results_command("ls", "runs", results=args.results)
        print(
            f"dlscale: {len(waiting)} submitted point(s) have no result yet and are not in this "
            f"report ({listing} shows where they stand)",
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
    claims = read_claims(Path(args.results), on_problem=store.on_warning)
    figures = _planned_figures(rows, microbench, fitted) if args.figures is not None else []
    if args.figures is not None:
        for stem, _ in figures:
            for path in _figure_files(args.figures, stem):
                refuse_link(path, "a figure of --figures")
    href = os.path.relpath(Path(args.results).absolute(), args.out.absolute().parent)
    page, plots = build_html(
        rows, title=args.title, source=str(args.results), results_href=Path(href).as_posix(),
        microbench=microbench, fitted=fitted, claims=claims,
    )  # fmt: skip
    size = _write_report(args.out, page, beside)
    print(
        visible(
            f"report: {args.out} ({len(rows)} points of {len(runs)} runs, "
            + (f"{len(microbench)} microbench runs, " if microbench else "")
            + f"{plots} plots, {size / 1e6:.1f} MB; opens offline in any browser)"
        )
    )
    _print_claims(claims, rows)
    if args.markdown:
        _write(args.markdown, to_markdown(rows))
        print(visible(f"table: {args.markdown}"))
    if args.csv:
        _write(args.csv, to_csv(rows))
        print(visible(f"table: {args.csv}"))
    if args.figures is not None:
        written = _write_figures(figures, args.figures)
        print(visible(f"figures: {len(written)} files (PNG + PDF) in {args.figures}"))
    return 0


def _print_claims(claims: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Each study's published claims with their verdicts, as `dlscale run` prints them."""
    from dlscale.cli.claims import by_study, print_claims
    from dlscale.cli.tables import console

    out = console()
    for study, points in sorted(by_study(rows).items()):
        print_claims(out, study, claims.get(study, ()), points)


def _directory(directory: Path, flag: str = "") -> None:
    """Make ``directory`` (and its parents) if it is missing. With ``flag``, the directory the
    user named for dlscale's files: refused if it is a symbolic link, before and after."""
    if flag:
        refuse_link(directory, flag)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(
            f"cannot create the directory {directory}: a file that is not a directory is in the "
            "way; choose another path"
        ) from None
    except OSError as error:
        raise output_failure(directory, error) from None
    if flag:
        refuse_link(directory, flag)  # planted while we made it


def _write(path: Path, text: str) -> int:
    """Write ``text`` to ``path`` whole or not at all; its size in bytes."""
    data = text.encode("utf-8")
    _directory(path.parent)
    write_atomic(path, data)
    return len(data)


def _write_report(path: Path, page: str, beside: bool) -> int:
    """Write the report to ``path``; where it goes by default (``beside``: in the results
    directory) and that cannot be written, one line naming the directory and the fix."""
    try:
        return _write(path, page)
    except OutputError as error:
        if not beside:
            raise
        raise OutputError(
            f"{error}; the report goes into the results directory {path.parent} unless told "
            "otherwise: write it elsewhere with -o FILE"
        ) from None


def _figure_files(directory: Path, stem: str) -> list[Path]:
    """The files `save_static` writes for ``stem``."""
    from dlscale.report.static import FORMATS

    return [directory / f"{stem}.{suffix}" for suffix in FORMATS]


def _planned_figures(
    rows: list[dict[str, Any]], microbench: list[dict[str, Any]], fitted: dict[Any, Any]
) -> list[tuple[str, Figure]]:
    """Every study's figures as ``<study slug>-<figure>`` (with the model's predictions where a
    microbench measured the network), and each microbench run's as ``<run slug>-<figure>``:
    the slugs (``study_slugs``) have no dots or slashes, so nothing shares, hides or escapes
    the directory."""
    from collections import defaultdict

    from dlscale.perfmodel.networks import link_lookup
    from dlscale.report.figures import study_figures
    from dlscale.report.model import collectives, model_figures
    from dlscale.report.slugs import study_slugs

    studies: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        studies[str(row.get("study") or "unnamed")].append(row)
    slugs = study_slugs([*studies, *(run["run_id"] for run in microbench)])
    planned: list[tuple[str, Figure]] = []
    for name, study_rows in sorted(studies.items()):
        link_of, sources = link_lookup(fitted)
        figures = study_figures(study_rows) + model_figures(study_rows, link_of, sources)
        planned += [(f"{slugs[name]}-{figure.key}", figure) for figure in figures]
    for run in microbench:
        planned += [(f"{slugs[run['run_id']]}-{f.key}", f) for f in collectives(run)]
    return planned


def _write_figures(planned: list[tuple[str, Figure]], directory: Path) -> list[Path]:
    """Draw each planned figure as PNG and PDF directly in ``directory``, each file whole."""
    from dlscale.report.static import save_static

    _directory(directory, "--figures")
    written: list[Path] = []
    for stem, figure in planned:
        written += save_static(figure, directory / stem)
    return written


def _results_directory(positional: str | None, flag: str | None) -> str:
    """The results directory, given as ``DIR`` or ``--results DIR`` (default
    ``dlscale-results``); both at once must name the same one."""
    if positional is not None and flag is not None and Path(positional) != Path(flag):
        raise UserError(
            f"two results directories given: {visible(positional)} and --results "
            f"{visible(flag)}; give one"
        )
    return positional or flag or "dlscale-results"
