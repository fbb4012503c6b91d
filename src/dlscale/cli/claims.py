"""The terminal table of a study's published claims, each computed from its runs with a
verdict (:mod:`dlscale.metrics.claims`), printed by `dlscale run` and `dlscale report`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from dlscale.cli.tables import literal, markup
from dlscale.config.claims import Claim
from dlscale.metrics.claims import ClaimCheck, ClaimVerdict, check_claims

_STYLES = {
    ClaimVerdict.HOLDS: "green",
    ClaimVerdict.SAME_DIRECTION: "yellow",
    ClaimVerdict.CONTRADICTED: "red",
    ClaimVerdict.NOT_MEASURABLE: "dim",
}


def claims_table(checks: Sequence[ClaimCheck], title: str) -> Table:
    """One row per check: the claim, the published and measured values, the verdict, why."""
    table = Table(title=literal(title, "table.title"), title_justify="left")
    table.add_column("claim", overflow="fold")
    table.add_column("published", justify="right")
    table.add_column("here [95%]", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("measured at, and why", overflow="fold")
    for check in checks:
        table.add_row(
            markup(f"{check.claim.id}: {check.claim.says}"),
            f"{check.claim.published:g}x",
            markup(check.measured_text()),
            f"[{_STYLES[check.verdict]}]{markup(check.verdict)}[/]",
            markup(check.detail()),
        )
    return table


def print_claims(
    out: Console, study: str, claims: Sequence[Claim], points: Sequence[dict[str, Any]]
) -> None:
    """The study's claims table (nothing when it carries none), then each claim's source and
    what its reading assumes."""
    if not claims:
        return
    out.print(claims_table(check_claims(claims, points), f"study {study}: the paper's claims"))
    for claim in claims:
        assumed = f"; assumed: {claim.assumed}" if claim.assumed else ""
        out.print(literal(f"  {claim.id}: {claim.source}{assumed}", "dim"))  # prose: at words


def by_study(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by the study that ran them (as the report groups its sections)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(str(row.get("study") or "unnamed"), []).append(row)
    return grouped
