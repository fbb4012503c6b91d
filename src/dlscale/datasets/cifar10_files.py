"""Readers, validation and writers of the official CIFAR-10 file formats (numpy + stdlib only).

Two layouts are accepted, each either directly in the data directory or in the sub-directory
that the official archive unpacks to:

* python format (``cifar-10-batches-py``): ``data_batch_1`` .. ``data_batch_5`` and
  ``test_batch``, pickles of dicts with ``b'data'`` (uint8, ``(N, 3072)``, channel-major rows)
  and ``b'labels'`` (a list of ``N`` ints in 0..9);
* binary format (``cifar-10-batches-bin``): ``data_batch_1.bin`` .. ``data_batch_5.bin`` and
  ``test_batch.bin``, records of 1 label byte followed by 3072 pixel bytes.

The official files hold 10000 images each; any positive count is accepted so that tests can use
small files. Every problem raises :class:`DataError` with one line naming the file and what was
expected. This module must not import a deep-learning framework: the parent process uses
:func:`check` before launching workers.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.contract.errors import DataError

CHANNELS, HEIGHT, WIDTH = 3, 32, 32
PIXELS = CHANNELS * HEIGHT * WIDTH
"""Pixel bytes per image (3072)."""
RECORD = 1 + PIXELS
"""Bytes per record of the binary format (3073)."""
NUM_CLASSES = 10
TRAIN_BATCHES = 5
LABEL_NAMES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip

PYTHON_DIR = "cifar-10-batches-py"
BINARY_DIR = "cifar-10-batches-bin"
_TRAIN_STEMS = tuple(f"data_batch_{i}" for i in range(1, TRAIN_BATCHES + 1))
_TEST_STEM = "test_batch"
_FORMATS = {"python": ("", PYTHON_DIR), "binary": (".bin", BINARY_DIR)}
_EXPECTED = (
    "expected data_batch_1..5 and test_batch (python format) "
    "or data_batch_1..5.bin and test_batch.bin (binary format)"
)

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


# --------------------------------------------------------------------------------------------
# Public API


def check(data_dir: Path | str | None, options: dict[str, Any] | None = None) -> None:
    """Validate a CIFAR-10 directory (every file is read and checked, nothing is kept); the
    data set has no options.

    Raises :class:`DataError` naming the first bad file and what was expected.
    """
    fmt, directory = locate(data_dir)
    for path in _paths(fmt, directory):
        _read_file(path, fmt)


def read(data_dir: Path | str | None) -> Arrays:
    """Read CIFAR-10 from ``data_dir`` (either format, either layout).

    Returns ``(x_train, y_train, x_test, y_test)``: images uint8 ``(N, 3, 32, 32)`` and labels
    int64 ``(N,)``, training batches concatenated in order 1..5.
    """
    fmt, directory = locate(data_dir)
    *train_paths, test_path = _paths(fmt, directory)
    train = [_read_file(path, fmt) for path in train_paths]
    x_test, y_test = _read_file(test_path, fmt)
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    return x_train, y_train, x_test, y_test


def locate(data_dir: Path | str | None) -> tuple[str, Path]:
    """Find the format (``"python"`` or ``"binary"``) and the directory holding the files.

    Looks in ``data_dir`` itself, then in its ``cifar-10-batches-py`` / ``cifar-10-batches-bin``
    sub-directory. A partial set of files names the first missing one.
    """
    if data_dir is None:
        raise DataError("cifar10: no data directory given; pass --data-dir PATH")
    root = Path(data_dir)
    if not root.exists():
        raise DataError(f"cifar10: data directory {root} does not exist")
    if not root.is_dir():
        raise DataError(f"cifar10: {root} is not a directory; expected a CIFAR-10 directory")
    partial: tuple[str, Path] | None = None
    for fmt, (_, subdir) in _FORMATS.items():
        for directory in (root, root / subdir):
            present = [path.is_file() for path in _paths(fmt, directory)]
            if all(present):
                return fmt, directory
            if any(present) and partial is None:
                partial = fmt, directory
    if partial is not None:
        fmt, directory = partial
        missing = next(p for p in _paths(fmt, directory) if not p.is_file())
        suffix = _FORMATS[fmt][0]
        raise DataError(
            f"cifar10: {missing} is missing; the {fmt} format expects data_batch_1..5{suffix} "
            f"and test_batch{suffix} in {directory}"
        )
    raise DataError(f"cifar10: no CIFAR-10 files in {root}: {_EXPECTED}")


def write_python_format(
    directory: Path | str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    batches: int = TRAIN_BATCHES,
) -> Path:
    """Write CIFAR-10 in the official python format (protocol-2 pickles) and return the directory.

    The training set is split into ``batches`` nearly equal files ``data_batch_1..``; the
    official set has 5 (another count writes a set that :func:`read` rejects). Images are uint8
    ``(N, 3, 32, 32)`` or ``(N, 3072)``, labels ints in 0..9. A ``batches.meta`` like the
    official one is written too.
    """
    directory = _prepare(directory)
    splits = _split(x_train, y_train, batches)
    offset = 0
    for i, (x, y) in enumerate(splits, start=1):
        label = f"training batch {i} of {batches}"
        _write_pickle_batch(directory / f"data_batch_{i}", x, y, label, "train", offset=offset)
        offset += len(y)
    x, y = _as_records(x_test, y_test)
    _write_pickle_batch(directory / _TEST_STEM, x, y, "testing batch 1 of 1", "test", offset=0)
    meta = {
        b"num_cases_per_batch": len(splits[0][1]),
        b"label_names": [name.encode() for name in LABEL_NAMES],
        b"num_vis": PIXELS,
    }
    (directory / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return directory


def write_binary_format(
    directory: Path | str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    batches: int = TRAIN_BATCHES,
) -> Path:
    """Write CIFAR-10 in the official binary format (3073-byte records); return the directory.

    Same arguments as :func:`write_python_format`; also writes ``batches.meta.txt``.
    """
    directory = _prepare(directory)
    for i, (x, y) in enumerate(_split(x_train, y_train, batches), start=1):
        _write_binary_batch(directory / f"data_batch_{i}.bin", x, y)
    _write_binary_batch(directory / f"{_TEST_STEM}.bin", *_as_records(x_test, y_test))
    (directory / "batches.meta.txt").write_text("\n".join(LABEL_NAMES) + "\n\n")
    return directory


# --------------------------------------------------------------------------------------------
# Reading one file


def _paths(fmt: str, directory: Path) -> list[Path]:
    suffix = _FORMATS[fmt][0]
    return [directory / f"{stem}{suffix}" for stem in (*_TRAIN_STEMS, _TEST_STEM)]


def _read_file(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """One validated batch file: images uint8 ``(N, 3, 32, 32)``, labels int64 ``(N,)``."""
    reader = _read_python_batch if fmt == "python" else _read_binary_batch
    data, labels = reader(path)
    _check_labels(path, labels)
    return data.reshape(-1, CHANNELS, HEIGHT, WIDTH), labels


def _read_binary_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = _read_bytes(path)
    if len(raw) == 0:
        raise DataError(f"cifar10: {path} is empty; expected records of {RECORD} bytes")
    if len(raw) % RECORD:
        raise DataError(
            f"cifar10: {path} is {len(raw)} bytes; expected a multiple of {RECORD} "
            f"(1 label + {PIXELS} pixel bytes per image)"
        )
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, RECORD)
    return records[:, 1:].copy(), records[:, 0].astype(np.int64)


def _read_python_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    batch = _unpickle(path)
    if not isinstance(batch, dict):
        raise DataError(
            f"cifar10: {path} holds a {type(batch).__name__}; expected a dict with "
            "b'data' and b'labels' (python format)"
        )
    data, labels = _key(batch, path, "data"), _key(batch, path, "labels")
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != PIXELS
        or data.shape[0] == 0
    ):
        described = (
            f"a {data.dtype} array of shape {data.shape}"
            if isinstance(data, np.ndarray)
            else f"a {type(data).__name__}"
        )
        raise DataError(
            f"cifar10: b'data' in {path} is {described}; expected a uint8 array of shape "
            f"(N, {PIXELS}) with N > 0"
        )
    try:
        label_array = np.asarray(labels)
    except (TypeError, ValueError) as exc:  # ragged or otherwise unconvertible
        raise DataError(f"cifar10: b'labels' in {path} is not a list of ints ({exc})") from None
    if label_array.shape != (data.shape[0],) or not np.issubdtype(label_array.dtype, np.integer):
        raise DataError(
            f"cifar10: b'labels' in {path} has shape {label_array.shape} and dtype "
            f"{label_array.dtype}; expected {data.shape[0]} ints (one per row of b'data')"
        )
    return np.ascontiguousarray(data), label_array.astype(np.int64)


def _key(batch: dict[Any, Any], path: Path, name: str) -> Any:
    """``batch[b'name']`` (official) or ``batch['name']`` (files pickled with str keys)."""
    for key in (name.encode(), name):
        if key in batch:
            return batch[key]
    found = ", ".join(repr(k) for k in list(batch)[:6])
    raise DataError(
        f"cifar10: {path} has no b'{name}' entry (keys: {found}); expected a CIFAR-10 python "
        "batch with b'data' and b'labels'"
    )


def _check_labels(path: Path, labels: np.ndarray) -> None:
    bad = (labels < 0) | (labels >= NUM_CLASSES)
    if bad.any():
        index = int(np.argmax(bad))
        raise DataError(
            f"cifar10: {path} has label {int(labels[index])} at image {index}; "
            f"expected labels 0..{NUM_CLASSES - 1}"
        )


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(f"cifar10: cannot read {path}: {_one_line(exc)}") from None


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what CIFAR-10 batches contain: builtins and plain numpy arrays.

    Refusing every other global keeps a hostile file from running code in the parent.
    """

    _ALLOWED = frozenset(
        {
            ("_codecs", "encode"),  # bytes pickled by Python 3 at protocol 2
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"),
        }
    )

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _unpickle(path: Path) -> Any:
    raw = _read_bytes(path)
    try:
        return _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # truncated or corrupt pickles raise many different types
        raise DataError(
            f"cifar10: {path} is not a readable CIFAR-10 pickle ({_one_line(exc)}); expected "
            "a python-format batch (a dict with b'data' and b'labels')"
        ) from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# --------------------------------------------------------------------------------------------
