"""The typed Result: one declaration the writer, the store, its migrations and the readers share."""

import json
from pathlib import Path

import pytest

from dlscale.contract.result import RESULT, Result
from dlscale.contract.run_config import RunConfig
from dlscale.store import RunStore


def written(tmp_path: Path, **changes) -> tuple[Path, dict]:
    """A result of a torch-ddp point stored, and its document with ``changes`` made."""
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=2, bucket_mb=4.0)
    result = Result(
        run_id=config.run_id(),
        status="completed",
        framework="torch",
        config=config.to_dict(),
        command=("dlscale", "run", "--workers", "2"),
        metrics={"throughput_samples_s": 10.0, "throughput_windows_samples_s": [10.0]},
        environment={"packages": {"torch": "2.13.0+cpu"}, "gpu_names": []},
        finished_at=1.7e9,
    )
    store = RunStore(tmp_path)
    store.write_result(result.run_id, result)
    path = store.result_path(result.run_id)
    document = {**json.loads(path.read_text()), **changes}
    path.write_text(json.dumps(document))
    return path, document


def test_a_stored_result_reads_back_typed_and_its_row_is_flat(tmp_path: Path):
    path, _ = written(tmp_path)
    (result,) = RunStore(tmp_path).results()
    assert isinstance(result, Result) and result.completed
    assert result.command == ("dlscale", "run", "--workers", "2")
    assert result.options["backend"]["bucket_mb"] == 4.0 and "bucket_mb" not in result.config
    assert result.facts.version == "2.13.0+cpu" and result.facts.gpus == ()
    row = result.row()
    assert row["config"]["bucket_mb"] == 4.0 and row["config"]["workers"] == 2
    assert row["config_options"]["backend"]["bucket_mb"] == 4.0
    assert row["facts"] == result.facts and row["command"] == list(result.command)
    # what the store writes is the document: the same bytes once read and written again
    before = path.read_bytes()
    RunStore(tmp_path).write_result(result.run_id, result)
    assert json.loads(path.read_bytes()) == json.loads(before)


def test_a_key_no_field_declares_is_left_out_and_a_hand_written_command_kept(tmp_path: Path):
    written(tmp_path, later_key={"x": 1}, command="dlscale run; touch PWNED")
    (result,) = RunStore(tmp_path).results()
    assert "later_key" not in result.row()
    assert result.command == "dlscale run; touch PWNED"  # shown quoted as one word


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("duration_s", -1.0, "duration_s is -1.0, not a number in [0, 1e+15] s"),
        ("reference", "yes", "reference is 'yes', not true or false"),
        ("threads_per_worker", 1.5, "threads_per_worker is 1.5, not a whole number"),
        ("started_at", 1e300, "started_at is 1e+300"),
    ],
)
def test_each_declared_field_is_checked_on_read(tmp_path: Path, field, value, said):
    assert field in RESULT  # declared on the Result's field, checked by the store
    path, _ = written(tmp_path, **{field: value})
    warnings: list[str] = []
    assert RunStore(tmp_path, on_warning=warnings.append).results() == []
    (message,) = warnings
    assert str(path) in message and said in message
