"""Settings and values as an attacker gives them (issue 70): contradictions refused where
settings are checked (so a dry run says them, and no worker starts), numbers typed by a person
read through one ASCII parser, predictions that stay finite, commands that paste back as the
same words, an output that cannot encode ``±``. Each is one line and exit 2, or works."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dlscale.cli import main
from dlscale.config import RunConfig
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.text import shell_command
from dlscale.report.layout import human_layout
from tests.unit.test_store_damage import good_result

PREDICT = ("predict", "--bandwidth", "10Gbit", "--compute-ms", "10", "--gradient-bytes", "1e6")


def one_error(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    """The command's one line: exit 2, nothing but ``dlscale: error: ...`` on stderr."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:  # argparse's own refusal of a flag's value
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dlscale: error:"), captured
    assert "Traceback" not in captured.err and len(lines[0]) < 400
    return lines[0]


# ------------------------------------------------------------------------------------------
# contradictions: one place, before anything starts


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"backend": "torch-single", "amp": "bf16"}, "amp = bf16 cannot go together"),
        ({"backend": "torch-ddp", "workers": 2, "compression": "fp16"}, "compression = fp16"),
        ({"backend": "torch-ring", "workers": 2, "compression": "bf16"}, "compression = bf16"),
        ({"backend": "horovod-torch", "workers": 2, "compression": "fp16"}, "compression = fp16"),
        ({"backend": "horovod-tf", "workers": 2, "compression": "fp16"}, "compression = fp16"),
    ],
)
def test_float64_beside_fewer_bits_is_refused_when_the_point_is_built(settings, said):
    """It failed inside the worker (amp) or ran silently with fp16 gradients (compression)."""
    with pytest.raises(UnsupportedPoint, match=said) as error:
        RunConfig.make(precision="float64", model="tiny", **settings)
    assert "set " in str(error.value) and "precision = float32" in str(error.value)
    RunConfig.make(precision="float32", model="tiny", **settings)  # each alone is fine


def test_a_dry_run_says_the_contradiction_and_a_grid_skips_it(capsys):
    line = one_error(capsys, "run", "--backend", "torch-ddp", "--workers", "2", "--set",
                     "precision=float64", "--set", "compression=fp16", "--dry-run")  # fmt: skip
    assert "precision = float64 and compression = fp16 cannot go together" in line
    grid = ("precision=float32,float64", "--set", "compression=fp16", "--dry-run")
    code = main(["run", "--backend", "torch-ddp", "--workers", "2", "--set", *grid])
    captured = capsys.readouterr()
    assert code == 0 and "skips torch-ddp at 2 worker(s): precision = float64" in captured.out


def test_micro_batches_that_do_not_divide_the_batch_are_refused_before_launch():
    with pytest.raises(UnsupportedPoint, match="backward_passes_per_step = 3 does not divide"):
        RunConfig.make(backend="horovod-torch", model="tiny", workers=2, batch_size=8,
                       backward_passes_per_step=3)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--backend", "tf-ps", "--set", "ps_mode=async"), "leave out --set ps_mode=async"),
        (("--backend", "tf-ps", "--device", "cuda"), "CPU collectives only"),
        (("--backend", "tf-mwms", "--device", "cuda"), "CPU collectives only"),
        (("--backend", "mxnet-kv", "--set", "kvstore=dist_async"), "not dist_async"),
    ],
)
def test_a_microbench_its_kernel_cannot_run_is_refused_before_anything_starts(
    capsys, tmp_path: Path, argv, said
):
    """tf-ps with ps_mode=async started 4 TensorFlow processes, then failed in the chief."""
    results = tmp_path / "res"
    line = one_error(capsys, "microbench", "--workers", "2", "--sizes", "4", *argv,
                     "--results", results)  # fmt: skip
    assert said in line and not results.exists()


# ------------------------------------------------------------------------------------------
# numbers typed by a person


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--servers", "9" * 400), "--servers: '999"),
        (("--servers", "0"), "--servers: '0' is not a whole number from 1"),
        (("--workers", "٣"), "--workers '٣'"),
        (("--workers", " 3 "), "--workers ' 3 '"),
        (("--batch", "٣٢"), "--batch '٣٢'"),
        (("--messages", "٣"), "--messages must be a whole number"),
        (("--messages", " 3 "), "--messages must be a whole number"),
        (("--messages", "9" * 5000), "--messages must be a whole number"),
        (("--target-efficiency", "nan"), "--target-efficiency: 'nan'"),
        (("--target-efficiency", "0.٥"), "--target-efficiency"),
        (("--backward-share", "2"), "--backward-share: '2' is not a number in [0, 1]"),
    ],
)
def test_predicts_numbers_are_one_line_never_a_traceback_or_an_echo(capsys, argv, said):
    line = one_error(capsys, *PREDICT, *argv)
    assert said in line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--gradient-bytes", "1e308"), "--gradient-bytes: '1e308' is not a number in [0, 1e+15]"),
        (("--compute-ms", "1e-320"), "--compute-ms: '1e-320' is not a number"),
        (("--compute-ms", "inf"), "--compute-ms: 'inf'"),
    ],
)
def test_absurd_profiles_are_refused_not_printed_as_nan(capsys, argv, said):
    """They printed ``nanx nan%``, NaN in --json (no valid JSON), and a target efficiency
    "found" 1e+06 Tbit/s."""
    line = one_error(capsys, "predict", "--bandwidth", "10Gbit", "--workers", "2,4",
                     "--compute-ms", "10", "--gradient-bytes", "1e6", *argv)  # fmt: skip
    assert said in line


