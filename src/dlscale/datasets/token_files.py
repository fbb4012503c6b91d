"""``token-file``: a user's corpus as flat token ids, as nanoGPT's ``prepare.py`` writes it.

``--data-dir`` holds ``train.bin`` and, optionally, ``val.bin``: token ids one after another,
``uint16`` (a vocabulary up to 65,536, GPT-2's 50,257) or ``uint32`` (the ``token_dtype``
option), no header. The parent checks both files before launch (:func:`check`): present, a
whole number of ids, every id below the model's vocabulary, at least one sequence of
``block_size`` tokens; each worker maps them (``numpy.memmap``) and reads its own contiguous
part.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlscale.contract.errors import DataError
from dlscale.contract.options import setting
from dlscale.datasets.tokens import TokenArrays, check_vocabulary, from_corpus

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

TRAIN, HELD_OUT = "train.bin", "val.bin"
HASHED_BYTES = 1 << 20
"""The run records a SHA-256 of each file's size and first MiB (a whole read of a large corpus
would cost more than the check)."""


@dataclass(frozen=True)
class TokenFileOptions:
    token_dtype: str = setting(
        "uint16",
        "the integer type of the ids in train.bin and val.bin (nanoGPT writes uint16)",
        choices=("uint16", "uint32"),
    )


def _mapped(path: Path, dtype: str) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    size = path.stat().st_size
    if size % itemsize:
        raise DataError(
            f"token-file: {path} is {size:,} bytes, not a whole number of {dtype} token ids "
            f"({itemsize} bytes each): a damaged file, or set token_dtype to the type it was "
            "written in"
        )
    if size == 0:
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _arrays(data_dir: Path, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    train = data_dir / TRAIN
    if not train.is_file():
        raise DataError(
            f"token-file: no {TRAIN} in {data_dir}; write the training token ids there "
            f"(flat {dtype}, as nanoGPT's prepare.py does), and {HELD_OUT} for held-out ones"
        )
    held = data_dir / HELD_OUT
    held_out = _mapped(held, dtype) if held.is_file() else np.zeros(0, dtype)
    return _mapped(train, dtype), held_out


def check(data_dir: Path | None, options: dict[str, Any]) -> list[str]:
    """Before launch: the files are whole, every id below the vocabulary, and the training
    file holds at least one sequence of ``block_size`` tokens (the model's, passed in)."""
    if data_dir is None:
        raise DataError("token-file needs --data-dir DIR holding train.bin (and val.bin)")
    dtype = str(options.get("token_dtype", TokenFileOptions().token_dtype))
    train, held_out = _arrays(data_dir, dtype)
    vocab, block = options.get("vocab_size"), options.get("block_size")
    for array, name in ((train, TRAIN), (held_out, HELD_OUT)):
        if vocab is not None:
            check_vocabulary("token-file", array, int(vocab), str(data_dir / name))
    if block is not None and len(train) <= int(block):
        raise DataError(
            f"token-file: {data_dir / TRAIN} holds {len(train):,} tokens, fewer than one "
            f"sequence of block_size {block} and its next token; use a smaller block_size or "
            "more data"
        )
    return [] if len(held_out) else [f"no {HELD_OUT} in {data_dir}: nothing is evaluated"]


def _fingerprint(path: Path) -> str:
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(HASHED_BYTES))
    return digest.hexdigest()


def load(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> TokenArrays:
    """This process's replicas' parts of ``train.bin`` and the held-out ``val.bin``."""
    if cfg.data_dir is None:
        raise DataError("token-file needs --data-dir DIR holding train.bin (and val.bin)")
    data_dir = Path(cfg.data_dir)
    dtype = cfg.typed(TokenFileOptions).token_dtype
    train, held_out = _arrays(data_dir, dtype)
    facts: dict[str, Any] = {"corpus": "token-file", "train_tokens": len(train)}
    facts["train_sha256_head"] = _fingerprint(data_dir / TRAIN)
    return from_corpus(
        "token-file", cfg, train, held_out, shard=shard, shards=shards, replicas=replicas,
        block_size=input_size, vocab=num_classes, facts=facts,
    )  # fmt: skip
