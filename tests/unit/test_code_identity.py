"""The runs table's ``code``: the dlscale version and the commit it was installed from (the
version alone without git), and the engine's fingerprint under its own name (``engine code``);
a value planted in a shared store is cut and shown literally."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import dlscale.runtime.environment
from dlscale.cli import main as dlscale_main
from dlscale.report.columns import COLUMNS
from dlscale.report.html import runs_table
from dlscale.report.layout import find_column, human_layout

COMMIT = "b2b2af9d1c0ffee0123456789abcdef012345678"


def _row(**environment) -> dict:
    return {"backend": "toy", "workers": 1, "status": "completed", "config": {"backend": "toy"},
            "environment": environment}  # fmt: skip


@pytest.mark.parametrize(
    ("environment", "said"),
    [
        ({"dlscale_version": "0.1.0", "git_commit": COMMIT}, "0.1.0 at b2b2af9"),
        ({"dlscale_version": "0.1.0", "git_commit": COMMIT + "+dirty"}, "0.1.0 at b2b2af9+changes"),
        ({"dlscale_version": "0.1.0", "git_commit": None}, "0.1.0"),  # a wheel: no git
        ({"dlscale_version": "0.1.0"}, "0.1.0"),
    ],
)
def test_code_is_the_version_and_the_commit_it_was_installed_from(environment, said):
    row = _row(**environment, engine_code="685aefa012345678")
    assert find_column("code").text(row) == said
    assert find_column("engine code").text(row) == "685aefa"
    assert find_column("engine_code").export(row) == "685aefa"
    _, caption = human_layout([row, row])
    assert f"code {said}" in caption
    assert not any("685aefa" in item for item in caption)  # the fingerprint: --wide, ls runs


def test_runs_made_by_different_code_say_how_many():
    one = {"dlscale_version": "0.1.0", "git_commit": COMMIT}
    rows = [_row(**one), _row(**{**one, "git_commit": "0" * 40})]
    assert find_column("code").text({"run_rows": rows}) == "mixed (2)"


@pytest.mark.parametrize(
    "planted",
    ["b" * 1_000_000, "<script>alert(1)</script>", "[bold]x[/bold]\x1b[2J", 10**5000],
    ids=["megabyte", "markup", "escapes", "huge-integer"],
)
def test_a_planted_version_commit_or_fingerprint_is_cut_and_shown_literally(planted):
    row = _row(dlscale_version=planted, git_commit=planted, engine_code=planted)
    for name in ("code", "engine_code"):
        text = find_column(name).text(row)
        assert len(text) < 80 and "\x1b" not in text, text
    page = runs_table([row, row])
    assert "<script>alert" not in page and "\x1b" not in page and len(page) < 20_000


def test_explain_defines_both(capsys):
    assert dlscale_main(["explain", "code"]) == 0
    code = capsys.readouterr().out
    assert "commit it was installed from" in " ".join(code.split())
    assert dlscale_main(["explain", "engine_code"]) == 0
    engine = " ".join(capsys.readouterr().out.split())
    assert "fingerprint of the engine's code" in engine and "resume" in engine
    assert [c.name for c in COLUMNS].count("engine_code") == 1


def _git(where: Path, *args: str) -> None:
    identity = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", *identity, *args], cwd=where, check=True, capture_output=True)


def test_the_commit_is_recorded_only_for_a_checkout_dlscale_is_tracked_in(
    tmp_path: Path, monkeypatch
):
    """A wheel installed into a virtual environment inside another repository is not that
    repository's commit."""
    package = tmp_path / "src" / "dlscale"
    (package / "runtime").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    module = package / "runtime" / "environment.py"
    monkeypatch.setattr(dlscale.runtime.environment, "__file__", str(module))
    _git(tmp_path, "init", "-q")
    (tmp_path / "other.txt").write_text("x")
    _git(tmp_path, "add", "other.txt")
    _git(tmp_path, "commit", "-q", "-m", "other")
    assert dlscale.runtime.environment.git_commit() is None  # untracked here
    _git(tmp_path, "add", "src")
    _git(tmp_path, "commit", "-q", "-m", "dlscale")
    commit = dlscale.runtime.environment.git_commit()
    assert commit is not None and len(commit) == 40 and "+dirty" not in commit
    (package / "__init__.py").write_text("changed = 1\n")
    assert dlscale.runtime.environment.git_commit() == commit + "+dirty"
