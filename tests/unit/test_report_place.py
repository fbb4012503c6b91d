"""Where `dlscale report` writes the page: into the results directory it reads (beside the runs
it links to) unless ``-o/--out FILE`` says where, the printed ``report:`` line naming the path;
a results directory that cannot be written is one line naming it and the fix."""

from __future__ import annotations

import errno
import shutil
import tempfile
import types
from pathlib import Path

import pytest

import dlscale.contract.files
import dlscale.report.figures
from dlscale.cli import main as dlscale_main

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def results(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the fixture store, and a working directory elsewhere (where the report
    went before)."""
    every = dlscale.report.figures.study_figures
    monkeypatch.setattr(dlscale.report.figures, "study_figures", lambda rows: every(rows)[:2])
    copy = tmp_path / "res"
    shutil.copytree(DATA / "results", copy)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return copy


def _report(capsys, *args: str) -> tuple[int, str, str]:
    code = dlscale_main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("given", ["positional", "--results"])
def test_the_report_goes_into_the_results_directory(results: Path, capsys, given: str):
    args = [str(results)] if given == "positional" else ["--results", str(results)]
    code, out, err = _report(capsys, *args)
    assert code == 0, err
    page = results / "dlscale-report.html"
    assert page.is_file() and "<html" in page.read_text()
    assert f"report: {page} (" in out
    assert list(Path.cwd().iterdir()) == []  # nothing in the working directory


@pytest.mark.parametrize("flag", ["-o", "--out"])
def test_out_writes_where_told(results: Path, tmp_path: Path, capsys, flag: str):
    page = tmp_path / "elsewhere" / "mine.html"
    code, out, err = _report(capsys, str(results), flag, str(page))
    assert code == 0, err
    assert page.is_file() and f"report: {page} (" in out
    assert not (results / "dlscale-report.html").exists()


def test_a_results_directory_that_cannot_be_written_says_so_and_the_fix(
    results: Path, capsys, monkeypatch
):
    """Read-only for this user (faked: the tests may run as root, whom no mode stops)."""

    def mkstemp(*args, **kwargs):
        if Path(kwargs["dir"]) == results:
            raise PermissionError(errno.EACCES, "Permission denied")
        return tempfile.mkstemp(*args, **kwargs)

    fake = types.SimpleNamespace(mkstemp=mkstemp)
    monkeypatch.setattr(dlscale.contract.files, "tempfile", fake)
    code, out, err = _report(capsys, str(results))
    assert code == 2 and "report:" not in out
    (line,) = err.splitlines()
    assert line.startswith(f"dlscale: error: cannot write {results / 'dlscale-report.html'}")
    assert f"results directory {results}" in line and "-o FILE" in line
    assert "Traceback" not in err and not (results / "dlscale-report.html").exists()


def test_a_link_planted_where_the_report_goes_is_refused(results: Path, tmp_path: Path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (results / "dlscale-report.html").symlink_to(victim)
    code, out, err = _report(capsys, str(results))
    assert code == 2 and "report:" not in out
    (line,) = err.splitlines()
    assert f"{results / 'dlscale-report.html'} (the report) is a symbolic link" in line
    assert victim.read_text() == "precious\n"
