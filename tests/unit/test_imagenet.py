"""Image data sets from disk: layouts, TFRecords (against TensorFlow's own reader and writer),
bad files, the augmentation, and the torch and numpy loaders giving the same batches."""

from __future__ import annotations

import gc
import io
import os
import signal
import weakref
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import DataError, UnsupportedPoint, WorkerFault
from dlscale.contract.run_config import RunConfig
from dlscale.datasets import image_files, imagenet
from dlscale.datasets.arrays import shard_indices, transform_images
from dlscale.datasets.loader_pool import loader_pool
from tests.image_data import jpeg_bytes, write_folder, write_tfrecords

OPTIONS = {
    "layout": "auto",
    "classes": 0,
    "images_per_class": 0,
    "loader_workers": 0,
    "verify": "headers",
    "bad_files": "fail",
}


def _data(root: Path, *, workers: int = 0, shard: int = 0, shards: int = 1, batch: int = 4):
    train, held_out = imagenet.splits(root, OPTIONS, checked=False)
    return imagenet.ImageFiles(
        name="imagenet", train=train, eval=held_out, num_classes=1000, size=16, batch=batch,
        seed=3, shard=shard, shards=shards, loader_workers=workers,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Layouts


def test_the_folder_layout_is_read_as_imagefolder_reads_it(tmp_path: Path) -> None:
    root = write_folder(tmp_path, classes=3, per_class=5)
    (root / "train" / "n00000001" / "notes.txt").write_text("not an image")
    split = image_files.scan(root, layout="auto", split="train")
    assert split is not None and split.classes == ("n00000000", "n00000001", "n00000002")
    assert list(split.labels) == [0] * 5 + [1] * 5 + [2] * 5  # sorted classes, sorted files
    assert all(e.path.endswith(".JPEG") and e.offset == -1 for e in split.entries)
    subset = image_files.scan(root, layout="folder", split="train", classes=2, per_class=3)
    assert subset is not None and list(subset.labels) == [0, 0, 0, 1, 1, 1]
    held_out = image_files.scan(root, layout="auto", split="eval")
    assert held_out is not None and len(held_out.entries) == 6


def test_tfrecords_dlscale_writes_are_what_tensorflow_reads(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    root = write_tfrecords(tmp_path, classes=3, per_class=4, shards=2)
    split = image_files.scan(root, layout="auto", split="train")
    assert split is not None
    features = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }
    theirs = []
    for shard in sorted(root.glob("train-*")):
        for record in tf.data.TFRecordDataset([str(shard)]):
            example = tf.io.parse_single_example(record, features)
            theirs.append((example["image/encoded"].numpy(), int(example["image/class/label"])))
    pairs = zip(split.entries, split.labels, strict=True)
    ours = [(image_files.read_bytes(e), int(y) + 1) for e, y in pairs]
    assert ours == theirs


def test_tfrecords_tensorflow_writes_are_what_dlscale_reads(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    images = [(jpeg_bytes(i, i % 2), 1 + i % 2) for i in range(6)]
    with tf.io.TFRecordWriter(str(tmp_path / "train-00000-of-00001")) as writer:
        for data, label in images:
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    split = image_files.scan(tmp_path, layout="tfrecord", split="train")
    assert split is not None
    assert [image_files.read_bytes(e) for e in split.entries] == [d for d, _ in images]
    assert list(split.labels) == [label - 1 for _, label in images]
    assert image_files.verify(split, "decode", tmp_path) == []  # every checksum holds
    assert image_files.scan(tmp_path, layout="tfrecord", split="eval") is None


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: (r / "train").rename(r / "training"), "found neither a train/ folder"),
        (lambda r: [p.unlink() for p in (r / "train" / "n00000001").iterdir()], "empty class"),
        (
            lambda r: [
                p.rename(p.with_suffix(".txt")) for p in (r / "train" / "n00000002").iterdir()
            ],
            "empty class",
        ),
    ],
)
def test_a_bad_folder_layout_is_one_error_naming_the_path(tmp_path, damage, message) -> None:
    root = write_folder(tmp_path, classes=3, per_class=2)
    damage(root)
    with pytest.raises(DataError, match=message):
        imagenet.check(root, OPTIONS)


