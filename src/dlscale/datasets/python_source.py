"""``python-source``: real text every machine has, the running Python's standard library.

The corpus is the bytes of the standard library's ``.py`` files (``sysconfig``'s ``stdlib``
directory), in the order of their paths, leaving out installed packages (``site-packages``,
``dist-packages``) and the library's own test suites and demos (:data:`LEFT_OUT`). Every
:data:`HELD_OUT_EVERY`-th file is held out, so the held-out text is whole files the model never
trained on. The vocabulary is the 256 byte values. The run records the Python version, the
number of files and bytes and a SHA-256 of the corpus: two runs trained on the same text only
if their hashes agree (another Python version has another library).
"""

from __future__ import annotations

import functools
import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dlscale.contract.errors import DataError
from dlscale.contract.options import setting
from dlscale.datasets.tokens import TokenArrays, from_corpus

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

VOCABULARY = 256
"""Byte values."""
HELD_OUT_EVERY = 10
"""Files ``9, 19, 29, ...`` (in path order) are held out."""
LEFT_OUT = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "tkinter",
     "turtledemo", "__pycache__"}
)  # fmt: skip
"""Directories whose files are not in the corpus."""


@dataclass(frozen=True)
class PythonSourceOptions:
    held_out_tokens: int = setting(
        65536,
        "held-out bytes evaluated (the first of the held-out files'; 0: all of them, about "
        "1 MB: minutes on a CPU)",
        minimum=0,
    )


def corpus_files(root: Path | None = None) -> list[Path]:
    """The corpus' files, in the order of their paths below the library's directory."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    files = [
        path
        for path in root.rglob("*.py")
        if not LEFT_OUT.intersection(path.relative_to(root).parts[:-1]) and path.is_file()
    ]
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


@functools.cache
def corpus() -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """``(train, held_out, facts)``: the corpus' bytes as uint8 arrays and what the run
    records about it."""
    files = corpus_files()
    if not files:
        raise DataError(
            f"python-source: no .py files under {sysconfig.get_paths()['stdlib']} (a Python "
            "without its standard library's sources); use --dataset tokens or token-file"
        )
    train, held = bytearray(), bytearray()
    digest = hashlib.sha256()
    for index, path in enumerate(files):
        text = path.read_bytes()
        digest.update(text)
        (held if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).extend(text)
    facts = {
        "corpus": "python-source",
        "python_version": platform.python_version(),
        "files": len(files),
        "train_tokens": len(train),
        "held_out_tokens": len(held),
        "sha256": digest.hexdigest(),
    }
    return np.frombuffer(bytes(train), np.uint8), np.frombuffer(bytes(held), np.uint8), facts


def load(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> TokenArrays:
    """This process's replicas' parts of the corpus, as sequences of ``input_size`` bytes."""
    train, held_out, facts = corpus()
    cap = cfg.typed(PythonSourceOptions).held_out_tokens
    held_out = held_out[:cap] if cap else held_out
    return from_corpus(
        "python-source", cfg, train, held_out, shard=shard, shards=shards, replicas=replicas,
        block_size=input_size, vocab=VOCABULARY, facts=dict(facts),
    )  # fmt: skip
