"""Whatever a user types, `dlscale run` answers with a plan or one line and exit 2 (hypothesis).

The study-file loader and the command line are driven in-process with generated values (any
key, any TOML value, NaN and infinities, random text, random flags), under --dry-run so that
nothing is launched. A traceback (any exception other than the CLI's exit) fails the test.
"""

import json
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlscale.cli import main
from dlscale.config.study import valid_keys

KEYS = [k for k in valid_keys() if k not in ("resource_guard", "device")]
"""resource_guard=false with a huge worker grid would plan millions of processes, and
device=cuda probes the interpreter (seconds); both have their own tests."""

scalars = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(alphabet=string.printable, max_size=12),
    st.sampled_from(["resnet44", "tiny", "torch-ddp", "torch-ps", "none", "fp16", "cpu", "weak"]),
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a TOML basic string


study_values = st.one_of(scalars, st.lists(scalars, min_size=0, max_size=3))
study_docs = st.dictionaries(
    st.one_of(st.sampled_from(KEYS), st.from_regex(r"[a-z_]{1,10}", fullmatch=True)),
    study_values,
    max_size=5,
)

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_plan_or_one_line(code: object, err: str) -> None:
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err, err
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("dlscale: error:")]
        assert len(errors) == 1, err
        assert all(line.startswith("dlscale: ") for line in err.splitlines()), err


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    try:
        code: object = main(argv)
    except SystemExit as exit_:  # argparse's own exit (bad flags)
        code = exit_.code
    return code, capsys.readouterr().err


@FUZZ
@given(doc=study_docs)
def test_any_study_file_plans_or_gets_one_line(doc, tmp_path: Path, capsys):
    study = tmp_path / "study.toml"
    study.write_text("".join(f"{key} = {toml_value(value)}\n" for key, value in doc.items()))
    code, err = run_cli(["run", str(study), "--dry-run", "--results", str(tmp_path / "r")], capsys)
    assert_plan_or_one_line(code, err)


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text_as_a_study_file_gets_one_line(text, tmp_path: Path, capsys):
    study = tmp_path / "study.toml"
    study.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    code, err = run_cli(["run", str(study), "--dry-run", "--results", str(tmp_path / "r")], capsys)
    assert_plan_or_one_line(code, err)


flags = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "--model",
                "--backend",
                "--workers",
                "--batch-size",
                "--lr",
                "--epochs",
                "--steps",
                "--dataset",
                "--scaling",
                "--seed",
                "--target-accuracy",
                "--set",
                "--launcher",
            ]
        ),
        st.one_of(
            st.text(alphabet=string.printable, max_size=10),
            st.sampled_from(["1,2", "0", "-1", "nan", "inf", "1e9", "tiny", "torch-ps"]),
            st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.text(max_size=6)),
        ),
    ),
    max_size=4,
)


@FUZZ
@given(pairs=flags)
def test_any_command_line_plans_or_gets_one_line(pairs, tmp_path: Path, capsys):
    argv = ["run", "--dry-run", "--results", str(tmp_path / "r")]
    for flag, value in pairs:
        argv += [flag, value]
    code, err = run_cli(argv, capsys)
    assert_plan_or_one_line(code, err)