def test_too_few_classes_for_the_subset_or_the_model_are_refused(tmp_path: Path) -> None:
    root = write_folder(tmp_path, classes=3, per_class=4)
    with pytest.raises(DataError, match="3 class folders, fewer than classes = 10"):
        imagenet.check(root, {**OPTIONS, "classes": 10})
    config = RunConfig.make(
        model="tiny", dataset="imagenet-subset", data_dir=str(root), batch_size=2,
        options={"classes": 3},
    )  # fmt: skip
    with pytest.raises(DataError, match="more than the model's 2 outputs"):
        imagenet.load(config, shard=0, shards=1, input_size=16, num_classes=2)


def test_missing_and_corrupt_tfrecord_shards_name_the_file(tmp_path: Path) -> None:
    root = write_tfrecords(tmp_path, shards=3)
    shard = root / "train-00001-of-00003"
    data = bytearray(shard.read_bytes())
    data[200] ^= 0xFF  # inside the first record's data
    shard.write_bytes(bytes(data))
    with pytest.raises(
        DataError, match=r"train-00001-of-00003: corrupt record at byte 0 \(bad data"
    ):
        imagenet.check(root, OPTIONS)
    shard.write_bytes(bytes(data[:-3]))  # and cut short
    with pytest.raises(DataError, match=r"train-00001-of-00003: truncated record at byte \d+$"):
        imagenet.check(root, OPTIONS)
    shard.unlink()
    with pytest.raises(
        DataError, match=r"1 of 3 train shards missing \(first: train-00001-of-00003"
    ):
        imagenet.check(root, OPTIONS)


def test_a_record_that_is_not_an_image_example_is_named(tmp_path: Path) -> None:
    image_files.write_records(tmp_path / "train-00000-of-00001", [b"\x08\x96\x01 not a proto"])
    with pytest.raises(DataError, match=r"record at byte 12 is not a tf\.train\.Example"):
        imagenet.check(tmp_path, OPTIONS)
    other = image_files._example_class()()
    other.features.feature["image/raw"].bytes_list.value.append(b"x")
    image_files.write_records(tmp_path / "train-00000-of-00001", [other.SerializeToString()])
    with pytest.raises(DataError, match="lacks image/encoded or image/class/label"):
        imagenet.check(tmp_path, OPTIONS)


# --------------------------------------------------------------------------------------------
# Bad images