def test_the_extremes_allowed_give_finite_json_and_no_bandwidth_beyond_any_link(capsys):
    code = main(["predict", "--bandwidth", "8kbit", "--latency", "10s", "--workers", "1,1000000",
                 "--compute-ms", "1e-6", "--gradient-bytes", "1e15", "--servers", "1000000",
                 "--messages", "1000000", "--target-efficiency", "0.99", "--json"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    records = [json.loads(line, parse_constant=pytest.fail) for line in out.splitlines()]
    assert {r["kind"] for r in records} == {"prediction", "bandwidth_needed"}
    assert all(r["bandwidth_bit_s"] is None for r in records if r["kind"] == "bandwidth_needed")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--workers", "٣"), "--workers '٣'"),
        (("--iterations", "9" * 5000), "--iterations: '999"),
        (("--sizes", "5,7"), "message size '5' is 5 bytes, not a whole number of float32"),
    ],
)
def test_microbench_numbers_are_one_line(capsys, tmp_path: Path, argv, said):
    line = one_error(capsys, "microbench", *argv, "--results", tmp_path / "r")
    assert said in line


def test_a_study_key_in_other_digits_is_refused(capsys):
    assert "workers must be int, got '٣'" in one_error(capsys, "run", "--workers", "٣")
    assert "lr must be float" in one_error(capsys, "run", "--lr", "0.١")


def test_the_hosts_count_of_5000_digits_is_cut(capsys):
    line = one_error(capsys, "hosts", "start", "/tmp/x", "--cpus", "9" * 5000)
    assert "--cpus: '999" in line and "..." in line


# ------------------------------------------------------------------------------------------
# the interpreter, the output, the printed commands


@pytest.mark.parametrize("python", ["/etc/passwd", "/etc"])
def test_doctor_refuses_an_interpreter_that_is_no_program_as_run_does(capsys, python):
    """It was a PermissionError traceback; `dlscale run` refuses the same value in one line."""
    doctor = one_error(capsys, "doctor", "--set", f"python={python}")
    run = one_error(capsys, "run", "--set", f"python={python}", "--dry-run")
    assert doctor == run and f"python = '{python}'" in doctor


@pytest.mark.parametrize(
    "env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "POSIX", "PYTHONUTF8": "0"}]
)
def test_an_output_that_cannot_encode_plus_minus_still_lists_the_runs(tmp_path, cli, env):
    from dlscale.store import RunStore

    for workers in (1, 2):
        RunStore(tmp_path).write_result(*good_result(workers))
    run = cli("ls", "runs", "--results", str(tmp_path), env={"LANG": "", **env})
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "+/-95%" in run.stdout


def test_a_printed_command_with_a_line_break_pastes_back_as_the_same_words(tmp_path: Path):
    """Slurm's placement runs as ``bash -c 'lines'`` inside an allocation; the dry run printed
    its line breaks as ``\\n``, so the pasted command was another one."""
    argv = ["bash", "-c", 'echo placed\nexec "$@"', "dlscale-step", "printf", "%s|", "a b", "$(x)"]
    printed = shell_command(argv)
    assert "\n" not in printed and printed.startswith("bash -c $'echo placed\\nexec \"$@\"'")
    done = subprocess.run(["bash", "-c", printed], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout == "placed\na b|$(x)|" and not list(tmp_path.iterdir())


def test_the_messages_hint_quotes_the_results_path(capsys, tmp_path: Path):
    hostile = tmp_path / "$(touch PWNED) r"
    hostile.mkdir()
    line = one_error(capsys, *PREDICT, "--messages", "jax-dp", "--results", hostile)
    assert f"--results '{hostile}'" in line


def test_a_study_all_in_float64_says_so_under_its_table():
    rows = []
    for workers in (1, 2):
        _, result = good_result(workers)
        row = result.row()
        row["config"] = {**row["config"], "precision": "float64"}
        rows.append(row)
    _, caption = human_layout(rows)
    assert "precision float64" in caption
    rows[0]["config"] = {**rows[0]["config"], "precision": "float32"}
    columns, caption = human_layout(rows)
    assert "precision float64" not in caption and "settings" in [c.name for c in columns]


def test_an_implausible_stored_network_fit_is_said_where_it_is_used(capsys, tmp_path: Path):
    from tests.unit.test_store_values import _microbench

    path = _microbench(tmp_path, "microbench-x", fit={"alpha_s": 1e-5, "beta_s_per_byte": 1e-300,
                                                       "median_error": 0.01})  # fmt: skip
    code = main(["predict", "--network-from", str(tmp_path), "--workers", "2", "--compute-ms",
                 "5", "--gradient-bytes", "1e6"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("dlscale: warning: ") and str(path) in line
    assert "more than any link or memory moves" in line


def test_a_profile_with_a_denormal_step_is_refused_by_any_caller():
    with pytest.raises(UserError, match="compute_s must be from"):  # it was accepted: > 0
        from dlscale.perfmodel.predict import Profile

        Profile(compute_s=1e-320, batch=1, gradient_bytes=1.0)
