"""The cache of PyTorch's initial weights that TensorFlow and MXNet workers start from
(dlscale.contract.weights_cache, behind FrameworkSpec.initial_weights): built once, then read
without importing torch; a new key for whatever changes the weights; a damaged or unwritable
cache never fails a run. The engines that read it are held to torch's steps in
tests/distributed (test_tensorflow.py, test_mxnet.py), where the suite's first worker of a
model builds the weights and the later ones read them."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract import weights_cache
from dlscale.contract.files import read_bounded
from dlscale.contract.frameworks import FRAMEWORKS
from dlscale.contract.registry import load_object
from dlscale.contract.weights_cache import CACHE_ENV
from dlscale.launchers.base import common_env

TINY = {"model": "tiny", "backend": "tf-single"}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "initial-weights"


def built(config: RunConfig) -> dict[str, np.ndarray]:
    """torch's weights built here, past the cache."""
    return dict(load_object(FRAMEWORKS.get("torch").initial_state)(config))


def cached_initial_weights(framework: str, config: RunConfig) -> dict[str, np.ndarray]:
    """What a TensorFlow or MXNet worker asks for (through the cache)."""
    return FRAMEWORKS.get(framework).initial_weights(config)


def cache_key(framework: str, config: RunConfig) -> str | None:
    return weights_cache.cache_key(FRAMEWORKS.get(framework), config)


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == np.float32 and np.array_equal(a[name], b[name]), name


def test_built_once_then_read_without_importing_torch(cache: Path):
    config = RunConfig.make(**TINY)
    first = cached_initial_weights("torch", config)
    (kept,) = cache.glob("*.npz")
    assert kept.name == f"{cache_key('torch', config)}.npz"
    assert_same(first, built(config))
    check = (
        "import sys\n"
        "from dlscale.config import RunConfig\n"
        "from dlscale.contract.frameworks import FRAMEWORKS\n"
        "config = RunConfig.make(model='tiny', backend='tf-single')\n"
        "state = FRAMEWORKS.get('torch').initial_weights(config)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print(sorted(state))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env=os.environ, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(first))


def test_what_changes_the_weights_changes_the_key(cache: Path):
    key = cache_key("torch", RunConfig.make(**TINY))
    others = [
        RunConfig.make(**TINY, seed=1),
        RunConfig.make(model="resnet20", backend="tf-single"),
        RunConfig.make(model="alexnet", backend="tf-single", dropout=0.0),
        RunConfig.make(model="alexnet", backend="tf-single", dropout=0.0, dataset="digits"),
    ]
    keys = [cache_key("torch", other) for other in others]
    assert key is not None and None not in keys and len({key, *keys}) == 5
    # the digits' 10 classes are the tiny model's own: the same weights, the same key
    assert cache_key("torch", RunConfig.make(**TINY, dataset="digits")) == key
    assert cache_key("torch", RunConfig.make(**TINY, steps=7)) == key  # not a weights fact
    assert cache_key("torch", RunConfig.make(**TINY, workers=1)) == key


def test_a_users_own_model_is_built_every_time(cache: Path, tmp_path: Path):
    source = tmp_path / "mine.py"
    source.write_text(
        "import torch\n\ndef build(num_classes):\n"
        "    layers = [torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, num_classes)]\n"
        "    return torch.nn.Sequential(*layers)\n"
    )
    config = RunConfig.make(model=f"{source}:build", backend="torch-single", image_size=8)
    assert cache_key("torch", config) is None
    assert_same(cached_initial_weights("torch", config), built(config))
    assert not cache.exists()


@pytest.mark.parametrize("damage", [b"", b"PK\x03\x04 not a zip", "flip", "fifo"])
def test_a_damaged_file_is_built_again_and_replaced(cache: Path, capsys, damage):
    config = RunConfig.make(**TINY)
    cached_initial_weights("torch", config)
    (kept,) = cache.glob("*.npz")
    raw = kept.read_bytes()
    if damage == "flip":  # one bit of the arrays' bytes: the archive's CRC says so
        middle = len(raw) // 2
        kept.write_bytes(raw[:middle] + bytes([raw[middle] ^ 1]) + raw[middle + 1 :])
    elif damage == "fifo":  # planted: never read (it would block), replaced
        kept.unlink()
        os.mkfifo(kept)
    else:
        kept.write_bytes(damage)
    assert_same(cached_initial_weights("torch", config), built(config))
    assert f"{kept} cannot be read" in capsys.readouterr().err
    assert kept.read_bytes() == raw


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path, monkeypatch, capsys):
    blocked = tmp_path / "a-\x1b[31mfile"  # a name from the user's variable: shown escaped
    blocked.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocked))
    config = RunConfig.make(**TINY)
    assert_same(cached_initial_weights("torch", config), built(config))
    err = capsys.readouterr().err
    assert "initial weights not kept in" in err
    assert "\x1b" not in err and "a-\\x1b[31mfile" in err


