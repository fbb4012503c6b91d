"""Outputs that a hostile or unlucky environment cannot damage: every file `dlscale report`
writes is whole or untouched (a full disk), never written through a link planted where it goes,
and every text that reaches a terminal is shown literally (no escape sequence, no reordering,
one line) with every command printed for pasting quoted for the shell."""

from __future__ import annotations

import html
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import dlscale.report.figures
import dlscale.runner
from dlscale.cli import main as dlscale_main
from dlscale.cli.progress import run_study, study_description, study_progress
from dlscale.cli.tables import points_table
from dlscale.config.study import expand
from dlscale.contract.text import shell_command, visible
from dlscale.report.html import build_html
from dlscale.store import read_json, write_json_atomic
from tests.filesystem import fill, small_tmpfs, snapshot
from tests.runs import made_here
from tests.unit.test_report_hostile import _rows, _text, hostile_results

DATA = Path(__file__).resolve().parent.parent / "data"
RAW = ("\x1b]", "\x1b[2J", "\x07", "\x00", "\u202e", "\u2066", "\u200f")
"""What must never reach a terminal raw: an OSC sequence (sets the window title), a screen
clear, BEL, NUL and bidirectional controls (reorder the text around them)."""
NAMES = (
    "x\x1b]0;PWNED\x07\x1b[2J",
    "nul\x00byte",
    "\u202eevil\u2066 rtl\u200f",
    "[bold]loud[/bold] [/x] :smile:",
    "two\nlines\r\u2028",
)
SHELL_PATH = "r es;$(touch PWNED) `touch PWNED2`"
"""A results directory name that runs commands if a printed command is pasted unquoted."""


@pytest.fixture
def few_figures(monkeypatch):
    """Two figures per study (one numeric, one categorical) keep matplotlib's time short."""
    every = dlscale.report.figures.study_figures
    monkeypatch.setattr(dlscale.report.figures, "study_figures", lambda rows: every(rows)[2:4])


def _report(capsys, *args: str) -> tuple[int, str, str]:
    code = dlscale_main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dlscale: error: ") and "Traceback" not in err
    return lines[0]


# --- 1. a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 24 MiB tmpfs of its own, unmounted afterwards."""
    with small_tmpfs(tmp_path / "disk", "24m") as disk:
        yield disk


def test_a_full_disk_replaces_no_report_file(tmp_path: Path, small_disk: Path, capsys, few_figures):
    results = hostile_results(tmp_path / "results", ("fixture",))
    out, md, csv, figures = (small_disk / n for n in ("r.html", "t.md", "t.csv", "figs"))
    every = ["--results", str(results), "--out", str(out), "--markdown", str(md)]
    every += ["--csv", str(csv), "--figures", str(figures)]
    code, _, err = _report(capsys, *every)
    assert code == 0, err
    assert len(list(figures.iterdir())) == 4
    fill(small_disk)
    before = snapshot(small_disk)
    elsewhere = str(tmp_path / "elsewhere.html")
    for flags, victim in (
        (["--out", str(out)], out),
        (["--out", elsewhere, "--markdown", str(md)], md),
        (["--out", elsewhere, "--csv", str(csv)], csv),
        (["--out", elsewhere, "--figures", str(figures)], figures),
    ):
        code, _, err = _report(capsys, "--results", str(results), *flags)
        assert code == 2, (flags, err)
        line = _one_error_line(err)
        assert line.startswith(f"dlscale: error: no space left on the device writing {victim}")
        assert "nothing was replaced" in line
        # every earlier file byte for byte, and no temporary file left beside them
        assert snapshot(small_disk) == before, flags


# --- 2. links where an output goes --------------------------------------------------------------


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    return victim


