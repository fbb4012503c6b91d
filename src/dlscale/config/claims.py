"""A paper's published claims, as data a study file carries and the tool checks.

A claim is one published ratio: either a **speedup** (a point's throughput over its 1-worker
baseline, the rule of :mod:`dlscale.metrics.scaling`) or a **ratio** of two engines'
throughputs in the same study, at the same settings but for the engine. In a study file::

    [[claims]]
    id = "ddp-12"
    says = "PyTorch DDP on 12 V100s: 10.11x the throughput of one"
    source = "Mahon et al., CCGRID 2020"
    measure = "speedup"               # or "ratio", with `over`
    of = { backend = "torch-ddp" }    # which points: study keys and plug-in options
    published = 10.11
    needs = { workers = 12, device = "cuda" }   # the paper's conditions
    assumed = "what the claim's reading takes that the paper does not say"

``needs`` holds the conditions under which the paper measured; a study whose runs do not meet
them cannot check the claim, and says why. Without ``workers`` in ``of`` or ``needs`` the claim
is read at the most workers both sides ran. How the verdict is reached:
:mod:`dlscale.metrics.claims` (and docs/metrics.md, "Published claims").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.numbers import finite_number
from dlscale.contract.text import excerpt

SPEEDUP, RATIO = "speedup", "ratio"
MEASURES = (SPEEDUP, RATIO)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
MOST_PUBLISHED = 1e6
"""The largest published ratio read (a speedup of a million GPUs); beyond it is a typo."""
_TEXT_FIELDS = ("says", "source", "assumed")
_FIELDS = ("id", "measure", "of", "over", "published", "needs", *_TEXT_FIELDS)
Scalar = str | int | float | bool


@dataclass(frozen=True, kw_only=True)
class Claim:
    id: str
    says: str
    source: str
    measure: str
    of: Mapping[str, Scalar]
    """Which points the claim is about (the numerator of a ratio)."""
    over: Mapping[str, Scalar] | None
    """A ratio's denominator; ``None`` for a speedup (over the point's own baseline)."""
    published: float
    """The published value: above 1, ``of`` is faster than ``over`` (or its baseline)."""
    needs: Mapping[str, Scalar]
    """The paper's conditions, which the measured points must meet."""
    assumed: str = ""
    """What reading the claim takes that the paper does not say."""

    def to_dict(self) -> dict[str, Any]:
        """As a study file writes it (a speedup has no ``over``)."""
        return {
            k: (dict(v) if isinstance(v, Mapping) else v)
            for k, v in asdict(self).items()
            if not (k == "over" and v is None)
        }

    def keys(self) -> set[str]:
        """Every study key the claim names."""
        return {*self.of, *(self.over or {}), *self.needs}


def parse_claims(
    items: Any, origin: str, coerce: Callable[[str, Any], Any] | None = None
) -> tuple[Claim, ...]:
    """The claims of a study file's ``[[claims]]`` tables (or of a stored claims file), each
    checked; ``coerce(key, value)`` turns a selector's value into the key's type (and refuses
    an unknown key) where the plug-ins are at hand. One line naming the claim and the fix."""
    if not isinstance(items, list):
        raise UserError(f"{origin}: claims must be [[claims]] tables, got {type(items).__name__}")
    claims: list[Claim] = []
    seen: set[str] = set()
    for number, item in enumerate(items, 1):
        claim = _claim(item, f"{origin}: claim {number}", coerce)
        if claim.id in seen:
            raise UserError(
                f"{origin}: two claims have the id {excerpt(claim.id)}; give each its own"
            )
        seen.add(claim.id)
        claims.append(claim)
    return tuple(claims)


def _claim(item: Any, where: str, coerce: Callable[[str, Any], Any] | None) -> Claim:
    if not isinstance(item, Mapping):
        raise UserError(f"{where} must be a table of keys ({', '.join(_FIELDS)})")
    unknown = sorted(set(item) - set(_FIELDS))
    if unknown:
        raise UserError(
            f"{where}: unknown key {excerpt(unknown[0])}; a claim has {', '.join(_FIELDS)}"
        )
    ident = item.get("id")
    if not isinstance(ident, str) or not _ID.match(ident):
        raise UserError(
            f"{where}: id must be letters, digits, '-', '_' or '.' (at most 64), got "
            f"{excerpt(ident)}"
        )
    where = f"{where} ({ident})"
    measure = item.get("measure", RATIO if "over" in item else SPEEDUP)
    if measure not in MEASURES:
        raise UserError(
            f"{where}: measure must be one of {', '.join(MEASURES)}, got {excerpt(measure)}"
        )
    if (measure == RATIO) != ("over" in item):
        raise UserError(
            f"{where}: a ratio needs `over` (what it is set against) and a speedup has none "
            "(it is over the point's own baseline)"
        )
    published = item.get("published")
    if not finite_number(published, 0.0, MOST_PUBLISHED) or published == 0:
        raise UserError(
            f"{where}: published must be a number above 0 and at most {MOST_PUBLISHED:g}, got "
            f"{excerpt(published)}"
        )
    texts = {}
    for name in _TEXT_FIELDS:
        text = item.get(name, "")
        if not isinstance(text, str) or (name != "assumed" and not text.strip()):
            raise UserError(f"{where}: {name} must be a non-empty string")
        texts[name] = text.strip()
    return Claim(
        id=ident,
        measure=measure,
        of=_selector(item.get("of"), f"{where}: of", coerce, required=True),
        over=_selector(item["over"], f"{where}: over", coerce, True) if "over" in item else None,
        needs=_selector(item.get("needs", {}), f"{where}: needs", coerce, required=False),
        published=float(published),
        **texts,
    )


def _selector(
    value: Any, where: str, coerce: Callable[[str, Any], Any] | None, required: bool
) -> dict[str, Scalar]:
    if not isinstance(value, Mapping) or (required and not value):
        raise UserError(f'{where} must be a table of study keys, e.g. {{ backend = "torch-ddp" }}')
    out: dict[str, Scalar] = {}
    for key, item in value.items():
        if isinstance(item, list | Mapping) or not isinstance(item, Scalar):
            raise UserError(f"{where}: {key} must be one value, got {excerpt(item)}")
        if isinstance(item, int | float) and not isinstance(item, bool) and not finite_number(item):
            raise UserError(f"{where}: {key} must be a finite number, got {excerpt(item)}")
        try:
            out[str(key)] = coerce(str(key), item) if coerce is not None else item
        except UserError as error:
            raise UserError(f"{where}: {error}") from None
    return out
