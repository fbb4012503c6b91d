"""dlscale compare A B: is the candidate results directory B slower than the baseline A?

The statistics (matching, ratio, Welch interval on logs, Mann-Whitney U test, regression rule)
are in :mod:`dlscale.metrics.compare` and docs/metrics.md; this module reads, prints and exits.
Exit status: 0; 1 with ``--fail-on-regression PCT`` when a point regresses beyond PCT percent
(a possible regression that too few samples cannot test counts); 2 for bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.cli.arguments import decimal
from dlscale.contract.errors import UserError
from dlscale.contract.shapes import MAX_QUANTITY

if TYPE_CHECKING:
    from rich.console import Console

    from dlscale.metrics.compare import Comparison, PointComparison

_SHOWN = ("backend", "model", "dataset", "workers", "batch_size")
"""The settings that name a point listed as only on one side."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="A", type=Path, help="baseline results directory")
    parser.add_argument("candidate", metavar="B", type=Path, help="candidate results directory")
    parser.add_argument(
        "--fail-on-regression",
        type=decimal(-MAX_QUANTITY, MAX_QUANTITY),  # its range said below: [0, 100)
        metavar="PCT",
        help="exit 1 if a point is slower than A by more than PCT percent (and significantly so, "
        "or untestable); also the verdict threshold (default 5)",
    )
    parser.add_argument(
        "--alpha",
        type=decimal(-MAX_QUANTITY, MAX_QUANTITY),  # its range said below: (0, 1)
        default=0.05,
        help="significance level of the Mann-Whitney U test (default 0.05)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="every column, however wide (default: those that fit the terminal)",
    )


def main(args: argparse.Namespace) -> int:
    from dlscale.metrics.compare import DEFAULT_THRESHOLD, compare

    threshold = _threshold(args.fail_on_regression, DEFAULT_THRESHOLD)
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must be in (0, 1), got {args.alpha}")
    (results_a, _), (results_b, skipped_b) = _load(args.baseline), _load(args.candidate)
    comparison = compare(results_a, results_b, threshold=threshold, alpha=args.alpha)
    if not comparison.matched:
        raise UserError(_nothing_matched(args.baseline, args.candidate, results_a, results_b))
    if args.json:
        print(json.dumps(_to_json(comparison, args), allow_nan=False))
    else:
        _print(comparison, args)
    if args.fail_on_regression is None:
        return 0
    unread = _unread_candidates(comparison, skipped_b)
    if unread:  # a gate must not pass on what it could not read
        print(f"dlscale: regression gate failed: {unread}", file=sys.stderr)
        return 1
    return 1 if comparison.regressions else 0


def _unread_candidates(comparison: Any, skipped: int) -> str:
    """Why the candidate cannot be judged in full ('' if it can): result files skipped as
    unreadable (each named in its warning), or completed runs without a usable throughput."""
    unusable = [f.run_id for f in comparison.failed if f.side == "B" and f.status == "unusable"]
    reasons = []
    if skipped:
        reasons.append(f"{skipped} result file(s) of the candidate could not be read (named above)")
    if unusable:
        reasons.append(f"candidate run(s) {', '.join(unusable)} have no usable throughput")
    return "; ".join(reasons)


def _threshold(pct: float | None, default: float) -> float:
    if pct is None:
        return default
    if not 0 <= pct < 100:
        raise UserError(f"--fail-on-regression takes a percentage in [0, 100), got {pct}")
    return pct / 100


def _load(directory: Path) -> tuple[list[dict[str, Any]], int]:
    """The readable results in ``directory`` and how many result files were skipped (each
    with its one warning)."""
    from dlscale.store.results import RunStore, print_warning

    if not directory.is_dir():
        raise UserError(f"results directory {directory} does not exist")
    skipped: list[str] = []

    def warn(message: str) -> None:
        skipped.append(message)
        print_warning(message)

    results = [result.row() for result in RunStore(directory, on_warning=warn).results()]
    if not results:
        raise UserError(f"no readable results in {directory} (none, or every one skipped above)")
    return results, len(skipped)


def _nothing_matched(
    dir_a: Path, dir_b: Path, results_a: list[dict[str, Any]], results_b: list[dict[str, Any]]
) -> str:
    from dlscale.metrics.compare import closest_pair

    for directory, results in ((dir_a, results_a), (dir_b, results_b)):
        if not any(r.get("status") == "completed" for r in results):
            return f"no completed runs in {directory} ({len(results)} runs, none completed)"
    pair = closest_pair(results_a, results_b)
    message = f"no point of {dir_a} matches one of {dir_b}"
    if pair is None:
        return message
    config_a, config_b, keys = pair
    diffs = ", ".join(f"{k} ({config_a.get(k)!r} vs {config_b.get(k)!r})" for k in keys)
    return f"{message}; the closest pair differs in {diffs}"


