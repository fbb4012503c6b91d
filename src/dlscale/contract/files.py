"""Versioned JSON files written atomically (temp file + fsync + rename)."""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from dlscale.contract.errors import SchemaError, UserError
from dlscale.contract.numbers import whole_number
from dlscale.contract.text import shell_command

SCHEMAS = {
    "spec": 3, "result": 4, "checkpoint": 1, "microbench": 1, "claims": 1, "points": 2
}  # fmt: skip
"""Current version of each persisted document kind; bump on an incompatible change.
2: plug-in options grouped under ``config.options``, process layout, worker environment.
``result`` 4 and ``points`` 2: throughput stored in samples per second
(``throughput_samples_s``, was ``throughput_img_s``...) with its ``sample_unit`` and
``units_per_sample`` (:mod:`dlscale.store.migrate` reads the older names).
``checkpoint``: the pointer to a restartable run's latest saved state
(:mod:`dlscale.runtime.checkpoint`); ``claims``: a study's published claims
(:mod:`dlscale.store.claims`); ``points``: a study's points as it printed them
(:mod:`dlscale.metrics.points_file`)."""


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
    version = whole_number(str(document["schema"]).rpartition("/")[2], high=_MAX_VERSION)
    assert version is not None, "read_json checked the stamp"
    return version


class OutputError(UserError):
    """A file dlscale was asked to write cannot be written safely (a link planted where it
    goes, a full disk, no permission): one line naming the path; earlier files are as they
    were."""


def refuse_link(path: Path, what: str = "") -> None:
    """Raise :class:`OutputError` if ``path`` is a symbolic link (dangling or not): dlscale
    never writes or deletes through a link it did not make, since anyone who can write to a
    shared directory could point it at another user's files."""
    if path.is_symlink():
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise OutputError(
            f"{path}{f' ({what})' if what else ''} is a symbolic link (to {target}); dlscale "
            "does not write or delete through links it did not make: remove the link or choose "
            "another path"
        )


def output_failure(path: Path, error: OSError) -> OutputError:
    """The one line for an ``OSError`` met writing ``path`` (full disk, permission, ...)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(
            f"no space left on the device writing {path}: nothing was replaced (an earlier "
            "file there is as it was); free some space and run the command again"
        )
    reason = error.strerror or str(error)
    return OutputError(f"cannot write {path}: {reason}; nothing was replaced")


def _mode_not_link(path: Path, what: str) -> int | None:
    """The mode of what is at ``path`` (``None``: nothing), a link refused (:func:`refuse_link`)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        raise output_failure(path, error) from None
    if stat.S_ISLNK(mode):
        refuse_link(path, what)
    return mode


def refuse_non_directory(path: Path, what: str = "") -> None:
    """Raise :class:`OutputError` unless ``path`` is missing or a real directory (not a link to
    one, not a file): what dlscale may create or empty there."""
    mode = _mode_not_link(path, what)
    if mode is None:
        return
    if not stat.S_ISDIR(mode):
        raise OutputError(
            f"{path}{f' ({what})' if what else ''} is a file, not a directory; dlscale keeps its "
            "files in a directory of that name and does not replace what it did not make: move "
            "the file away or choose another path"
        )


def make_directory(path: Path, what: str = "") -> bool:
    """Create the directory ``path`` (its parent must exist: a directory removed while dlscale
    runs is not made again), or accept a real directory already there; True if made here. A
    link (even to a directory), a file or a missing parent is refused with one line."""
    try:
        os.mkdir(path)
        return True
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise OutputError(
            f"cannot create {path}{f' ({what})' if what else ''}: {path.parent} does not exist "
            "(removed while dlscale ran?); nothing was written there, and dlscale does not "
            "recreate it: run the command again"
        ) from None
    except OSError as error:
        raise output_failure(path, error) from None
    refuse_non_directory(path, what)
    return False


def refuse_foreign_document(path: Path, kind: str, what: str) -> None:
    """Refuse (:class:`OutputError`, one line naming the path and the fix) what dlscale may
    not replace at ``path``, where it will write a document of ``kind`` (``what``: its words):
    a link, a directory or anything but a regular file (at a name anyone can predict in a
    shared store), or a document of a newer dlscale (rewriting it would lose newer data).
    Missing, a file of ours, or a damaged one (rewritten whole): nothing is said. What
    ``dlscale run`` checks of a study's own files before any point runs."""
    mode = _mode_not_link(path, what)
    if mode is None:
        return
    if not stat.S_ISREG(mode):
        shown = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise OutputError(
            f"{path} ({what}) is {shown}; dlscale writes its {what} there and does not replace "
            "what it did not make: move it away (" + shell_command(["rm", "-r", path])
            + ") or choose another --results"
        )  # fmt: skip
    try:
        read_json(path, kind)
    except NewerSchema as error:
        raise OutputError(
            f"{path} ({what}): {error.problem}; this dlscale would overwrite it: upgrade "
            "dlscale, or move the file away"
        ) from None
    except UnreadableFile:
        pass