def test_a_link_planted_in_the_figures_directory_is_refused(tmp_path: Path, capsys, few_figures):
    """The link takes the name of the last figure file: refused before anything is written."""
    results = hostile_results(tmp_path / "results", ("fixture",))
    keys = [f.key for f in dlscale.report.figures.study_figures(_rows(results))]
    figures = tmp_path / "figs"
    figures.mkdir()
    victim = _victim(tmp_path)
    link = figures / f"fixture-{keys[-1]}.pdf"
    link.symlink_to(victim)
    out = tmp_path / "r.html"
    code, _, err = _report(
        capsys, "--results", str(results), "--out", str(out), "--figures", str(figures)
    )
    assert code == 2
    line = _one_error_line(err)
    assert f"{link} (a figure of --figures) is a symbolic link (to {victim})" in line
    assert victim.read_text() == "precious\n" and link.readlink() == victim
    assert [p.name for p in figures.iterdir()] == [link.name] and not out.exists()


@pytest.mark.parametrize("dangling", [False, True])
def test_a_figures_directory_that_is_a_link_is_refused(tmp_path: Path, capsys, dangling: bool):
    results = hostile_results(tmp_path / "results", ("fixture",))
    target = tmp_path / ("nowhere" if dangling else "victim-dir")
    if not dangling:
        target.mkdir()
        (target / "keep.txt").write_text("precious\n")
    figures = tmp_path / "figs"
    figures.symlink_to(target, target_is_directory=True)
    code, _, err = _report(
        capsys,
        "--results",
        str(results),
        "--out",
        str(tmp_path / "r.html"),
        "--figures",
        str(figures),
    )
    assert code == 2
    assert f"{figures} (--figures) is a symbolic link" in _one_error_line(err)
    assert figures.is_symlink() and not (tmp_path / "r.html").exists()
    if dangling:
        assert not target.exists()  # never made through the link
    else:
        assert snapshot(target) == {"keep.txt": b"precious\n"}


@pytest.mark.parametrize("flag", ["--out", "--markdown", "--csv"])
@pytest.mark.parametrize("dangling", [False, True])
def test_an_output_file_that_is_a_link_is_refused(
    tmp_path: Path, capsys, flag: str, dangling: bool
):
    results = hostile_results(tmp_path / "results", ("fixture",))
    victim = tmp_path / "nowhere.txt" if dangling else _victim(tmp_path)
    link = tmp_path / "link.out"
    link.symlink_to(victim)
    out = ["--out", str(tmp_path / "r.html")] if flag != "--out" else []
    code, _, err = _report(capsys, "--results", str(results), *out, flag, str(link))
    assert code == 2
    assert f"{link} ({flag}) is a symbolic link (to {victim})" in _one_error_line(err)
    assert link.is_symlink() and link.readlink() == victim  # neither followed nor replaced
    assert (victim.read_text() == "precious\n") if not dangling else not victim.exists()
    assert not (tmp_path / "r.html").exists()  # refused before anything was written


# --- 3. terminal text ---------------------------------------------------------------------------


def _terminal() -> tuple[Console, io.StringIO]:
    """A console that believes it writes to a terminal (colours, live display), recorded."""
    buffer = io.StringIO()
    console = Console(
        file=buffer, force_terminal=True, color_system="standard", width=250, emoji=False
    )
    return console, buffer


def _no_raw_controls(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)


def test_visible_escapes_controls_format_and_bidi_characters():
    controls = "".join(map(chr, (*range(0x20), 0x7F, *range(0x80, 0xA0))))
    bidi = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
    hidden = "\u200b\u2060\ufeff\U000e0001\u00ad\u061c\u2028\u2029\udcff"
    shown = visible(controls + bidi + hidden)
    assert shown.isprintable() and shown.isascii()
    assert visible("x\x1b]0;t\x07") == "x\\x1b]0;t\\x07" and visible("\u202e") == "\\u202e"
    assert visible("a\nb", lines=True) == "a\nb" and visible("a\nb") == "a\\nb"
    assert visible("été 中文 [bold] ü") == "été 中文 [bold] ü"  # letters stay as they are


@pytest.mark.parametrize("name", NAMES)
def test_the_live_progress_line_shows_a_hostile_study_name_literally(name: str):
    console, buffer = _terminal()
    with study_progress(console, disable=False) as progress:
        progress.add_task(study_description(name), total=3)
        progress.refresh()
    raw = buffer.getvalue()
    _no_raw_controls(raw)
    assert "\x1b[" in raw  # it did draw, as on a terminal
    assert f"study {visible(name)}" in raw  # literally: markup printed, controls escaped