def _png(size: tuple[int, int] = (9, 7)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(out, format="PNG")
    return out.getvalue()


def test_headers_find_truncated_and_foreign_files_and_pass_png(tmp_path: Path) -> None:
    root = write_folder(tmp_path, classes=2, per_class=4)
    folder = root / "train" / "n00000001"
    files = sorted(folder.iterdir())
    files[0].write_bytes(files[0].read_bytes()[:200])  # truncated
    files[1].write_bytes(b"<html>a web page saved as .JPEG</html>")
    files[2].write_bytes(_png())  # ImageNet holds a PNG named .JPEG: readable, so kept
    split = image_files.scan(root, layout="folder", split="train")
    assert split is not None
    bad = image_files.verify(split, "headers", root)
    assert [(Path(e.path).name, why) for e, why in bad] == [
        (files[0].name, "truncated JPEG (no end marker)"),
        (files[1].name, "not a JPEG or PNG image"),
    ]
    with pytest.raises(DataError) as raised:
        imagenet.check(root, OPTIONS)
    assert str(raised.value).startswith(f"{files[0]}: truncated JPEG (no end marker) (and 1 more")
    assert 'bad_files = "skip"' in str(raised.value)
    notes = imagenet.check(root, {**OPTIONS, "bad_files": "skip"})
    assert notes == [
        f"2 bad images left out of train (first: {files[0]}: truncated JPEG (no end marker))"
    ]
    train, _ = imagenet.splits(root, {**OPTIONS, "bad_files": "skip"}, checked=False)
    assert len(train.entries) == 6 and str(files[2]) in {e.path for e in train.entries}


def test_only_decoding_finds_a_jpeg_broken_inside(tmp_path: Path) -> None:
    root = write_folder(tmp_path, classes=1, per_class=4)
    target = sorted((root / "train" / "n00000000").iterdir())[1]
    good = target.read_bytes()
    target.write_bytes(good[:40] + b"\x00" * 10 + good[-2:])  # start and end markers intact
    assert imagenet.check(root, OPTIONS) == []  # headers pass it
    with pytest.raises(DataError, match=f"{target}: cannot decode"):
        imagenet.check(root, {**OPTIONS, "verify": "decode"})
    # unchecked, the loader meets it: the batch names the file instead of a worker's traceback
    data = _data(root, batch=4)
    bad = data.load_batch(np.arange(4), np.zeros(4, np.int64))
    assert isinstance(bad, imagenet.BadImage) and bad.where == str(target)
    with pytest.raises(DataError, match=f"^{target}: cannot decode"):
        list(data.train_batches(0))


# --------------------------------------------------------------------------------------------
# Augmentation and order


@pytest.mark.parametrize(("width", "height"), [(40, 30), (30, 40), (500, 375), (7, 7)])
def test_the_random_resized_crop_stays_in_torchvisions_ranges(width: int, height: int) -> None:
    for seed in range(300):
        left, top, w, h = imagenet.crop_box(width, height, np.random.default_rng(seed))
        assert left >= 0 and left + w <= width and top >= 0 and top + h <= height
        area, aspect = w * h / (width * height), w / h
        fallback = (w, h) == (width, height)  # ten misses: the whole image (its ratio is in range)
        if not fallback:  # rounding to whole pixels moves small crops a little
            slack = 1.5 / min(w, h)
            assert imagenet.SCALE[0] * (1 - 2 * slack) <= area <= 1
            assert imagenet.RATIO[0] * (1 - slack) <= aspect <= imagenet.RATIO[1] * (1 + slack)


def test_an_image_too_wide_for_any_crop_gets_a_centre_crop_at_the_widest_ratio() -> None:
    rng = np.random.default_rng(0)
    assert imagenet.crop_box(1000, 10, rng) == ((1000 - 13) // 2, 0, 13, 10)
    assert imagenet.crop_box(10, 1000, rng) == (0, (1000 - 13) // 2, 10, 13)


def test_a_training_image_is_the_seeded_crop_resized_by_pillow_then_maybe_flipped() -> None:
    data = jpeg_bytes(0, 1)  # 40 x 30
    flipped = set()
    for seed in range(12):
        rng = np.random.default_rng(seed)
        left, top, w, h = imagenet.crop_box(40, 30, rng)
        flip = rng.random() < 0.5
        flipped.add(flip)
        source = Image.open(io.BytesIO(data)).convert("RGB")
        crop = source.resize(
            (16, 16), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
        want = np.asarray(crop).transpose(2, 0, 1)
        got = imagenet.train_image(data, 16, seed)
        assert got.shape == (3, 16, 16) and got.dtype == np.uint8
        assert np.array_equal(got, want[:, :, ::-1] if flip else want)
    assert flipped == {True, False}


def test_an_evaluation_image_is_the_centre_of_the_shorter_side_at_size_over_0875() -> None:
    data = jpeg_bytes(0, 1)  # 40 x 30: the shorter side to int(16 / 0.875) = 18, so 24 x 18
    source = Image.open(io.BytesIO(data)).convert("RGB").resize((24, 18), Image.Resampling.BILINEAR)
    want = np.asarray(source.crop((4, 1, 20, 17))).transpose(2, 0, 1)
    assert np.array_equal(imagenet.eval_image(data, 16), want)


def test_the_plan_shards_like_every_other_data_set_and_gives_every_sample_a_seed(
    tmp_path: Path,
) -> None:
    root = write_folder(tmp_path, classes=3, per_class=8)
    ranks = [_data(root, shard=r, shards=2, batch=3) for r in range(2)]
    n = len(ranks[0].train.entries)
    for rank, data in enumerate(ranks):
        indices, seeds = data.train_plan(1)
        expected = shard_indices(n, epoch=1, seed=3, rank=rank, world=2)
        assert np.array_equal(indices.ravel(), expected[: indices.size])
        assert len(set(seeds.ravel().tolist())) == seeds.size
    both = np.concatenate([r.train_plan(1)[0].ravel() for r in ranks])
    assert len(set(both.tolist())) == both.size  # disjoint shards
    assert not np.array_equal(ranks[0].train_plan(0)[1], ranks[0].train_plan(1)[1])


def test_a_loader_pool_gives_the_batches_of_decoding_in_process(tmp_path: Path) -> None:
    root = write_folder(tmp_path, classes=2, per_class=8)
    inline, pooled = _data(root, workers=0), _data(root, workers=2)
    ours = list(inline.train_batches(0))
    theirs = list(pooled.train_batches(0))
    assert len(ours) == len(theirs) == inline.steps_per_epoch == 4
    for (x0, y0), (x1, y1) in zip(ours, theirs, strict=True):
        assert x0.dtype == np.float32 and x0.shape == (4, 3, 16, 16)
        assert np.array_equal(x0, x1) and np.array_equal(y0, y1)
    held = list(pooled.eval_batches())
    assert sum(len(y) for _, y in held) == 4  # 2 classes x 2 held-out images
    # the normalization is the ImageNet one, on [0, 1]
    indices, seeds = inline.train_plan(0)
    raw = inline.load_batch(indices[0], seeds[0])
    assert not isinstance(raw, imagenet.BadImage)
    mean = np.asarray(imagenet.MEAN, np.float32)[:, None, None]
    std = np.asarray(imagenet.STD, np.float32)[:, None, None]
    np.testing.assert_allclose(ours[0][0][0], (raw[0][0] / np.float32(255) - mean) / std, rtol=1e-5)
    assert np.array_equal(transform_images(raw[0], inline.transform), ours[0][0])


def test_a_loader_pool_lives_only_as_long_as_its_data_set(tmp_path: Path) -> None:
    """Pools were keyed by ``id()``: a data set made at a collected one's address got the old
    pool, decoding the old images, or none at all (CI saw a 1-worker set load in process)."""
    root = write_folder(tmp_path, classes=2, per_class=8)
    data = _data(root, workers=0)
    next(data.train_batches(0))
    pool = weakref.ref(loader_pool(data))
    assert pool() is loader_pool(data)  # one pool per data set
    del data
    gc.collect()
    assert pool() is None


def test_a_killed_loader_process_is_one_line_not_a_hang(tmp_path: Path) -> None:
    root = write_folder(tmp_path, classes=2, per_class=8)
    data = _data(root, workers=1)
    batches = data.train_batches(0)
    next(batches)
    executor = loader_pool(data).executor
    assert executor is not None
    for pid in list(executor._processes):  # the pool's own processes, children of this one
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerFault, match=r"^a loader process of this worker died"):
        list(batches)


def test_the_torch_loader_gives_the_numpy_batches(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from dlscale.frameworks.torch.data import to_torch

    root = write_folder(tmp_path, classes=2, per_class=8)
    reference = _data(root, workers=0)
    for workers in (0, 2):
        on_device = to_torch(_data(root, workers=workers), "cpu")
        for epoch in (0, 1):  # persistent loader processes follow the epochs
            got = list(on_device.train_batches(epoch))
            want = list(reference.train_batches(epoch))
            assert len(got) == len(want) == 4
            for (x, y), (xr, yr) in zip(got, want, strict=True):
                torch.testing.assert_close(x, torch.from_numpy(xr), rtol=1e-5, atol=1e-5)
                assert torch.equal(y, torch.from_numpy(yr))
        assert sum(len(y) for _, y in on_device.eval_batches()) == 4


def test_the_torch_loader_names_an_image_it_cannot_decode(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from dlscale.frameworks.torch.data import to_torch

    root = write_folder(tmp_path, classes=1, per_class=4)
    target = sorted((root / "train" / "n00000000").iterdir())[2]
    target.write_bytes(b"\xff\xd8\xff" + b"\x00" * 30 + b"\xff\xd9")
    with pytest.raises(DataError, match=f"^{target}: cannot decode"):
        list(to_torch(_data(root, workers=1), "cpu").train_batches(0))


def test_the_tensorflow_pipeline_reads_both_layouts_and_names_a_bad_image(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from dlscale.frameworks.tensorflow.data import checked_batches, to_tf

    folder = write_folder(tmp_path / "folder", classes=2, per_class=8)
    records = write_tfrecords(tmp_path / "records", classes=2, per_class=8, shards=2)
    for root in (folder, records):
        data = _data(root)
        pipeline = to_tf(data)
        batches = list(checked_batches(pipeline, pipeline.train_batches(0), 0))
        indices, _ = data.train_plan(0)
        assert len(batches) == 4
        for (x, y), step in zip(batches, indices, strict=True):
            assert tuple(x.shape) == (4, 16, 16, 3)  # NHWC
            assert list(y.numpy()) == list(data.train.labels[step])  # the plan's images
            assert np.isfinite(x.numpy()).all() and -3 < float(x.numpy().mean()) < 3
        half = list(pipeline.train_batches(0, part=(1, 2)))  # a parameter-server worker's part
        assert [list(y.numpy()) for _, y in half] == [
            list(data.train.labels[s[2:]]) for s in indices
        ]
        held = [y for _, y in pipeline.eval_batches()]
        assert sum(len(y) for y in held) == 4
    target = sorted((folder / "train" / "n00000001").iterdir())[0]
    target.write_bytes(b"\xff\xd8\xff" + b"\x00" * 30 + b"\xff\xd9")
    pipeline = to_tf(_data(folder))
    with pytest.raises(DataError, match=f"^{target}: cannot decode"):
        list(checked_batches(pipeline, pipeline.train_batches(0), 0))


# --------------------------------------------------------------------------------------------
# The plug-in


def test_the_registered_data_sets_and_their_options(tmp_path: Path) -> None:
    spec = DATASETS.get("imagenet-subset")
    assert spec.needs_data_dir and spec.has_eval and spec.num_classes is None
    assert DATASETS.get("imagenet").num_classes == 1000
    root = write_folder(tmp_path, classes=3, per_class=2)
    config = RunConfig.make(
        model="tiny", dataset="imagenet-subset", data_dir=str(root),
        options={"classes": 3, "loader_workers": 1, "bad_files": "skip"},
    )  # fmt: skip
    options = config.grouped_options()["dataset"]
    assert options == {**OPTIONS, "classes": 3, "images_per_class": 100, "loader_workers": 1,
                       "bad_files": "skip"}  # fmt: skip
    assert spec.check(root, options) == []
    for key, value in (("verify", "everything"), ("layout", "zip"), ("bad_files", "ignore")):
        with pytest.raises(UnsupportedPoint, match=key):
            RunConfig.make(dataset="imagenet", data_dir=str(root), options={key: value})
    with pytest.raises(Exception, match="loader_workers must be >= 0"):
        RunConfig.make(dataset="imagenet", data_dir=str(root), options={"loader_workers": -1})


def test_loader_only_is_refused_where_the_framework_reads_its_own_batches() -> None:
    for backend in ("keras-fit", "tf-ps", "horovod-keras"):
        with pytest.raises(UnsupportedPoint, match="reads its own batches"):
            RunConfig.make(backend=backend, loader_only=True)
    assert RunConfig.make(backend="tf-single", loader_only=True).loader_only