def open_directory(path: Path, what: str = "") -> int:
    """A file descriptor of the real directory ``path``, opened without following a link (the
    names under it are then removed relative to it, so a swap of ``path`` for a link cannot
    redirect them)."""
    refuse_non_directory(path, what)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            refuse_non_directory(path, what)  # replaced since: says what is there now
        raise output_failure(path, error) from None


def read_small_file(path: Path | str, limit: int = 65536, *, dir_fd: int | None = None) -> bytes:
    """The first ``limit`` bytes of the regular file ``path`` (relative to ``dir_fd`` if
    given), never through a link and never blocking on a FIFO or a device planted there
    (``OSError`` for those)."""
    fd = _open_regular(path, os.O_NOFOLLOW, dir_fd)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _open_regular(path: Path | str, flags: int = 0, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file ``path``, opened without blocking: a FIFO, device or
    directory planted under the name is an ``OSError``, never a read that waits forever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | flags, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` as one step: a temporary file in the same directory, fsync,
    rename. A reader sees the old file or the new one, never half of one; a failure (a full
    disk) leaves the old file as it was and raises :class:`OutputError`. A symbolic link at
    ``path`` is refused, never followed or replaced. The directory must exist."""
    refuse_link(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise output_failure(path, error) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o666 & ~_umask())  # as open() makes it: a group may share a store
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        refuse_link(path)  # planted while we wrote: the rename would replace the link
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise output_failure(path, error) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def _umask() -> int:
    """This process's umask (read once: setting it back at once is the only way to read it,
    and dlscale never changes it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, kind: str, data: dict[str, Any]) -> None:
    """Write ``data`` with its schema stamp so readers never see a half-written file
    (:func:`write_atomic`: the directory must exist; a link at ``path`` is refused)."""
    document = {"schema": f"dlscale.{kind}/{SCHEMAS[kind]}", **data}
    text = json.dumps(document, indent=1, allow_nan=False, default=str)
    write_atomic(path, text)


DOCUMENT_LIMIT = 256 * 2**20
"""The most bytes of a stored JSON document read (a result of a million windows is about
30 MB); a larger one is damage, refused without being read."""


def read_regular(path: Path, limit: int = DOCUMENT_LIMIT) -> tuple[bytes, os.stat_result]:
    """The whole of the regular file at ``path`` (a link followed) and its status
    (:func:`_open_regular`: never blocking on what is planted there); ``OSError``
    (``EFBIG``) when it holds more than ``limit`` bytes, read no further than that."""
    fd = _open_regular(path)
    try:
        return _read_at_most(fd, path, limit), os.fstat(fd)
    finally:
        os.close(fd)


def read_bounded(path: Path, limit: int) -> bytes:
    """The whole of the regular file at ``path`` (a link followed, never blocking on what is
    planted there: :func:`_open_regular`); ``OSError`` (``EFBIG``) when it holds more than
    ``limit`` bytes, read no further than that."""
    return read_regular(path, limit)[0]


def _read_at_most(fd: int, path: Path, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= limit:  # in pieces: one read of limit + 1 bytes would allocate that much
        chunk = os.read(fd, min(_PIECE, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return b"".join(chunks)


def read_tail(path: Path, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of the regular file at ``path`` and its whole size (never
    blocking on what is planted there: :func:`_open_regular`): what dlscale shows of a rank's
    output, which a script can make as long as it likes."""
    with os.fdopen(_open_regular(path), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - limit))
        return handle.read(limit), size


_PIECE = 8 * 2**20
_MAX_VERSION = 999_999
"""The largest schema version a stamp may carry (``dlscale.result/5000…`` is damage)."""


def read_json(path: Path, kind: str) -> dict[str, Any]:
    """Read a document of ``kind``; refuse one from a newer dlscale with a clear message.

    Raises :class:`UnreadableFile` (a :class:`SchemaError`: one line, exit 2 at the command
    line) for a file that cannot be read or is damaged, :class:`NewerSchema` for a newer one.
    """
    try:
        raw, _ = read_regular(path)
    except OSError as error:
        raise UnreadableFile(path, f"cannot be read ({unreadable(error)})") from None
    return parse_json(raw, path, kind)


def unreadable(error: OSError) -> str:
    """Why a file could not be read, in a few words (its size named when it was too large)."""
    if error.errno == errno.EFBIG:
        return f"{error.strerror}; not a file dlscale wrote" if error.strerror else "too large"
    return str(error.strerror or error)


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
    except ValueError:  # JSONDecodeError is one too: this is an integer past Python's limit
        raise UnreadableFile(
            path, "holds an integer of more than 4300 digits (no measured value has that many)"
        ) from None
    if not isinstance(document, dict):
        raise UnreadableFile(path, f"a JSON {_json_type(document)}, not a dlscale {kind} object")
    schema = document.get("schema", "")
    name, _, version_text = schema.partition("/") if isinstance(schema, str) else ("", "", "")
    version = whole_number(version_text, high=_MAX_VERSION)
    if name != f"dlscale.{kind}" or version is None:
        stamp = f"schema {str(schema)[:40]!r}" if schema else "no schema stamp"
        raise UnreadableFile(path, f"not a dlscale {kind} file ({stamp})")
    if version > SCHEMAS[kind]:
        raise NewerSchema(
            path,
            f"written by a newer dlscale ({name}/{version}; this version reads "
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