def test_an_empty_variable_turns_the_cache_off(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = RunConfig.make(**TINY)
    assert cache_key("torch", config) is not None
    assert_same(cached_initial_weights("torch", config), built(config))
    assert not any(tmp_path.iterdir())


def test_the_least_recently_used_files_go_first(cache: Path, monkeypatch):
    seeds = [RunConfig.make(**TINY, seed=s) for s in range(3)]
    for config in seeds:
        cached_initial_weights("torch", config)
    files = {c.seed: cache / f"{cache_key('torch', c)}.npz" for c in seeds}
    size = files[0].stat().st_size
    for age, seed in enumerate((1, 0, 2)):  # seed 1 least recently used
        os.utime(files[seed], (1000 + age, 1000 + age))
    cached_initial_weights("torch", seeds[0])  # read: now the most recent
    monkeypatch.setattr(weights_cache, "LIMIT_BYTES", 2 * size)
    cached_initial_weights("torch", RunConfig.make(**TINY, seed=3))  # written, then trimmed
    assert sorted(p.name for p in cache.glob("*.npz")) == sorted(
        f"{cache_key('torch', c)}.npz" for c in (seeds[0], RunConfig.make(**TINY, seed=3))
    )


def test_nothing_larger_than_the_cache_is_kept_or_read(cache: Path, monkeypatch, capsys):
    config = RunConfig.make(**TINY)
    cached_initial_weights("torch", config)
    (kept,) = cache.glob("*.npz")
    monkeypatch.setattr(weights_cache, "LIMIT_BYTES", kept.stat().st_size - 1)
    assert_same(cached_initial_weights("torch", config), built(config))  # not read: built
    err = capsys.readouterr().err
    assert f"{kept} cannot be read" in err and "larger than" in err
    assert "not kept" in err and "larger than the cache's" in err


def test_the_launchers_hand_the_ranks_the_parents_choice(tmp_path: Path, monkeypatch):
    spec = tmp_path / "run" / "spec.json"
    config = RunConfig.make(**TINY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CACHE_ENV, "here")  # a rank starts elsewhere: made absolute
    assert common_env(config, spec, 1)[CACHE_ENV] == str(tmp_path / "here")
    monkeypatch.setenv(CACHE_ENV, "")  # off stays off
    assert common_env(config, spec, 1)[CACHE_ENV] == ""
    monkeypatch.delenv(CACHE_ENV)  # each rank's own default (its home may be another)
    assert CACHE_ENV not in common_env(config, spec, 1)


def test_a_bounded_read_takes_the_whole_file_and_nothing_past_the_bound(tmp_path: Path):
    """contract/files.read_bounded, which the cache reads through: whole below the bound
    (across its 8 MiB pieces), EFBIG above it, a device refused before any read."""
    path = tmp_path / "f"
    payload = os.urandom(8 * 2**20 + 3)
    path.write_bytes(payload)
    assert read_bounded(path, len(payload)) == payload
    assert read_bounded(path, 2 * 2**30) == payload
    with pytest.raises(OSError) as over:
        read_bounded(path, len(payload) - 1)
    assert over.value.errno == errno.EFBIG
    with pytest.raises(OSError) as device:
        read_bounded(Path("/dev/zero"), 10)
    assert device.value.errno == errno.EINVAL
