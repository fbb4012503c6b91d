"""One self-contained HTML report: plotly.js inlined once, no network needed to open it."""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any
from urllib.parse import quote

from dlscale.config.claims import Claim
from dlscale.contract.text import html_text, shell_command
from dlscale.perfmodel.networks import link_lookup, stored_fit, stored_fits
from dlscale.perfmodel.validate import network_key
from dlscale.report.claims import claims_section
from dlscale.report.columns import Column
from dlscale.report.figures import study_figures
from dlscale.report.interactive import to_plotly
from dlscale.report.layout import human_layout
from dlscale.report.model import collectives, model_figures, predictable
from dlscale.report.series import Figure, Row
from dlscale.report.slugs import study_slugs

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;
color:#222;padding:0 1rem}
h1{margin-bottom:.2rem} h2{border-bottom:2px solid #ddd;padding-bottom:.3rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}
td,th{border:1px solid #ddd;padding:.25rem .5rem;text-align:left}
th{background:#f5f5f5} .note{color:#555;font-size:.9rem;margin:.2rem 0 1.5rem}
.flag{color:#b00020} code{background:#f5f5f5;padding:0 .25rem}
.figure{margin-top:1rem} .failed td{background:#fff3f3}
.runs td.num,.runs th.num{text-align:right} .runs caption{text-align:left;color:#555}
.runs{display:block;overflow-x:auto;max-width:100%} .runs td.num{white-space:nowrap}
.runs td:not(.num){overflow-wrap:anywhere;min-width:3rem} .runs{font-size:.85rem}
.runs td,.runs th{padding:.2rem .35rem}
ul.found li{margin:.3rem 0}
"""


_e = html_text
"""Text from a stored result or a study as HTML (:func:`dlscale.contract.text.html_text`): a
page read in a terminal, or a cell a browser would reorder, shows its control characters
literally."""


def reproduce(rows: list[Row]) -> list[str]:
    """The distinct commands that made ``rows``, each quoted for pasting into a shell: the
    stored ``command`` is the argv list (a path with a space, ``;`` or ``$(...)`` stays one
    word); text that is not a list (a damaged or foreign result) is one quoted word, which
    runs nothing."""
    commands = set()
    for row in rows:
        argv = row.get("command")
        if argv:
            commands.add(shell_command(argv if isinstance(argv, list) else [argv]))
    return sorted(commands)


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def provenance(rows: list[Row]) -> str:
    def values(key: str) -> str:
        found = sorted(
            {
                str((r.get("environment") or {}).get(key))
                for r in rows
                if (r.get("environment") or {}).get(key) is not None
            }
        )
        return ", ".join(found) or "-"

    # every framework's GPUs (torch's names, TensorFlow's names, MXNet's count), read alike
    gpus = sorted({", ".join(r["facts"].gpus) or "none" for r in rows if r.get("environment")})
    started = min((r["started_at"] for r in rows if r.get("started_at")), default=None)
    finished = max((r["finished_at"] for r in rows if r.get("finished_at")), default=None)
    items = [
        ("hosts", values("hostname")),
        ("CPU", values("cpu_model")),
        ("usable cores", values("cpu_cores_usable")),
        ("memory (GiB)", values("memory_gib")),
        ("GPU", ", ".join(gpus) or "-"),
        ("OS", values("os")),
        ("Python", values("python")),
        ("frameworks", framework_versions(rows)),
        ("dlscale", values("dlscale_version")),
        ("git commit", values("git_commit")),
        ("runs", f"{_when(started)} to {_when(finished)}"),
    ]
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    return f'<table class="provenance">{cells}</table>'


def framework_versions(rows: list[Row]) -> str:
    """The versions each run's workers had of its framework's packages (and Horovod's, for a
    backend that needs it), as its workers recorded them: every framework of the study, not one
    (:class:`~dlscale.contract.facts.FrameworkFacts`)."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.facts import recorded_versions
    from dlscale.contract.frameworks import FRAMEWORKS

    found: set[str] = set()
    for row in rows:
        versions = list(row["facts"].packages)
        backend = (row.get("config") or {}).get("backend")
        if backend in BACKENDS:  # the frameworks a backend needs beside its own (Horovod)
            for need in BACKENDS.get(str(backend)).requires:
                if need in FRAMEWORKS:
                    versions += recorded_versions(row.get("environment") or {}, need)
        found.update(f"{name} {version}" for name, version in versions)
    return ", ".join(sorted(found)) or "-"


def runs_table(rows: list[Row]) -> str:
    """The runs table: the columns of `dlscale.report.columns` for people, as in the terminal."""
    columns, caption = human_layout(rows)

    def cls(column: Column) -> str:
        return ' class="num"' if column.numeric else ""

    header = "".join(
        f'<th{cls(c)} title="{_e(c.definition)}">{_e(c.label)}</th>'
        if c.definition
        else f"<th{cls(c)}>{_e(c.label)}</th>"
        for c in columns
    )
    body = "".join(
        ("<tr>" if r["status"] == "completed" else '<tr class="failed">')
        + "".join(f"<td{cls(c)}>{_e(c.text(r))}</td>" for c in columns)
        + "</tr>"
        for r in rows
    )
    top = f"<caption>{_e(', '.join(caption))}</caption>" if caption else ""
    return f'<table class="runs">{top}<tr>{header}</tr>{body}</table>'


def found(studies: dict[str, list[Row]]) -> str:
    """What each study found (`dlscale.report.finding`), first on the page."""
    from dlscale.report.finding import findings

    parts = []
    for name, study_rows in sorted(studies.items()):
        said = findings(study_rows)
        if said:
            title = f"<h3>Study {_e(name)}</h3>" if len(studies) > 1 else ""
            items = "".join(f"<li>{_e(sentence)}</li>" for sentence in said)
            parts.append(f'{title}<ul class="found">{items}</ul>')
    return "<h2>What was found</h2>" + "".join(parts) if parts else ""


def _failures(rows: list[Row]) -> str:
    failed = [r for r in rows if r["status"] != "completed"]
    if not failed:
        return ""
    items = "".join(
        f"<tr><td><code>{_e(r['run_id'])}</code></td><td>{_e(r['config']['backend'])} x"
        f"{_e(r['config']['workers'])}</td><td>{_e(r.get('error'))}</td></tr>"
        for r in failed
    )
    return (
        f"<h3>Failed runs ({len(failed)})</h3><table><tr><th>run</th><th>point</th>"
        f"<th>cause</th></tr>{items}</table>"
    )


def _placement(rows: list[Row]) -> str:
    """Which host ran which processes, for runs not all on the machine writing the report."""
    from dlscale.report.placement import TITLE, placements

    lines = placements(rows)
    if not lines:
        return ""
    items = "".join(
        f"<tr><td><code>{_e(run)}</code></td><td>{_e(host)}</td><td>{_e(processes)}</td></tr>"
        for run, host, processes in lines
    )
    return (
        f"<h3>{_e(TITLE[0].upper() + TITLE[1:])}</h3><table><tr><th>run</th><th>host</th>"
        f"<th>processes</th></tr>{items}</table>"
    )


def _input(rows: list[Row]) -> str:
    """The input pipeline's findings (data read from disk), one line per training point."""
    from dlscale.metrics.input_bound import input_findings

    findings = input_findings(rows)
    if not findings:
        return ""
    items = "".join(f"<li>{_e(f.sentence())}</li>" for f in findings)
    return f'<h3>Input pipeline</h3><ul class="input">{items}</ul>'


def traces(rows: list[Row], results_href: str) -> str:
    """Links to the trace files runs left in their directories (Horovod's timeline), which
    open in Perfetto (ui.perfetto.dev) or chrome://tracing; ``results_href``: the results
    directory relative to the page. A name that is not a plain file name is not linked."""
    items = []
    for row in rows:
        for name in row["metrics"].get("traces") or []:
            if not isinstance(name, str) or name in ("", ".", "..") or "/" in name:
                continue
            href = "/".join(quote(part) for part in (results_href, row["run_id"], name))
            items.append(
                f"<li><code>{_e(row['run_id'])}</code> {_e(row['config']['backend'])} x"
                f'{_e(row["config"]["workers"])}: <a href="{_e(href)}">{_e(name)}</a></li>'
            )
    if not items:
        return ""
    return (
        '<h3>Traces</h3><p class="note">Chrome trace files: open them in '
        "https://ui.perfetto.dev or chrome://tracing.</p><ul>" + "".join(items) + "</ul>"
    )


def _figure(figure: Figure, div_id: str) -> str:
    """One plot with its note and flags; ``div_id`` is derived text, never the user's (plotly
    writes it unescaped into an HTML attribute and into a JS string)."""
    import plotly.io as pio

    div = pio.to_html(
        to_plotly(figure),
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"responsive": True},
    )
    flags = "".join(f'<li class="flag">{_e(flag)}</li>' for flag in figure.flags)
    return (
        f'<div class="figure" data-figure="{_e(figure.key)}">{div}'
        f'<p class="note">{_e(figure.note)}</p>' + (f"<ul>{flags}</ul>" if flags else "") + "</div>"
    )


def _prediction(rows: list[Row], fitted: dict[Any, Any], div_id: str) -> tuple[str, int]:
    """The model's figures of the study (its error on each point, its forecast), or a line
    saying what would give them; and the number of plots. ``div_id``: their ids' prefix."""
    candidates = predictable(rows)
    if not candidates:
        return "", 0
    link_of, sources = link_lookup(fitted)
    figures = model_figures(rows, link_of, sources)
    if figures:
        return "".join(_figure(f, f"{div_id}-{f.key}") for f in figures), len(figures)
    launchers = sorted({str(r["config"].get("launcher")) for r in candidates})
    microbench = ["dlscale", "microbench", "--workers", "2", "--launcher"]
    commands = " or ".join(f"<code>{_e(shell_command([*microbench, x]))}</code>" for x in launchers)
    return (
        '<p class="note">The model (docs/perfmodel.md) can predict this study\'s points of 2 '
        f"workers or more once the network they ran on is measured: run {commands} (with the "
        "same network and nodes settings) into this results directory, then this report "
        "again.</p>",
        0,
    )


def microbench_section(runs: list[dict[str, Any]], slug_of: dict[str, str]) -> tuple[str, int]:
    """Each stored microbench run: what ran, its ring fit or its error, and its figures."""
    if not runs:
        return "", 0
    parts, plots = ["<h2>Networks measured (dlscale microbench)</h2>"], 0
    for run in runs:
        config = run["config"]  # a dict: microbench_runs leaves out any other
        _, network, nnodes = network_key(config)
        where = [f"network {network}"] if network else []
        where += [f"{nnodes} nodes"] if nnodes != 1 else []
        parts.append(
            f'<section class="microbench" id="mb-{slug_of[run["run_id"]]}">'
            f"<h3><code>{_e(run['run_id'])}</code></h3><p>{_e(config.get('backend'))}, "
            f"{_e(run.get('processes'))} processes, launcher {_e(config.get('launcher'))}"
            + (f" ({_e(', '.join(where))})" if where else "")
            + f", {_e(_when(run.get('started_at')))}</p>"
        )
        if run.get("error"):
            parts.append(f'<p class="flag">failed: {_e(run["error"])}</p>')
        for pattern, stored in stored_fits(run).items():
            fit = stored_fit(stored)
            if fit is not None and not run.get("error"):
                source = stored.get("collective")
                parts.append(
                    f"<p>{_e(pattern)} fit ({_e(source)}): alpha {fit.alpha_s * 1e6:.1f} us, "
                    f"{fit.bandwidth_bit_s / 1e9:.3g} Gbit/s effective</p>"
                )
        for figure in collectives(run):
            parts.append(_figure(figure, f"plot-mb-{slug_of[run['run_id']]}-{figure.key}"))
            plots += 1
        parts.append("</section>")
    return "".join(parts), plots


def build_html(
    rows: list[Row],
    *,
    title: str,
    source: str,
    results_href: str = "dlscale-results",
    microbench: list[dict[str, Any]] | None = None,
    fitted: dict[Any, Any] | None = None,
    claims: dict[str, tuple[Claim, ...]] | None = None,
) -> tuple[str, int]:
    """The report page and the number of plots in it; ``results_href`` is the results
    directory relative to where the page is written (for links to files in runs);
    ``microbench``: the stored microbench runs, ``fitted``: the networks fitted from them
    (:mod:`dlscale.perfmodel.networks`); ``claims``: each study's published claims
    (:mod:`dlscale.store.claims`)."""
    import plotly.offline

    studies: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        studies[str(row.get("study") or "unnamed")].append(row)
    # Ids are derived (ASCII letters, digits, - and _), never the user's text: plotly writes
    # div_id unescaped into an HTML attribute and into a JS string.
    slugs = study_slugs(studies)
    sections, plots = [], 0
    for name, study_rows in sorted(studies.items()):
        commands = reproduce(study_rows)
        parts = [f'<section class="study" id="study-{slugs[name]}"><h2>Study {_e(name)}</h2>']
        parts.append(
            "<p>Reproduce: " + "<br>".join(f"<code>{_e(c)}</code>" for c in commands) + "</p>"
            if commands
            else ""
        )
        parts.append(runs_table(study_rows))
        parts.append(claims_section((claims or {}).get(name, ()), study_rows))
        parts.append(_failures(study_rows))
        parts.append(_placement(study_rows))
        parts.append(_input(study_rows))
        parts.append(traces(study_rows, results_href))
        for figure in study_figures(study_rows):
            parts.append(_figure(figure, f"plot-{slugs[name]}-{figure.key}"))
            plots += 1
        predicted, count = _prediction(study_rows, fitted or {}, f"plot-{slugs[name]}")
        parts.append(predicted)
        plots += count
        parts.append("</section>")
        sections.append("".join(parts))
    runs = microbench or []
    measured, count = microbench_section(runs, study_slugs(r["run_id"] for r in runs))
    sections.append(measured)
    plots += count
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style>
<script>{plotly.offline.get_plotlyjs()}</script></head>
<body data-plots="{plots}">
<h1>{_e(title)}</h1>
<p class="note">{len(rows)} points and {len(runs)} microbench runs from
<code>{_e(source)}</code>, made by dlscale. Metric
definitions: docs/metrics.md. Plots are interactive: hover for values, click legend entries.</p>
{found(studies)}
<h2>Where these numbers come from</h2>{provenance(rows)}
{"".join(sections)}
</body></html>
"""
    return page, plots