def _completed_study(results: Path, name: str):
    """A study of one point whose result is stored already: run_study prints everything it
    prints after a run (progress, table, hints) without starting a worker."""
    settings = {"backend": "torch-single", "model": "tiny", "dataset": "digits", "workers": 1}
    settings.update(batch_size=32, steps=2, machine_reference=False)
    study = expand(settings, name=name, description=f"about {name}")
    template = DATA / "results" / "tiny-torch-single-digits-w1-749c9ebe62" / "result.json"
    for config in study.points:
        document = read_json(template, "result")
        document.update(run_id=config.run_id(), config=config.to_dict(), study=name)
        (results / config.run_id()).mkdir(parents=True)
        write_json_atomic(results / config.run_id() / "result.json", "result", made_here(document))
    return study


def _pasted(command: str, cwd: Path) -> list[str]:
    """The words bash gives the command ``dlscale ...`` (run as ``printf`` instead): what a
    user who pasted it would run. Nothing else may run (no file appears in ``cwd``)."""
    assert command.startswith("dlscale ")
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command.removeprefix('dlscale ')}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    assert list(cwd.iterdir()) == [], "pasting the command ran something"
    return ["dlscale", *done.stdout.split("\0")[:-1]]


@pytest.mark.parametrize("name", NAMES[:3])
def test_run_study_prints_names_literally_and_its_results_hint_quoted(
    tmp_path: Path, monkeypatch, name: str
):
    results = tmp_path / SHELL_PATH
    study = _completed_study(results, name)
    out, out_buffer = _terminal()
    err, err_buffer = _terminal()
    monkeypatch.setattr("dlscale.cli.progress.console", lambda stderr=False: err if stderr else out)
    assert run_study(study, results, force=False, as_json=False, command=["dlscale", "run"]) == 0
    printed = out_buffer.getvalue() + err_buffer.getvalue()
    _no_raw_controls(printed)
    assert f"study {visible(name)}: about {visible(name)}" in printed  # the table's title
    assert "already completed" in err_buffer.getvalue()
    hint = next(line for line in out_buffer.getvalue().splitlines() if "results: " in line)
    command = hint.split(" (", 1)[1].removesuffix(")")
    argv = ["dlscale", "ls", "runs", "--results", str(results)]
    assert shlex.split(command) == argv
    assert _pasted(command, tmp_path / "cwd") == argv


def test_the_reproduce_line_is_quoted_for_the_shell(tmp_path: Path):
    argv = ["dlscale", "run", "my study.toml", "--results", SHELL_PATH, "--set", "x=$(touch P)"]
    rows = _rows(hostile_results(tmp_path / "a", ("s",), command=argv))
    rows += _rows(hostile_results(tmp_path / "b", ("t",), command="dlscale run; touch PWNED"))
    rows += _rows(hostile_results(tmp_path / "c", ("u",), command=["dlscale", "a\nb\x1b[2J"]))
    page, _ = build_html(rows, title="t", source="s")
    shown = [html.unescape(c) for c in re.findall(r"<p>Reproduce: <code>(.*?)</code></p>", page)]
    assert len(shown) == 3
    assert shlex.split(shown[0]) == argv and _pasted(shown[0], tmp_path / "cwd") == argv
    # a command stored as text is one quoted word: pasted, it runs nothing but that word
    assert shlex.split(shown[1]) == ["dlscale run; touch PWNED"]
    assert _pasted(f"dlscale {shown[1]}", tmp_path / "cwd2")[1:] == ["dlscale run; touch PWNED"]
    # a line break or escape inside a word is shown, never a second line of the command, in
    # ANSI-C quotes: pasted, it is the same word again
    assert shown[2] == "dlscale $'a\\nb\\x1b[2J'"
    assert _pasted(shown[2], tmp_path / "cwd3") == ["dlscale", "a\nb\x1b[2J"]


