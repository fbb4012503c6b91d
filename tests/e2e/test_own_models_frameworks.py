"""A model of the user's own on TensorFlow and MXNet engines, as a new user would try it
(docs/own-training.md, "Your model in dlscale's loop"): a tf.keras model from their module on
tf-single and tf-mwms, a Gluon block on mxnet-single and mxnet-kv (with its server), each trained on
the digits (accuracy well above chance), and the ways such a model is refused. Every engine builds
the model through the one function these reach (tensorflow/loop.build_keras_model,
mxnet/user_model.build_own); keras-fit, tf-mirrored, tf-ps, horovod-tf, horovod-keras and
horovod-mxnet were tried by hand (issue 29's note), not here, to keep CI's time."""

import json
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.dist]  # starts workers: not in make check
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
COMMON = ("--dataset", "digits", "--epochs", "2", "--batch-size", "32", "--lr", "0.01",
          "--repeats", "1", "--set", "machine_reference=false")  # fmt: skip


@pytest.fixture
def work(tmp_path: Path) -> Path:
    for name in ("keras_models.py", "gluon_models.py", "mymodels.py"):
        shutil.copy(SCRIPTS / name, tmp_path / name)
    return tmp_path


def _rows(stdout: str) -> dict[tuple[str, int], dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {(r["backend"], r["workers"]): r for r in rows if r["kind"] == "point"}


def _facts(work: Path, pattern: str) -> dict:
    run_dir = next((work / "dlscale-results").glob(pattern))
    for line in (run_dir / "events.rank0.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "strategy":
            return event["facts"]
    raise AssertionError(f"no strategy record in {run_dir}")


def test_a_keras_model_of_ones_own_on_the_tensorflow_engines(work: Path, cli):
    run = cli(
        "run", "--model", "keras_models:small_cnn", "--backend", "tf-single,tf-mwms",
        "--workers", "1,2", *COMMON, "--json",
        cwd=work, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = _rows(run.stdout)
    assert set(rows) == {("tf-single", 1), ("tf-mwms", 1), ("tf-mwms", 2)}
    for row in rows.values():
        assert row["status"] == "completed", row["error"]
        assert row["eval_accuracy"] > 0.5  # trained: chance is 0.1
    assert rows[("tf-mwms", 2)]["speedup"] > 0
    facts = _facts(work, "keras_models_small_cnn-tf-mwms-digits-w2-*")
    assert facts["weights"] == "keras"  # no PyTorch twin to start from
    # conv 3*3*3*8+8, dense 8*8*8*10+10 (32x32 pooled by 4 to 8x8), in float32
    result = next((work / "dlscale-results").glob("keras_models_small_cnn-tf-mwms-*-w2-*"))
    metrics = json.loads((result / "result.json").read_text())["metrics"]
    assert metrics["gradient_bytes"] == 4 * (3 * 3 * 3 * 8 + 8 + 8 * 8 * 8 * 10 + 10)


def test_a_gluon_block_of_ones_own_on_the_mxnet_engines(work: Path, cli):
    run = cli(
        "run", "--model", "gluon_models:small_cnn", "--backend", "mxnet-single,mxnet-kv",
        "--workers", "1,2", *COMMON, "--json",
        cwd=work, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = _rows(run.stdout)
    assert set(rows) == {("mxnet-single", 1), ("mxnet-kv", 1), ("mxnet-kv", 2)}
    for row in rows.values():
        assert row["status"] == "completed", row["error"]
        assert row["eval_accuracy"] > 0.5, row
    facts = _facts(work, "gluon_models_small_cnn-mxnet-kv-digits-w2-*")
    assert facts["hybridized"] is True and facts["weights"] == "mxnet"
    # a plain Block (its forward is Python): not hybridized
    run = cli(
        "run", "--model", "gluon_models:imperative", "--backend", "mxnet-single",
        "--workers", "1", *COMMON, "--json",
        cwd=work, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (row,) = _rows(run.stdout).values()
    assert row["status"] == "completed" and row["eval_accuracy"] > 0.5
    assert _facts(work, "gluon_models_imperative-mxnet-single-digits-w1-*")["hybridized"] is False


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (  # a Keras model on PyTorch's engines: refused before anything starts
            ["--model", "keras_models:small_cnn", "--backend", "torch-ddp", "--workers", "2"],
            "model keras_models:small_cnn is a tensorflow model, which torch's backends "
            "cannot train: choose --backend from ",
        ),
        (
            ["--model", "keras_models:keras3_model", "--backend", "tf-single"],
            "returned keras.src.models.sequential.Sequential, not a tf.keras Model: a Keras 3 "
            "model (import keras)",
        ),
        (
            [
                "--model",
                "gluon_models:small_cnn",
                "--backend",
                "mxnet-single",
                "--set",
                "image_size=2",
            ],
            "cannot take a batch of 3x2x2 images",
        ),
    ],
)
def test_a_model_for_another_engine_is_refused_in_one_line(work: Path, cli, args, said):
    run = cli("run", *args, *COMMON, cwd=work, timeout=300)
    assert run.returncode != 0
    assert said in run.stdout + run.stderr, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