def _print(comparison: Comparison, args: argparse.Namespace) -> None:
    """The table fitted to the terminal (`dlscale.cli.compare_table`), then the paragraphs
    under it, each wrapped at words to the same width."""
    from dlscale.cli.compare_table import comparison_table
    from dlscale.cli.tables import console, print_at_width, say, table_width

    out = console()
    width = table_width(out)
    title = f"dlscale compare: B = {args.candidate} against A = {args.baseline}"
    say(out, title, style="table.title")  # a long path: one line, unbroken
    table, under, legend = comparison_table(comparison, width=width, wide=args.wide)
    print_at_width(out, table, width)
    for paragraph in under:
        _paragraph(out, paragraph, width, style="table.caption")
    _paragraph(out, legend, width, style="dim")
    matched = [p.config for p in comparison.matched]
    for label, points, others in (
        (f"only in A ({args.baseline})", comparison.only_in_a, comparison.only_in_b),
        (f"only in B ({args.candidate})", comparison.only_in_b, comparison.only_in_a),
    ):
        if points:
            say(out, f"{label}: {len(points)} point(s)")  # a path: one line, as the title
            other_configs = [o.config for o in others] + matched
            for point in points:
                hint = _closest_hint(point.config, other_configs)
                runs = ", ".join(point.run_ids)
                _paragraph(out, f"{_describe(point.config)}  runs: {runs}{hint}", width, indent=2)
    if comparison.failed:
        _paragraph(out, f"failed runs (not compared): {len(comparison.failed)}", width)
        for run in comparison.failed:
            error = run.error or "no error recorded"
            text = f"{run.side} {run.run_id} {str(run.status).upper()}: {error}"
            _paragraph(out, text, width, indent=2)
    for note, count in _notes(comparison).items():
        _paragraph(out, f"note ({count} point(s)): {note}", width)
    *counts, regressed = _summary_parts(comparison)
    _paragraph(out, "; ".join(counts), width)
    _paragraph(out, regressed, width)  # a line of its own, whole: what a CI log is read for


def _paragraph(out: Console, text: str, width: int, *, indent: int = 0, style: str = "") -> None:
    """User text, literally, wrapped at words to ``width``, every line indented by ``indent``."""
    from rich.text import Text

    from dlscale.cli.tables import literal

    for line in literal(text, style).wrap(out, max(width - indent, 20)):
        line.rstrip()
        out.print(Text(" " * indent) + line, soft_wrap=True)


def _notes(comparison: Comparison) -> dict[str, int]:
    """Each distinct note of the estimates (e.g. too few samples) and how many points have it."""
    notes: dict[str, int] = {}
    for point in comparison.matched:
        for name, estimate in (("throughput", point.throughput), ("time to accuracy", point.tta)):
            if estimate is not None and estimate.note:
                key = f"{name}: {estimate.note}"
                notes[key] = notes.get(key, 0) + 1
    return notes


def _closest_hint(config: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """Which keys set this point apart from the nearest point of the other side."""
    from dlscale.metrics.compare import differing_keys

    diffs = [differing_keys(config, other) for other in others]
    if not diffs:
        return ""
    keys = min(diffs, key=len)
    nearest = others[diffs.index(keys)]
    shown = ", ".join(f"{k} {config.get(k)!r} vs {nearest.get(k)!r}" for k in keys)
    return f"  (nearest on the other side differs in: {shown})"


def _describe(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={config.get(k)}" for k in _SHOWN)


def _summary(comparison: Comparison) -> str:
    """One line: verdict counts, unmatched and failed runs, the rule's settings."""
    return "; ".join(_summary_parts(comparison))


def _summary_parts(comparison: Comparison) -> list[str]:
    """The clauses of the summary, the count of points that regressed last."""
    counts = {
        verdict: sum(p.throughput_verdict.value == verdict for p in comparison.matched)
        for verdict in ("regression", "possible regression", "faster", "possibly faster", "ok")
    }
    tta_bad = sum(p.tta_verdict is not None and p.tta_verdict.regressed for p in comparison.matched)
    verdicts = ", ".join(f"{verdict} {n}" for verdict, n in counts.items() if n)
    return [
        f"{len(comparison.matched)} point(s) compared (threshold "
        f"{comparison.threshold * 100:g}%, alpha {comparison.alpha:g}): throughput {verdicts}",
        f"time-to-accuracy regressions {tta_bad}",
        f"only in A {len(comparison.only_in_a)}, only in B {len(comparison.only_in_b)}, "
        f"failed runs {len(comparison.failed)}",
        f"{len(comparison.regressions)} point(s) regressed",
    ]


def _to_json(comparison: Comparison, args: argparse.Namespace) -> dict[str, Any]:
    def point(p: PointComparison) -> dict[str, Any]:
        return {**dataclasses.asdict(p), "regressed": p.regressed}

    return {
        "baseline": str(args.baseline),
        "candidate": str(args.candidate),
        "threshold": comparison.threshold,
        "alpha": comparison.alpha,
        "matched": [point(p) for p in comparison.matched],
        "only_in_a": [dataclasses.asdict(p) for p in comparison.only_in_a],
        "only_in_b": [dataclasses.asdict(p) for p in comparison.only_in_b],
        "failed": [dataclasses.asdict(f) for f in comparison.failed],
        "regressions": len(comparison.regressions),
        "summary": _summary(comparison),
    }
