"""Token data sets (issue 72): each replica reads its own contiguous part, targets are the
inputs shifted by one, the corpora are fixed, and a bad token file is refused before launch in
one line."""

from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import DataError
from dlscale.datasets import python_source
from dlscale.datasets.token_files import check
from dlscale.datasets.tokens import TokenArrays, parts
from dlscale.runner import check_inputs


def _arrays(tokens: np.ndarray, *, shard: int, shards: int, replicas: int = 1, batch: int = 2):
    return TokenArrays(
        name="t",
        train=parts(tokens, shard=shard, replicas=replicas, shards=shards),
        held_out=np.arange(100, dtype=np.uint16),
        block_size=4,
        num_classes=1000,
        batch=batch,
        seed=0,
        shard=shard,
        shards=shards,
        replicas=replicas,
    )


def test_each_replica_reads_its_own_contiguous_part_and_targets_are_the_next_tokens():
    tokens = np.arange(81, dtype=np.uint16)  # 40 tokens a replica: 9 sequences of 4 each
    seen = []
    for shard in (0, 1):
        data = _arrays(tokens, shard=shard, shards=2)
        assert data.steps_per_epoch == 4  # 9 sequences // batch 2
        for x, y in data.train_batches(epoch=0):
            assert x.dtype == y.dtype == np.int64 and x.shape == (2, 4)
            np.testing.assert_array_equal(y, x + 1)  # the next token
            assert ((x >= 40 * shard) & (x < 40 * (shard + 1))).all()  # its own part
            seen += [tuple(row) for row in x]
    assert len(seen) == len(set(seen)) == 16  # no two replicas, no two steps the same sequence


def test_a_process_of_two_replicas_gets_both_replicas_batches_in_replica_order():
    tokens = np.arange(81, dtype=np.uint16)
    both = list(_arrays(tokens, shard=0, shards=2, replicas=2).train_batches(epoch=1))
    alone = [list(_arrays(tokens, shard=s, shards=2).train_batches(epoch=1)) for s in (0, 1)]
    for step, (x, _) in enumerate(both):
        np.testing.assert_array_equal(x, np.concatenate([alone[0][step][0], alone[1][step][0]]))


def test_the_epoch_order_depends_on_the_epoch_and_the_held_out_part_on_the_rank():
    tokens = np.arange(81, dtype=np.uint16)
    data = _arrays(tokens, shard=0, shards=2)
    first = [x.tolist() for x, _ in data.train_batches(0)]
    assert first != [x.tolist() for x, _ in data.train_batches(1)]
    held = [
        np.concatenate([x.ravel() for x, _ in _arrays(tokens, shard=s, shards=2).eval_batches()])
        for s in (0, 1)
    ]
    assert held[0].max() < 50 <= held[1].min()  # [0, 50) and [50, 100)


def test_too_few_tokens_for_the_batch_says_what_to_change():
    with pytest.raises(DataError, match=r"too few tokens for the batch.*block_size"):
        _arrays(np.arange(20, dtype=np.uint16), shard=0, shards=2, batch=4)


def test_python_source_is_the_standard_librarys_files_in_a_fixed_order():
    files = python_source.corpus_files()
    assert files and all(f.suffix == ".py" for f in files)
    assert not any("site-packages" in f.parts or "test" in f.parts for f in files)
    train, held_out, facts = python_source.corpus()
    assert train.dtype == np.uint8 and len(train) > 10 * len(held_out) // 2 > 0
    assert facts["files"] == len(files) and facts["train_tokens"] == len(train)
    assert python_source.corpus() is python_source.corpus()  # read once a process


def _token_file(tmp_path: Path, train: np.ndarray, val: np.ndarray | None = None) -> Path:
    train.tofile(tmp_path / "train.bin")
    if val is not None:
        val.tofile(tmp_path / "val.bin")
    return tmp_path


def _config(data_dir: Path, **settings) -> RunConfig:
    return RunConfig.make(
        backend="torch-single", model="gpt-nano", dataset="token-file", data_dir=str(data_dir),
        **settings,
    )  # fmt: skip


def test_a_good_token_file_passes_and_one_without_val_bin_is_said(tmp_path: Path):
    _token_file(tmp_path, np.arange(1000, dtype=np.uint16) % 256)
    assert check_inputs((_config(tmp_path),)) == [
        f"token-file: no val.bin in {tmp_path}: nothing is evaluated"
    ]


@pytest.mark.parametrize(
    ("write", "settings", "said"),
    [
        (lambda d: (d / "train.bin").write_bytes(b"\x01\x00\x02"), {},
         "not a whole number of uint16"),
        (lambda d: np.array([1, 2, 300], np.uint16).tofile(d / "train.bin"), {},
         "token id 300 at position 2, not below the model's vocabulary 256"),
        (lambda d: np.arange(10, dtype=np.uint16).tofile(d / "train.bin"), {},
         "holds 10 tokens, fewer than one sequence of block_size 64"),
        (lambda d: None, {}, "no train.bin in"),
        (lambda d: np.arange(100, dtype=np.uint32).tofile(d / "train.bin"),
         {"vocab_size": 64, "block_size": 8, "token_dtype": "uint32"},
         "token id 64 at position 64"),
    ],
)  # fmt: skip
def test_a_bad_token_file_is_refused_before_launch_naming_the_file(
    tmp_path: Path, write, settings, said
):
    write(tmp_path)
    with pytest.raises(DataError, match=said.replace("(", r"\(")):
        check_inputs((_config(tmp_path, **settings),))


def test_the_token_file_checker_needs_a_directory():
    with pytest.raises(DataError, match="needs --data-dir"):
        check(None, {})


def test_every_token_data_set_declares_its_sample_kind():
    kinds = {name: spec.sample for name, spec in DATASETS}
    assert {kinds[n] for n in ("tokens", "python-source", "token-file")} == {"tokens"}
    assert kinds["cifar10"] == kinds["synthetic"] == "image"
