"""A study's published claims, kept beside its runs: ``<root>/claims-<study>.json``.

`dlscale run` writes the claims of the study it runs (:mod:`dlscale.config.claims`), so that
`dlscale report` checks them later from the results directory alone, as the study asked. The
file is written whole (a link at its path is refused) and read as data: a damaged or foreign
file is left out with one warning naming it, and every claim in it is checked again as a
study file's would be.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from dlscale.config.claims import Claim, parse_claims
from dlscale.contract.errors import SchemaError, UserError
from dlscale.contract.files import read_json, write_json_atomic
from dlscale.store.results import RunStore

PREFIX = "claims-"


def claims_path(root: Path, study: str) -> Path:
    """Where a study's claims are kept: its name made safe for a file name (no dot, slash or
    control character) and a digest of the whole name, so two studies never share a file."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", study)[:40]
    digest = hashlib.sha256(study.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return root / f"{PREFIX}{safe}-{digest}.json"


def write_claims(store: RunStore, study: str, claims: tuple[Claim, ...]) -> None:
    """Keep ``claims`` for ``study`` in the store (nothing when there are none)."""
    if not claims:
        return
    store.prepare()
    document = {"study": study, "claims": [claim.to_dict() for claim in claims]}
    write_json_atomic(claims_path(store.root, study), "claims", document)


def read_claims(
    root: Path, on_problem: Callable[[str], None] | None = None
) -> dict[str, tuple[Claim, ...]]:
    """Every study's stored claims, by study name; a file that cannot be used is left out and
    ``on_problem`` hears which and why, in one line."""
    found: dict[str, tuple[Claim, ...]] = {}
    for path in sorted(root.glob(f"{PREFIX}*.json")):
        if path.is_symlink():
            problem: str | None = "a link (dlscale writes none here)"
        else:
            try:
                document = read_json(path, "claims")
                study = document.get("study")
                if not isinstance(study, str):
                    raise UserError(f"study must be a name, got {study!r}")
                found[study] = parse_claims(document.get("claims"), "claims")
                problem = None
            except (SchemaError, UserError) as error:
                problem = str(error).removeprefix(f"{path}: ")
        if problem is not None and on_problem is not None:
            on_problem(f"skipped {path}: {problem}")
    return found
