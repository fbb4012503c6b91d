"""User text (study names, paths, errors, commands) that is hostile to HTML, JS, file names or
terminal markup reaches every output literally and harmlessly."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from dlscale.cli import main as dlscale_main
from dlscale.cli.tables import points_table
from dlscale.metrics.scaling import add_scaling
from dlscale.report.figures import study_figures
from dlscale.report.html import build_html
from dlscale.report.interactive import to_plotly
from dlscale.report.series import Figure, Series
from dlscale.report.slugs import study_slugs
from dlscale.report.static import save_static
from dlscale.report.tables import to_markdown
from dlscale.store import RunStore, read_json, write_json_atomic

DATA = Path(__file__).resolve().parent.parent / "data"
HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    'say "hi"',
    "[/x]",
    "lr0.1",
    "../x",
)
SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")


def hostile_results(root: Path, names: tuple[str, ...], **fields: object) -> Path:
    """tests/data/results once per study name (each copy a study of its own), with extra
    top-level fields (e.g. an error message) rewritten in every result."""
    for i, name in enumerate(names):
        for run in sorted((DATA / "results").iterdir()):
            target = root / f"{run.name}-{i}"
            shutil.copytree(run, target)
            document = read_json(target / "result.json", "result")
            document.update(fields, study=name, run_id=target.name)  # a run of its own
            write_json_atomic(target / "result.json", "result", document)
    return root


def _rows(root: Path) -> list[dict]:
    return add_scaling(RunStore(root).results())


class _Page(HTMLParser):
    """Every tag with its attributes, the ids, and the text of each h2."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.h2: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "h2":
            self._in_h2 = True
            self.h2.append("")

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.h2[-1] += data


# --- 1. HTML and JS ---------------------------------------------------------------------------


def test_html_report_escapes_study_names_and_every_user_text(tmp_path: Path):
    hostile = "</script><script>alert(2)</script><!--"
    rows = _rows(
        hostile_results(tmp_path, HOSTILE, error=hostile, command=["dlscale", "run", hostile])
    )
    for row in rows:
        row["run_id"] += hostile
    page, plots = build_html(rows, title=hostile, source=hostile)
    assert plots == len(HOSTILE) * len(study_figures([r for r in rows if r["study"] == "lr0.1"]))
    parsed = _Page()
    parsed.feed(page)
    # nothing injected: the only scripts are plotly.js and one per plot; no img, no handlers
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    assert len(scripts) == 1 + plots and page.count("</script>") == 1 + plots
    assert not [tag for tag, _ in parsed.tags if tag == "img"]
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    body = page.split("<body", 1)[1]
    assert "<script>alert" not in body and "<img" not in body and "<!--" not in body
    # every id is a safe derived one, unique, and every plot's script names its own div
    ids = [attrs["id"] for _, attrs in parsed.tags if attrs.get("id")]
    assert all(SAFE_ID.fullmatch(i or "") for i in ids) and len(ids) == len(set(ids))
    divs = [attrs["id"] for _, attrs in parsed.tags if attrs.get("class") == "plotly-graph-div"]
    assert len(divs) == plots
    assert re.findall(r'Plotly\.newPlot\(\s*"([^"]*)"', body) == divs
    # the names are shown literally (once unescaped by the parser)
    fixed = {"What was found", "Where these numbers come from"}
    assert sorted(h for h in parsed.h2 if h not in fixed) == sorted(f"Study {n}" for n in HOSTILE)


def test_plotly_text_is_shown_literally_not_as_markup():
    figure = Figure(
        key="k",
        title="<b>t</b> & co",
        x_label="<i>x</i>",
        y_label="y<br>",
        series=[Series(name='<img src=x onerror="alert(1)">', x=["<a>", "b"], y=[1.0, 2.0])],
        x_categorical=True,
    )
    plot = to_plotly(figure).to_plotly_json()
    assert plot["data"][0]["name"] == '&lt;img src=x onerror="alert(1)"&gt;'
    assert list(plot["data"][0]["x"]) == ["&lt;a&gt;", "b"]
    assert plot["layout"]["title"]["text"] == "&lt;b&gt;t&lt;/b&gt; &amp; co"
    assert plot["layout"]["xaxis"]["title"]["text"] == "&lt;i&gt;x&lt;/i&gt;"


