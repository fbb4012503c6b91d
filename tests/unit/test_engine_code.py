"""The code a run was made by (issue 45, "no stale reuse"): a fingerprint of its engine's
files, which moves with them and only with them."""

import shutil
from pathlib import Path

import pytest

from dlscale.contract import engine_code as module
from dlscale.contract.engine_code import engine_code, other_code

SOURCE = Path(module.__file__).resolve().parents[1]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of dlscale's source that the fingerprint reads instead of the real one."""
    copy = tmp_path / "dlscale"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(module, "PACKAGE", copy)
    return copy


def test_the_fingerprint_moves_with_the_engines_files_and_only_them(package: Path):
    before = {b: engine_code(b) for b in ("torch-ddp", "torch-single", "horovod-torch", "tf-ps")}
    assert all(len(code) == 16 for code in before.values())
    assert before["torch-ddp"] == before["torch-single"]  # one folder, one code
    assert len({before["torch-ddp"], before["horovod-torch"], before["tf-ps"]}) == 3
    with open(package / "report" / "finding.py", "a") as handle:  # the parent's reading
        handle.write("\n# a comment\n")
    assert {b: engine_code(b) for b in before} == before
    with open(package / "frameworks" / "torch" / "ddp.py", "a") as handle:
        handle.write("\n# a fix\n")
    after = {b: engine_code(b) for b in before}
    assert after["torch-ddp"] != before["torch-ddp"] and after["tf-ps"] == before["tf-ps"]
    assert after["horovod-torch"] != before["horovod-torch"]  # Horovod runs torch's folder
    (package / "runtime" / "schedule.py").write_text("# what every worker runs\n")
    assert engine_code("tf-ps") != before["tf-ps"]
    assert engine_code("no-such-backend") is None


def test_other_code_is_said_in_words():
    now = engine_code("torch-ddp")
    assert other_code({"engine_code": now, "dlscale_version": "0.1.0"}, "torch-ddp") is None
    assert other_code({"engine_code": "f" * 16, "dlscale_version": "0.0.9"}, "torch-ddp") == (
        f"made by dlscale 0.0.9 with torch-ddp's engine code {'f' * 16}, which is {now} now"
    )
    assert other_code({}, "torch-ddp") == (
        "made by an older dlscale, before runs recorded their engine's code"
    )
    assert other_code({}, "no-such-backend") is None  # nothing to compare with
