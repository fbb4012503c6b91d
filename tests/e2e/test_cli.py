"""The command line as a user runs it: run, then ls, then load_results; and every bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dlscale
from dlscale.contract.models import MODELS
from tests.image_data import write_folder

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

JSON_KEYS = {
    "run_id",
    "status",
    "backend",
    "model",
    "dataset",
    "workers",
    "batch_size_per_worker",
    "global_batch_size",
    "throughput_samples_s",
    "throughput_ci95_samples_s",
    "step_time_p50_ms",
    "epoch_time_s",
    "final_train_loss",
    "eval_accuracy",
    "time_to_accuracy_s",
    "speedup",
    "efficiency",
    "exposed_comm_fraction",
}


def test_import_and_help_load_no_framework():
    code = (
        "import sys, dlscale, dlscale.cli; from dlscale.cli import build_parser; "
        "build_parser(); import dlscale.runner; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'tensorflow', 'mxnet', 'horovod', 'sklearn')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.dist
def test_run_then_ls_then_load_results(tmp_path: Path, cli):
    results = tmp_path / "res"
    run = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "torch-single,torch-ddp",
        "--model",
        "tiny",
        "--workers",
        "1,2",
        "--steps",
        "3",
        "--windows",
        "2",
        "--warmup-steps",
        "1",
        "--json",
        "--results",
        str(results),
    )
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["kind"] for r in lines] == ["run"] * 3 + ["point"] * 3  # each run, then each point
    records = [r for r in lines if r["kind"] == "point"]
    assert [(r["backend"], r["workers"]) for r in records] == [
        ("torch-single", 1),
        ("torch-ddp", 1),
        ("torch-ddp", 2),
    ]
    for record in records:
        assert record.keys() >= JSON_KEYS
        assert record["status"] == "completed"
        assert record["throughput_samples_s"] > 0
    single, _ddp1, ddp2 = records
    # torch-single synchronizes nothing: exposed communication is 0 by definition
    assert single["speedup"] == 1.0 and single["exposed_comm_fraction"] == 0.0
    assert ddp2["baseline_run_ids"] == single["run_ids"] == [single["run_id"]]
    assert ddp2["baseline"] == f"torch-single x1, {single['threads_per_worker']} thr"
    assert ddp2["interval"] == "windows" and ddp2["runs"] == 1  # one run: windows, marked
    assert ddp2["speedup"] == pytest.approx(
        ddp2["throughput_samples_s"] / single["throughput_samples_s"]
    )
    assert ddp2["efficiency"] == pytest.approx(ddp2["speedup"] / 2)
    assert ddp2["global_batch_size"] == 128
    # MFU (docs/metrics.md, "MFU"), recomputed by hand from the facts beside it: tiny's
    # training FLOPs per image, the images per second, the peak of each of the 2 workers
    flops = 3 * MODELS.get("tiny").forward_flops_per_sample
    assert ddp2["train_flops_per_sample"] == flops
    threads = ddp2["threads_per_worker"]
    assert ddp2["peak_basis"].startswith(f"of measured fp32 matmul peak, {threads} thread")
    assert ddp2["mfu"] == pytest.approx(
        flops * ddp2["throughput_samples_s"] / (2 * ddp2["peak_flops_per_worker"])
    )
    assert 0 < ddp2["mfu"] < 1 and ddp2["mfu_missing"] is None
    assert ddp2["rss_peak_bytes"] > 50 * 2**20  # a torch process holds more than 50 MiB
    assert "skipped" not in run.stderr  # torch-single at 2 workers: the grid's shape, unsaid
    # A rerun deletes only the names a run writes (store/rundir.py): every file these real
    # runs left must be on that list, or a rerun would keep a previous attempt's file.
    from dlscale.store.rundir import is_output

    for run_dir in (p for p in results.iterdir() if p.is_dir()):
        left = [p.name for p in run_dir.iterdir() if not is_output(p.name, set())]
        assert left == [], (run_dir, left)  # the lock too is gone once the point ended

    # --wide: every run id whole (a narrow table shows each id's end, and a loaded machine's
    # '!' column may be what makes it narrow)
    listing = cli("ls", "runs", "--wide", "--results", str(results))
    assert listing.returncode == 0
    for record in records:
        assert record["run_id"] in listing.stdout
    narrow = cli("ls", "runs", "--results", str(results), env={"COLUMNS": "100"})
    for record in records:
        assert record["run_id"][-10:] in narrow.stdout

    frame = dlscale.load_results(results)
    assert len(frame) == 3
    assert set(frame["run_id"]) == {r["run_id"] for r in records}
    assert {"throughput_samples_s", "speedup", "efficiency", "torch_version", "cpu_model"} <= set(
        frame.columns
    )

    table = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "torch-single,torch-ddp",
        "--model",
        "tiny",
        "--workers",
        "1,2",
        "--steps",
        "3",
        "--windows",
        "2",
        "--warmup-steps",
        "1",
        "--results",
        str(results),
    )
    assert table.returncode == 0
    assert table.stderr.count("already completed") == 3
    assert (
        "speedup" in table.stdout and "img/s" in table.stdout and "docs/metrics.md" in table.stdout
    )
    # what it printed is kept whole: the points file, at full precision
    (points,) = results.glob("points-*.json")
    kept = json.loads(points.read_text())["points"]
    (ddp2,) = [p for p in kept if p["config"]["workers"] == 2]
    (shown,) = [r for r in records if r["kind"] == "point" and r["workers"] == 2]
    assert ddp2["speedup"] == shown["speedup"] and f"{ddp2['speedup']:.2f}x" in table.stdout


def test_dry_run_prints_commands_and_launches_nothing(tmp_path: Path, cli):
    result = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--model",
        "tiny",
        "--backend",
        "torch-ddp",
        "--workers",
        "2",
        "--dry-run",
        "--results",
        str(tmp_path / "r"),
    )
    assert result.returncode == 0, result.stderr
    assert "RANK=1" not in result.stdout and "-m dlscale.worker" in result.stdout
    assert result.stdout.startswith("# study quick: torch-ddp at 2 workers\n# 1 points x 1 run(s)")
    assert result.stderr == ""  # nothing raw on stderr
    assert not (tmp_path / "r").exists()
    verbose = cli(*result.args[3:], "--verbose")  # each rank's environment and files
    assert verbose.returncode == 0 and "RANK=1" in verbose.stdout


def test_a_presets_dry_run_opens_with_a_summary_naming_each_variant(tmp_path: Path, cli):
    """nikolaidis2021 at local scale: its points and runs, the time (unknown before a run is
    stored; then from the stored runs), the claims it checks, each variant named; every
    comment line within 100 columns; the commands follow without their environment."""
    args = ("run", "--preset", "nikolaidis2021", "--set", "scale=local",
            "--dry-run", "--results", str(tmp_path / "r"))  # fmt: skip
    first = cli(*args)  # into a pipe: whole lines, for a program that reads them
    assert first.returncode == 0 and first.stderr == "", first.stderr
    lines = first.stdout.splitlines()
    assert lines[1] == "# 25 points x 1 run(s) = 25 runs"
    assert lines[2].startswith("# time: not known before a run of it is stored")
    assert "# checks claim torch-over-tf: TensorFlow trains 2.65x slower" in first.stdout
    assert "#   torch-ps x2 ps_mode=async" in lines and "#   mxnet-kv x1 kvstore=dist_sync" in lines
    assert "OMP_NUM_THREADS" not in first.stdout
    shown = _in_a_terminal(args, columns=100)  # for people: wrapped at words to the terminal
    assert "# 25 points x 1 run(s) = 25 runs" in shown
    assert max(len(line) for line in shown.splitlines() if line.startswith("#")) <= 100
    assert ": torch-ps x2 ps_mode=async resnet44 digits (" in first.stdout  # its plan's header
    # each command continued at its words, a word longer than a line (a path) kept whole
    commands = [line for line in shown.splitlines() if not line.startswith("#")]
    assert any(line.endswith(" \\") for line in commands)
    for line in commands:
        assert len(line) <= 100 or " " not in line.strip().removesuffix(" \\"), line
    pasted = [c for c in first.stdout.splitlines() if not c.startswith("#")]
    assert " ".join(shown.replace(" \\\n    ", " ").splitlines()).count(pasted[0]) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--model", "resnet45"], "unknown model 'resnet45'; did you mean resnet"),
        (["run", "--backend", "torch-dpp"], "unknown backend 'torch-dpp'; did you mean torch-ddp"),
        (["run", "--set", "bucketmb=5"], "unknown key 'bucketmb'; did you mean bucket_mb?"),
        (["run", "--workers", "4..2"], "give A..B (the powers of 2 from A to B"),
        (["run", "--backend", "mpi"], "unknown backend 'mpi'; choose one of:"),
        (["run", "--dataset", "imagenet-22k"], "unknown dataset 'imagenet-22k'; did you mean"),
        (["run", "--workers", "0"], "workers must be an integer >= 1"),
        (["run", "--workers", "two"], "workers must be int"),
        (["run", "--batch-size", "0"], "batch_size must be an integer >= 1"),
        (["run", "--target-accuracy", "1.5"], "target_accuracy must be in (0, 1]"),
        (["run", "--target-accuracy", "0"], "target_accuracy must be in (0, 1]"),
        (["run", "missing-study.toml"], "study file missing-study.toml does not exist"),
        (["run", "--set", "modle=tiny"], "unknown key 'modle'"),
        (["run", "--epochs", "1", "--steps", "5"], "not both"),
        (["run", "--scaling", "strong", "--workers", "1,3"], "divisible"),
        (["run", "--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"], "/nonexistent"),
        (["run", "--lr", "nan"], "lr must be a finite number"),
        (["run", "--set", "timeout_s=inf"], "timeout_s must be a finite number"),
        (["run", "--set", "bucket_mb=nan"], "bucket_mb must be a finite number"),
        (["run", "--set", "compression=zip"], "accepts compression = none, fp16, bf16, powersgd"),
        (
            ["run", "--backend", "torch-ddp", "--set", "ps_mode=async"],
            "ps_mode: not an option of backend torch-ddp",
        ),
    ],
)
def test_bad_input_gets_one_clear_line_and_exit_2(tmp_path: Path, cli, args, message):
    result = cli(*args, "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("dlscale: error:")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()  # nothing was launched


def test_unreadable_study_file(tmp_path: Path, cli):
    study = tmp_path / "s.toml"
    study.write_text("workers = [1, 2\n")
    result = cli("run", str(study))
    assert result.returncode == 2 and "not valid TOML" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.dist
def test_ls_and_env(cli):
    listed = {}
    for what, expected in (
        ("backends", "torch-ddp"),
        ("datasets", "cifar10"),
        ("launchers", "local"),
        ("models", "resnet44"),
    ):
        result = cli("ls", what)
        assert result.returncode == 0, result.stderr
        assert expected in result.stdout
        listed[what] = result.stdout
    assert "0.66" in listed["models"]  # resnet44 parameters in millions
    env = cli("env", "--json")
    assert env.returncode == 0
    assert json.loads(env.stdout)["cpu_cores_logical"] >= 1


def test_the_keys_are_listed_once_each_wrapped_with_one_default_and_the_bare_runs_own(cli):
    listed = cli("run", "--keys", env={"COLUMNS": "100"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    entries: dict[str, str] = {}
    key = ""
    for line in lines:
        if line.startswith("  ") and not line.startswith("   "):
            key = line.split()[0]
            assert key not in entries, f"{key} listed twice"
            entries[key] = line
        elif line.startswith("   ") and key:
            entries[key] += " " + line.strip()
    assert {"weights", "compression", "bucket_mb", "placement", "repeats", "steps"} <= set(entries)
    for text in entries.values():
        assert text.count("(default") <= text.count(" | ") + 1, text  # once per declaration
    assert "which sets" in listed.stdout and "steps=8" in listed.stdout
    assert "repeats=3" in listed.stdout


def test_ls_backends_is_one_row_each_at_100_columns_and_one_in_full_by_name(cli):
    """Every name one types whole, one line per backend, no line over 100 columns; the options
    and the install in ``ls backends NAME``; a typo gets the name it missed."""
    from dlscale.contract.backends import BACKENDS

    listed = cli("ls", "backends", env={"COLUMNS": "100"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    names = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert names == BACKENDS.names()
    one = cli("ls", "backends", "horovod-torch", env={"COLUMNS": "100"})
    assert one.returncode == 0 and max(map(len, one.stdout.splitlines())) <= 100
    assert "--set fusion_mb" in one.stdout and "installed here" in one.stdout
    typo = cli("ls", "backends", "torch-dpp")
    assert typo.returncode == 2 and "did you mean torch-ddp" in typo.stderr


def test_ls_models_is_one_row_each_at_100_columns_and_one_in_full_by_name(cli):
    """Every model's name whole, one line each, its size and cost; its twins, BatchNorm and
    dropout in ``ls models NAME`` (any case); a NAME where none is taken is refused."""
    from dlscale.contract.models import MODELS

    listed = cli("ls", "models", env={"COLUMNS": "100"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    rows = [line.split("│")[1:-1] for line in lines if line.startswith("│ ")]
    names = [row[0].strip() for row in rows if len(row) == 6]
    assert names == MODELS.names()
    (resnet44,) = [row for row in rows if row[0].strip() == "resnet44"]
    assert [cell.strip() for cell in resnet44[1:5]] == ["0.66", "0.194", "3x32x32", "10"]
    one = cli("ls", "models", "ResNet44", env={"COLUMNS": "100"})
    assert one.returncode == 0 and max(map(len, one.stdout.splitlines())) <= 100
    for field in ("twins", "BatchNorm", "dropout", "0.66 M"):
        assert field in one.stdout
    (twins,) = [line for line in one.stdout.splitlines() if "twins" in line]
    # in the order the plug-ins registered them, which the entry points' order sets
    assert set(twins.strip("│ ").split("│")[1].strip().split(", ")) == {
        "torch",
        "tensorflow",
        "mxnet",
        "jax",
    }
    for args, said in (
        (("models", "resnet4"), "did you mean resnet44"),
        (("datasets", "digits"), "ls datasets takes no NAME ('digits')"),
    ):
        refused = cli("ls", *args)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


@pytest.mark.dist
def test_a_paper_preset_runs_at_local_scale_with_the_users_flags_on_top(tmp_path: Path, cli):
    """The mahon2020 preset at scale = local (digits, CPU, local launcher, a few steps),
    narrowed to one point by flags, which override the scale's keys; at full scale it asks for
    the data it needs in one line. `compression=none` narrows the preset's Horovod fp16 axis,
    which torch-ddp's own fp16 hook comes with."""
    study = ("--preset", "mahon2020")
    run = cli(
        "run", *study, "--set", "scale=local", "--backend", "torch-ddp", "--workers", "2",
        "--set", "compression=none", "--json", "--results", str(tmp_path),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    records = list(map(json.loads, run.stdout.splitlines()))
    (point,) = [r for r in records if r["kind"] == "point"]
    assert point["status"] == "completed" and point["dataset"] == "digits"
    # the preset's published claim: 12 GPUs, which 2 CPU processes cannot check
    (claim,) = [r for r in records if r["kind"] == "claim"]
    assert claim["id"] == "ddp-12-gpus" and claim["verdict"] == "cannot be measured here"
    assert claim["why"].startswith("needs workers=12, device=cuda; this study's runs of it have")
    report = cli("report", "--results", str(tmp_path), "--out", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr
    assert "study mahon2020: the paper's claims" in report.stdout
    assert "cannot be measured here" in report.stdout and "10.11x" in report.stdout
    page = (tmp_path / "r.html").read_text()
    assert 'data-verdict="cannot be measured here"' in page
    assert point["model"] == "resnet44" and point["batch_size_per_worker"] == 16
    (stored,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/result.json")]
    assert stored["study"] == "mahon2020" and stored["config"]["steps"] == 4
    full = cli("run", *study, "--results", str(tmp_path / "full"), env={"SLURM_CONF": "/none"})
    assert full.returncode == 2 and "Traceback" not in full.stderr  # planned from the nodes:
    assert "cannot ask Slurm for its nodes' CPUs and GPUs" in full.stderr  # which it needs
    nodes = ("--set", "cpus_per_node=16", "--set", "gpus_per_node=4")
    full = cli("run", *study, *nodes, "--results", str(tmp_path / "full"))
    assert full.returncode == 2 and "Traceback" not in full.stderr
    assert "cifar-10-batches-py does not exist" in full.stderr
    wrong = cli("run", *study, "--set", "scale=huge", "--dry-run")
    assert wrong.returncode == 2 and "no scale 'huge'; it has: full, local" in wrong.stderr


@pytest.mark.dist
def test_malik2018_takes_an_imagenet_folder_and_draws_loss_against_epochs(tmp_path: Path, cli):
    """The paper's second input: JPEG class folders, trained by epochs (here the preset's
    imagenet-local scale narrowed to one point), and the report's loss and accuracy against
    epochs from the evaluation after each epoch."""
    data = write_folder(tmp_path / "imagenet", classes=4, per_class=8)
    results, page = tmp_path / "res", tmp_path / "r.html"
    run = cli(
        "run", "--preset", "malik2018", "--set", "scale=imagenet-local",
        "--data-dir", str(data), "--model", "googlenet", "--backend", "tf-single",
        "--workers", "1", "--json", "--results", str(results),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (stored,) = [json.loads(p.read_text()) for p in results.glob("*/result.json")]
    assert stored["status"] == "completed" and stored["config"]["dataset"] == "imagenet-subset"
    history = stored["metrics"]["eval_history"]
    assert [h["epoch"] for h in history] == [1, 2] and all(h["loss"] > 0 for h in history)
    report = cli("report", "--results", str(results), "--out", str(page))
    assert report.returncode == 0, report.stderr
    assert 'data-figure="loss_by_epoch"' in page.read_text()


def _in_a_terminal(args: tuple[str, ...], columns: int) -> str:
    """What ``dlscale ARGS`` prints in a terminal of ``columns`` columns (a pseudo-terminal),
    its colours taken away."""
    import fcntl
    import os
    import pty
    import re
    import struct
    import termios

    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "dlscale", *args], stdout=side,
                            stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the command closed its terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=120) == 0
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
