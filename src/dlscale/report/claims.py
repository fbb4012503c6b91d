"""The report's section of a study's published claims, each computed from the study's runs
with its verdict (:mod:`dlscale.metrics.claims`). Every text is the study file's or a stored
result's, so every cell is escaped."""

from __future__ import annotations

from typing import Any

from dlscale.config.claims import Claim
from dlscale.contract.text import html_text as _e
from dlscale.metrics.claims import ClaimVerdict, check_claims

_COLOURS = {
    ClaimVerdict.HOLDS: "#1b5e20",
    ClaimVerdict.SAME_DIRECTION: "#7a5c00",
    ClaimVerdict.CONTRADICTED: "#b00020",
    ClaimVerdict.NOT_MEASURABLE: "#555",
}


def claims_section(claims: tuple[Claim, ...], rows: list[dict[str, Any]]) -> str:
    """The claims table of one study, or nothing when the study carries none."""
    if not claims:
        return ""
    checks = check_claims(claims, rows)
    body = "".join(
        f'<tr class="claim" data-verdict="{_e(check.verdict)}"><td>{_e(check.claim.says)}'
        f'<br><small>{_e(check.claim.source)}</small></td><td class="num">'
        f'{check.claim.published:g}x</td><td class="num">{_e(check.measured_text())}</td>'
        f'<td style="color:{_COLOURS[check.verdict]}"><b>{_e(check.verdict)}</b></td>'
        f"<td>{_e(check.detail())}</td></tr>"
        for check in checks
    )
    assumed = "".join(
        f"<li><b>{_e(claim.id)}</b>: {_e(claim.assumed)}</li>" for claim in claims if claim.assumed
    )
    return (
        "<h3>The paper's claims, computed from these runs</h3>"
        '<p class="note">Each published ratio set against the same ratio measured here, with '
        'its 95% interval; verdicts and definitions: docs/metrics.md, "Published claims".</p>'
        '<table class="claims"><tr><th>claim</th><th>published</th><th>here [95%]</th>'
        f"<th>verdict</th><th>measured at, and why</th></tr>{body}</table>"
        + (f'<p class="note">What each reading assumes:</p><ul>{assumed}</ul>' if assumed else "")
    )