# Writing


def _prepare(directory: Path | str) -> Path:
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _as_records(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate writer input; images as uint8 rows ``(N, 3072)``, labels as int64 ``(N,)``."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != np.uint8 or x.shape[1:] not in ((CHANNELS, HEIGHT, WIDTH), (PIXELS,)):
        raise ValueError(
            f"images must be uint8 (N, 3, 32, 32) or (N, 3072), got {x.dtype} {x.shape}"
        )
    if y.shape != (len(x),):
        raise ValueError(f"labels must have shape ({len(x)},), got {y.shape}")
    return np.ascontiguousarray(x.reshape(len(x), PIXELS)), y.astype(np.int64)


def _split(x: np.ndarray, y: np.ndarray, batches: int) -> list[tuple[np.ndarray, np.ndarray]]:
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    rows, labels = _as_records(x, y)
    return list(zip(np.array_split(rows, batches), np.array_split(labels, batches), strict=True))


def _write_pickle_batch(
    path: Path, x: np.ndarray, y: np.ndarray, label: str, split: str, *, offset: int
) -> None:
    batch = {
        b"batch_label": label.encode(),
        b"labels": [int(v) for v in y],
        b"data": x,
        b"filenames": [f"cifar10_{split}_{offset + i:05d}.png".encode() for i in range(len(y))],
    }
    path.write_bytes(pickle.dumps(batch, protocol=2))


def _write_binary_batch(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    if ((y < 0) | (y > 255)).any():
        raise ValueError("binary-format labels must fit in one byte (0..255)")
    records = np.empty((len(y), RECORD), dtype=np.uint8)
    records[:, 0] = y
    records[:, 1:] = x
    path.write_bytes(records.tobytes())
