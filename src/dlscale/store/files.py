"""Versioned JSON files written atomically (temp file + fsync + rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dlscale.errors import SchemaError

SCHEMAS = {"spec": 2, "result": 2}
"""Current version of each persisted document kind; bump on an incompatible change.
2: plug-in options grouped under ``config.options``, process layout, worker environment."""


def schema_version(document: dict[str, Any]) -> int:
    """The version number of a document ``read_json`` accepted."""
    return int(str(document["schema"]).rpartition("/")[2])


def write_json_atomic(path: Path, kind: str, data: dict[str, Any]) -> None:
    """Write ``data`` with its schema stamp so readers never see a half-written file."""
    document = {"schema": f"dlscale.{kind}/{SCHEMAS[kind]}", **data}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1, allow_nan=False, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path, kind: str) -> dict[str, Any]:
    """Read a document of ``kind``; refuse one from a newer dlscale with a clear message."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SchemaError(
            f"{path} is not valid JSON ({error}); delete the run or rerun it with --force"
        ) from None
    schema = str(document.get("schema", ""))
    name, _, version = schema.partition("/")
    if name != f"dlscale.{kind}" or not version.isdigit():
        raise SchemaError(f"{path} is not a dlscale {kind} file (schema {schema!r})")
    if int(version) > SCHEMAS[kind]:
        raise SchemaError(
            f"{path} was written by a newer dlscale ({schema}; this version reads "
            f"dlscale.{kind}/{SCHEMAS[kind]}): upgrade dlscale to read it"
        )
    return document