def test_markdown_table_keeps_one_line_per_run_and_no_raw_html(tmp_path: Path):
    rows = _rows(hostile_results(tmp_path, ("a\nb|<script>alert(1)</script>",)))
    lines = to_markdown(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert "<script>" not in to_markdown(rows)
    assert all(line.startswith("| a b\\|&lt;script&gt;") for line in lines[2:])


# --- 2. figure files ----------------------------------------------------------------------------


def test_study_slugs_are_safe_distinct_and_stable():
    names = [
        "lr0.1",
        "lr0.2",
        "..",
        "../x",
        "..x",
        "a/b",
        "a_b",
        "-rf",
        "LR",
        "lr",
        "x" * 300,
        "x" * 301,
        "fixture",
        "été",
        "",
    ]
    slugs = study_slugs(names)
    assert set(slugs) == set(names)
    assert all(SAFE_ID.fullmatch(s) and len(s) <= 64 for s in slugs.values())
    assert len({s.lower() for s in slugs.values()}) == len(names)  # case-insensitive FS too
    assert not any(s.startswith(("-", ".")) for s in slugs.values())
    assert slugs["fixture"] == "fixture" and slugs["a_b"] == "a_b"  # plain names stay readable
    assert slugs["lr0.1"].startswith("lr0_1-") and slugs["lr0.2"].startswith("lr0_2-")
    assert study_slugs(reversed(names)) == slugs


def test_figure_files_never_overwrite_hide_or_escape(tmp_path: Path, capsys, monkeypatch):
    import dlscale.report.figures

    # two figures per study (one numeric, one categorical) keep matplotlib's time short
    every = dlscale.report.figures.study_figures
    monkeypatch.setattr(dlscale.report.figures, "study_figures", lambda rows: every(rows)[2:4])
    names = ("lr0.1", "lr0.2", "../x", "..", "a/b")
    results = hostile_results(tmp_path / "results", names)
    figures = tmp_path / "out" / "figures"
    args = ["--results", str(results), "--out", str(tmp_path / "r.html")]
    assert dlscale_main(["report", *args, "--figures", str(figures)]) == 0
    per_study = 2
    files = sorted(p.relative_to(figures) for p in figures.rglob("*"))
    assert len(files) == 2 * per_study * len(names)  # one PNG + one PDF per figure, all kept
    assert all(len(f.parts) == 1 and not f.name.startswith(".") for f in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "r.html", "results"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["figures"]
    assert f"figures: {len(files)} files" in capsys.readouterr().out


def test_static_figures_draw_dollar_signs_literally(tmp_path: Path):
    figure = Figure(
        key="k",
        title="cost $5 and $6",
        x_label="$x$",
        y_label="y",
        series=[Series(name="cost x$^^$y", x=[1, 2], y=[1.0, 2.0])],  # bad mathtext
    )
    paths = save_static(figure, tmp_path / "lr0.1-k")
    assert [p.name for p in paths] == ["lr0.1-k.png", "lr0.1-k.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)


# --- 3. terminal markup -------------------------------------------------------------------------


def _text(renderable) -> str:
    """As `dlscale.cli.tables.console()` prints it (no emoji codes), recorded."""
    out = Console(record=True, width=200, emoji=False, file=io.StringIO())
    out.print(renderable)
    return out.export_text()


def test_points_table_shows_titles_captions_and_cells_literally(tmp_path: Path):
    rows = _rows(hostile_results(tmp_path, ("s",)))
    for row in rows:
        row["config"]["model"] = "m[/x]"
        row["config"]["backend"] = "b[bold]:smile:"
    title = "runs in dir[/x] [bold]b[/bold] :smile: \x1b[31mred"
    text = _text(points_table(rows, title=title))
    assert "runs in dir[/x] [bold]b[/bold] :smile: " in text
    assert "\x1b" not in text and "red" in text
    assert "model m[/x]" in text and "b[bold]:smile:" in text


def test_settings_column_shows_user_paths_literally(tmp_path: Path):
    """A setting that differs between rows (here a data directory, text a user typed) reaches
    the settings column of the terminal table and of the HTML page as data, not markup."""
    rows = _rows(hostile_results(tmp_path, ("s",)))
    paths = ("dir[/x] [bold]b :smile:", "<img src=x onerror=alert(1)>")
    for i, row in enumerate(rows):
        row["config"]["data_dir"] = paths[i % 2]
    text = _text(points_table(rows, title="t"))
    # the cell wraps at its spaces; each piece is there as typed
    assert "data_dir=dir[/x]" in text and "[bold]b :smile:" in text and "onerror=alert(1)>" in text
    page, _ = build_html(rows, title="t", source="s")
    body = page.split("<body", 1)[1]
    assert "<img" not in body
    assert "data_dir=&lt;img src=x onerror=alert(1)&gt;" in body


@pytest.mark.e2e
def test_ls_runs_with_markup_in_the_results_path(tmp_path: Path):
    results = tmp_path / "dir[/x]" / "[bold]r"
    shutil.copytree(DATA / "results", results)
    done = subprocess.run(
        [sys.executable, "-m", "dlscale", "ls", "runs", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"runs in {results} (4)" in done.stdout.replace("\n", "")
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
def test_compare_prints_paths_and_errors_literally_one_line_each(tmp_path: Path):
    a, b = tmp_path / "a[/x]", tmp_path / "b[bold]:smile:"
    shutil.copytree(DATA / "results", a)
    hostile_results(b, ("s",), error="boom [/x] [bold]loud")
    shutil.rmtree(next(p for p in b.iterdir() if "single" in p.name))  # only in A
    done = subprocess.run(
        [sys.executable, "-m", "dlscale", "compare", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"B = {b} against A = {a}" in " ".join(done.stdout.split())  # the title may wrap
    assert any(line.startswith(f"only in A ({a}): 1 point(s)") for line in lines)
    assert any(line.endswith("FAILED: boom [/x] [bold]loud") for line in lines)
    words = " ".join(done.stdout.split())  # the summary: wrapped at words, said once, whole
    assert words.count("point(s) compared") == 1 and words.endswith("point(s) regressed")
    assert "Traceback" not in done.stderr


def test_compare_json_is_unchanged_by_markup(tmp_path: Path):
    a = tmp_path / "a[/x]"
    shutil.copytree(DATA / "results", a)
    done = subprocess.run(
        [sys.executable, "-m", "dlscale", "compare", str(a), str(a), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["baseline"] == str(a)


def test_trace_links_are_escaped_and_never_leave_the_run_directory():
    """A result's trace names are data: a path is not linked, a name is quoted and escaped."""
    from dlscale.report.html import traces

    row = {
        "run_id": "r1",
        "config": {"backend": "horovod-torch", "workers": 2},
        "metrics": {
            "traces": [
                "horovod-timeline.json",
                '"><img src=x onerror=alert(1)>.json',
                "<script>.json",
                "../../etc/passwd",
                "..",
                7,
            ]
        },
    }
    section = traces([row], "../res")
    page = _Page()
    page.feed(section)
    hrefs = [attrs["href"] for tag, attrs in page.tags if tag == "a"]
    assert hrefs == [
        "../res/r1/horovod-timeline.json",
        "../res/r1/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E.json",
        "../res/r1/%3Cscript%3E.json",
    ]
    assert "<script>" not in section and "<img" not in section and "passwd" not in section
    assert traces([{**row, "metrics": {}}], "x") == ""
