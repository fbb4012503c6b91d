"""Versioned JSON files written atomically (temp file + fsync + rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dlscale.errors import SchemaError

SCHEMAS = {"spec": 3, "result": 3, "checkpoint": 1, "microbench": 1}
"""Current version of each persisted document kind; bump on an incompatible change.
2: plug-in options grouped under ``config.options``, process layout, worker environment.
``checkpoint``: the pointer to a restartable run's latest saved state
(:mod:`dlscale.runtime.checkpoint`)."""


class UnreadableFile(SchemaError):
    """A stored file that is not a readable document of its kind (damaged, or not ours).

    ``problem`` says what is wrong in a few words, without the path, so that a reader can put
    it in its own one-line message; ``str()`` is the whole line, path first."""

    def __init__(self, path: Path, problem: str, advice: str = "") -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" + (f"; {advice}" if advice else ""))


class NewerSchema(UnreadableFile):
    """A document written by a newer dlscale: readable only after an upgrade, and not damage."""


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
    """Read a document of ``kind``; refuse one from a newer dlscale with a clear message.

    Raises :class:`UnreadableFile` (a :class:`SchemaError`: one line, exit 2 at the command
    line) for a file that cannot be read or is damaged, :class:`NewerSchema` for a newer one.
    """
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UnreadableFile(path, f"cannot be read ({error.strerror or error})") from None
    return parse_json(raw, path, kind)


def parse_json(raw: bytes, path: Path, kind: str) -> dict[str, Any]:
    """The document of ``kind`` in ``raw`` (the bytes of ``path``), checked as ``read_json``."""
    if not raw.strip():
        raise UnreadableFile(path, f"empty ({len(raw)} bytes; an interrupted copy?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(
            path, f"not UTF-8 text (byte {error.start}; corrupted or not a dlscale file)"
        ) from None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        where = (
            f": {error.msg[:1].lower()}{error.msg[1:]} at line {error.lineno}, column {error.colno}"
            if isinstance(error, json.JSONDecodeError)
            else ": nested too deeply"
        )
        raise UnreadableFile(path, f"not valid JSON (truncated?){where}") from None
    if not isinstance(document, dict):
        raise UnreadableFile(path, f"a JSON {_json_type(document)}, not a dlscale {kind} object")
    schema = str(document.get("schema", ""))
    name, _, version = schema.partition("/")
    if name != f"dlscale.{kind}" or not version.isdigit():
        stamp = f"schema {schema!r}" if schema else "no schema stamp"
        raise UnreadableFile(path, f"not a dlscale {kind} file ({stamp})")
    if int(version) > SCHEMAS[kind]:
        raise NewerSchema(
            path,
            f"written by a newer dlscale ({schema}; this version reads "
            f"dlscale.{kind}/{SCHEMAS[kind]})",
            "upgrade dlscale to read it",
        )
    return document


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool) or value is None:
        return "literal"
    return "number"