def test_the_reports_waiting_hint_is_quoted_and_its_lines_literal(
    tmp_path: Path, capsys, monkeypatch, few_figures
):
    results = tmp_path / SHELL_PATH
    shutil.copytree(DATA / "results", results)
    monkeypatch.setattr(dlscale.runner, "submitted_points", lambda store: [("x", None)])
    out = tmp_path / "r\x1b]0;t\x07.html"
    code, printed, err = _report(capsys, "--results", str(results), "--out", str(out))
    assert code == 0, err
    command = err.split("not in this report (", 1)[1].rsplit(" shows where they stand)", 1)[0]
    argv = ["dlscale", "ls", "runs", "--results", str(results)]
    assert shlex.split(command) == argv and _pasted(command, tmp_path / "cwd") == argv
    _no_raw_controls(printed + err)
    assert printed.startswith(f"report: {visible(out)} (") and out.exists()


def test_table_caption_title_and_cells_stay_one_line(tmp_path: Path):
    rows = _rows(hostile_results(tmp_path, ("s",)))
    for i, row in enumerate(rows):
        row["config"]["model"] = "m\nx\x1b[2J\u202e"  # the same in every row: the caption
        row["config"]["data_dir"] = f"d{i}\nnext\x00"  # differs: a column of settings
    text = _text(points_table(rows, title="t\x1b]0;x\x07\nsecond"))
    _no_raw_controls(text)
    lines = text.splitlines()
    assert lines[0].startswith("t\\x1b]0;x\\x07\\nsecond")
    assert any("model m\\nx\\x1b[2J\\u202e" in line for line in lines)
    # a cell may wrap at the table's width, but its text holds no line break of its own
    assert "data_dir=d0\\nnext" in text
    assert not [line for line in lines if line.lstrip().startswith(("next", "x\\x1b"))]


def test_the_reports_cells_show_control_characters_escaped(tmp_path: Path):
    """A failed run's cause (and every other text of a stored result in the page) keeps no raw
    control or bidirectional character: a page read in a terminal clears nothing."""
    error = "boom\n\x1b[2Jloud\u202e"
    rows = _rows(hostile_results(tmp_path, ("s\x1b]0;t\x07",), status="failed", error=error))
    page, _ = build_html(rows, title="t", source="s")
    _no_raw_controls(page)
    assert html.escape(visible(error)) in page


@pytest.mark.e2e
def test_ls_runs_and_compare_show_control_characters_escaped(tmp_path: Path):
    a = tmp_path / "a\x1b]0;t\x07"
    b = tmp_path / "b\u202e\nx"
    shutil.copytree(DATA / "results", a)
    hostile_results(b, ("s\x1b[2J",), error="boom\n\x1b[2Jloud\u202e")
    env = {**os.environ, "COLUMNS": "250"}
    listing = subprocess.run(
        [sys.executable, "-m", "dlscale", "ls", "runs", "--results", str(a)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    _no_raw_controls(listing.stdout + listing.stderr)
    assert f"runs in {visible(a)} (4)" in listing.stdout
    compared = subprocess.run(
        [sys.executable, "-m", "dlscale", "compare", str(a), str(b)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    _no_raw_controls(compared.stdout + compared.stderr)
    lines = compared.stdout.splitlines()
    assert any(line.endswith("FAILED: boom\\n\\x1b[2Jloud\\u202e") for line in lines)
    assert f"B = {visible(b)} against A = {visible(a)}" in " ".join(compared.stdout.split())
    json.loads(
        subprocess.run(
            [sys.executable, "-m", "dlscale", "compare", str(a), str(b), "--json"],
            capture_output=True, text=True, timeout=120, env=env, check=True,
        ).stdout
    )  # fmt: skip


def test_printed_commands_parse_back_to_their_words():
    argv = ["dlscale", "run", "a b", "c;d", "$(touch PWNED)", "'q'", "", "é\u202e"]
    command = shell_command(argv)
    assert command.endswith(" $'é\\U0000202e'")  # the control made visible, in ANSI-C quotes
    assert "\u202e" not in command
    pasted = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True,
                            text=True, check=True)  # fmt: skip
    assert pasted.stdout.split("\0")[:-1] == argv  # bash reads back the very same words
