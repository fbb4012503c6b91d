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
from dlscale.contract.files import parse_json, read_small_file, unreadable, write_json_atomic
from dlscale.contract.text import excerpt
from dlscale.store.results import RunStore

PREFIX = "claims-"
_LIMIT = 1 << 20
"""Bytes a claims file may hold: a study's claims take a few KiB."""


def claims_path(root: Path, study: str) -> Path:
    """Where a study's claims are kept (`study_file`)."""
    return study_file(root, PREFIX, study)


def study_file(root: Path, prefix: str, study: str) -> Path:
    """A file of a study's kept beside its runs: ``prefix``, its name made safe for a file
    name (no dot, slash or control character) and a digest of the whole name, so two studies
    never share a file."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", study)[:40]
    digest = hashlib.sha256(study.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return root / f"{prefix}{safe}-{digest}.json"


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
        read = _read(path)
        if isinstance(read, str):
            if on_problem is not None:
                on_problem(f"skipped {path}: {read}")
        else:
            found[read[0]] = read[1]
    return found


def _read(path: Path) -> tuple[str, tuple[Claim, ...]] | str:
    """A claims file's study and claims, or what is wrong with it in a few words."""
    try:  # never through a link, never blocking on a FIFO planted under the name
        raw = read_small_file(path, _LIMIT)
    except OSError as error:
        return f"not a readable file ({unreadable(error)})"
    if len(raw) >= _LIMIT:
        return f"larger than {_LIMIT // 1024} KiB (dlscale writes a few)"
    try:
        document = parse_json(raw, path, "claims")
        study = document.get("study")
        if not isinstance(study, str):
            raise UserError(f"study must be a name, got {excerpt(study)}")
        return study, parse_claims(document.get("claims"), "claims")
    except (SchemaError, UserError) as error:
        return str(error).removeprefix(f"{path}: ")
