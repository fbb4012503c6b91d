"""The report from a fixed results directory (tests/data/results, made by a real study)."""

import csv
import io
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from dlscale.cli.tables import LEGEND, points_table
from dlscale.contract.result import Result
from dlscale.metrics.scaling import add_scaling
from dlscale.report.columns import COLUMNS
from dlscale.report.figures import rank_spread, study_figures
from dlscale.report.html import build_html, runs_table
from dlscale.report.layout import human_layout
from dlscale.report.tables import to_csv, to_markdown
from dlscale.store import RunStore

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def rows():
    return add_scaling(RunStore(DATA / "results").results())


def test_tables_match_golden_files(rows):
    assert to_markdown(rows) == (DATA / "golden" / "runs.md").read_text()
    assert to_csv(rows) == (DATA / "golden" / "runs.csv").read_text()


class _Cells(HTMLParser):
    """The caption and the rows of cell texts (header row first) of one HTML table."""

    def __init__(self) -> None:
        super().__init__()
        self.caption = self._in = ""
        self.rows: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td", "caption"):
            self._in = tag
            if tag != "caption":
                self.rows[-1].append("")

    def handle_endtag(self, tag):
        self._in = ""

    def handle_data(self, data):
        if self._in == "caption":
            self.caption += data
        elif self._in:
            self.rows[-1][-1] += data


def _terminal(table) -> str:
    out = Console(width=300, record=True, file=io.StringIO())
    out.print(table)
    return out.export_text()


def test_every_runs_table_derives_from_the_one_column_definition(rows):
    shown, caption = human_layout(rows)
    labels = [c.label for c in shown]
    assert labels[:2] == ["backend", "workers"]  # equal settings went to the caption
    assert caption == [
        "model tiny", "data digits", "scaling weak", "device cpu", "runs 1",
        "code 0.1.0 at 52f3347+changes",
    ]  # fmt: skip
    people = [[c.text(r) for c in shown] for r in rows]

    terminal = points_table(rows, title="t", wide=True)
    assert [c.header for c in terminal.columns] == labels
    assert [list(c.cells) for c in terminal.columns] == [[c.text(r) for r in rows] for c in shown]
    assert terminal.caption == ", ".join(caption)

    page = _Cells()
    page.feed(runs_table(rows))
    assert page.rows == [labels, *people]
    assert page.caption == ", ".join(caption)

    names = [c.name for c in COLUMNS]
    machines = [[c.export(r) for c in COLUMNS] for r in rows]
    assert list(csv.reader(io.StringIO(to_csv(rows)))) == [names, *machines]
    markdown = [line.strip("|").split(" | ") for line in to_markdown(rows).splitlines()]
    assert [[cell.strip() for cell in line] for line in markdown[:1] + markdown[2:]] == [
        names,
        *[[cell or "-" for cell in line] for line in machines],
    ]

    # One value, rounded once for people and once for machines, the same in every output.
    ddp2 = rows.index(next(r for r in rows if r["config"]["workers"] == 2 and r.get("speedup")))
    single = rows.index(next(r for r in rows if r["config"]["backend"] == "torch-single"))
    speedup = labels.index("speedup")
    # a speedup with its 95% interval (Fieller over windows: each point has one run)
    assert people[ddp2][speedup] == "1.01x [0.84, 1.22]" and people[single][speedup] == "1.00x*"
    assert page.rows[1 + ddp2][speedup] == "1.01x [0.84, 1.22]"
    assert "1.01x [0.84, 1.22]" in _terminal(terminal) and "1.00x*" in _terminal(terminal)
    assert machines[ddp2][names.index("speedup")] == "1.010"
    assert people[ddp2][labels.index("eff.")] == "50%"  # its interval: the speedup's / 2
    assert machines[ddp2][names.index("efficiency")] == "0.505"


def test_legend_is_built_from_the_columns_and_unchanged():
    assert LEGEND == (
        "!: a figure of the row cannot be taken as it reads: efficiency above 100% beyond its "
        "interval, a negative exposed communication (the noise is larger than what it "
        "measures), a one-process point (a baseline) whose process waited for a CPU, or an "
        "MFU above 100% (its FLOPs or peak are wrong); the notes say which; "
        "batch/w: images each worker takes a step; "
        "img/s: images per second over all workers, mean over the point's runs; "
        "±95%: half-width of its 95% confidence interval, Student t over runs "
        "(w: over the windows of a single run, which are not independent; -: one run with "
        "one clean window, too few samples); "
        "runs: independent runs of the point; "
        "thr/w: intra-op threads of each worker process (cores / processes unless "
        "threads_per_worker is set); all: the whole-machine reference, every core as one "
        "worker, which 'vs 1×all' is over; "
        "step ms: median synchronous step time (slowest rank), over the windows the noise "
        "guard kept; "
        "speedup: img/s over the baseline, [95% interval] (Fieller; none when either side "
        "has too few samples; *: the baseline is this row); "
        "eff.: speedup / workers, in percent (its interval is the speedup's divided by the "
        "workers: the exports' efficiency_ci95_low and _high); "
        "baseline: the 1-worker point with the same threads per worker that speedup is over; "
        "vs 1×all: img/s over the same machine used as 1 worker with every core; "
        "input: input wait, the share of step time spent waiting for the next batch "
        "(-: synthetic data, whose one batch stays on the device); "
        "comm: exposed communication, the share of a step not hidden behind computation ±95% "
        "(n.s.: not distinguishable from 0); "
        "sent/step: bytes one worker sends a step to synchronize: counted during the measured "
        "windows where the engine counts them, else its algorithm's model (docs/metrics.md, "
        "Synchronization and bytes); "
        "MFU: model FLOPs utilization: training FLOPs per sample x samples/s over the peak "
        "FLOP/s of every worker's device, in percent (-: the FLOPs or the peak are not known, "
        "or it came out above 100%, which the notes name); "
        "MFU of: the peak MFU is of: a CPU's measured matmul peak with the worker's threads, a "
        "GPU's datasheet dense peak, or peak_tflops as set; "
        "TFLOP/s: training TFLOP/s of every worker together: train_flops_per_sample x "
        "samples/s / 1e12 (--json: achieved_flops_s, in FLOP/s); "
        "peak TFLOP/s: the peak of one worker's device in TFLOP/s, MFU's denominator over the "
        "workers (--json: peak_flops_per_worker, in FLOP/s); "
        "FLOPs/sample: FLOPs of training on one sample, forward and backward (a multiply-add "
        "is 2; docs/metrics.md, FLOPs per sample); "
        "mem: peak memory: the largest high-water resident set (VmHWM) of any training process "
        "over the measured windows, its libraries and framework included; "
        "GPU mem: on a GPU: the most memory the framework's allocator held in tensors on any "
        "worker's device over the measured windows; "
        "acc.: evaluation accuracy; "
        "loss: held-out loss after the last evaluation, per image or per token (perplexity: exp "
        "of it); TTL: seconds to the target held-out loss; TTA: seconds to the target accuracy; "
        "notes: loaded: other processes used that share of the machine in a window, "
        "steal: the hypervisor gave that share to other machines (docs/metrics.md, noise "
        "guard); waited: a training process's threads waited that share of a window for a CPU "
        "(the kernel's run delay: contention on its own cores, which the machine's load misses); "
        "loaded windows left out: windows the noise guard dropped, and how much that "
        "moved img/s (noise_guard_shift); loaded runs left out: runs loaded in every window, "
        "not in the point's figures; comm probe loaded: other processes or the hypervisor took "
        "more than the limits while exposed communication was measured; "
        "oversubscribed: threads exceed the cores; "
        "baseline threads differ: no 1-worker point had the same threads per worker; "
        "restarted: ranks restarted (max_restarts) and resumed from a checkpoint, and the "
        "seconds that cost; loss diverged: a recorded training loss became NaN, infinite or "
        "beyond 1e15 nats (in that many of the runs; a run that records no loss, as a "
        "script's own loop, never says it): the speed holds, the loss and accuracy mean "
        "nothing (lower lr); loader only: the input pipeline timed alone (loader_only), img/s "
        "is what the loaders deliver; MFU above 100%: the FLOPs or the peak are wrong, so no "
        "MFU is stated; "
        "code: the dlscale version that made the runs and the commit it was installed from "
        "(0.1.0 at b2b2af9; +changes: the checkout had uncommitted changes; the version alone "
        "for an install without git); mixed (N): N different ones; "
        "engine code: the first 7 hex digits of the fingerprint of the engine's code that made "
        "the runs (its worker's and framework's folders, runtime/, datasets/, worker.py), which "
        "a resume compares with this checkout's before reusing a point (mixed (N): N different "
        "ones; docs/reliability.md). "
        "Definitions: docs/metrics.md."
    )
    assert all(c.definition for c in COLUMNS if c.label in ("img/s", "speedup", "TTA s"))


def test_run_ids_are_a_column_only_when_asked(rows):
    assert "run_id" not in [c.header for c in points_table(rows).columns]
    with_ids = points_table(rows, run_ids=True, wide=True)
    assert [c.header for c in with_ids.columns][-1] == "run_id"
    assert list(with_ids.columns[-1].cells) == [r["run_id"] for r in rows]
    # fitted to 100 columns: each id's end (the backend and workers columns say its start)
    fitted = points_table(rows, run_ids=True)
    assert [c.header for c in fitted.columns][:2] == ["backend", "workers"]
    assert list(fitted.columns[-1].cells) == ["…" + r["run_id"].rpartition("-")[2] for r in rows]


def test_runs_tables_tolerate_missing_settings_and_escape_user_text():
    odd = "<b>[bold]x|y</b>"
    rows = [
        {
            "run_id": f"r{workers}",
            "status": "completed" if workers == 1 else "failed",
            "study": "s",
            "config": {"backend": "mx", "model": odd, "workers": workers},
            "metrics": {},
        }
        for workers in (1, 2)
    ]
    _, caption = human_layout(rows)
    assert caption == [
        f"model {odd}",
        "data -",
        "scaling -",
        "device -",
        "batch/w -",
        "runs -",
        "thr/w -",
        "baseline -",
        "code -",
    ]
    text = _terminal(points_table(rows))
    assert f"model {odd}" in text and "FAILED" in text
    page = runs_table(rows)
    assert odd not in page and "&lt;b&gt;[bold]x|y&lt;/b&gt;" in page
    assert "x\\|y" in to_markdown(rows)
    assert list(csv.reader(io.StringIO(to_csv(rows))))[1][2] == odd


def test_every_figure_of_a_study_with_accuracy_is_built(rows):
    keys = [f.key for f in study_figures(rows)]
    assert keys == [
        "throughput",
        "speedup",
        "efficiency",
        "breakdown",
        "side_by_side",
        "tta",
        "tta_split",
        "accuracy_by_epoch",
        "accuracy_by_elapsed",
        "loss_by_epoch",
        "loss_by_elapsed",
        "train_loss",
        "ranks",
    ]


def test_throughput_ideal_line_is_baseline_times_workers(rows):
    figure = next(f for f in study_figures(rows) if f.key == "throughput")
    single = next(r for r in rows if r["config"]["backend"] == "torch-single")
    ideal = next(s for s in figure.series if s.name == "torch-ddp: ideal (linear)")
    base = single["metrics"]["throughput_samples_s"]
    assert ideal.x == [1, 2]
    assert ideal.y == pytest.approx([base, 2 * base])


def test_tta_split_is_hardware_times_statistics(rows):
    figure = next(f for f in study_figures(rows) if f.key == "tta_split")
    single = next(r for r in rows if r["config"]["backend"] == "torch-single")
    ddp2 = next(r for r in rows if r["config"]["workers"] == 2 and r["status"] == "completed")
    tta, hardware, stats = (s.y[0] for s in figure.series)
    assert tta == pytest.approx(
        single["metrics"]["time_to_accuracy_s"] / ddp2["metrics"]["time_to_accuracy_s"]
    )
    assert hardware == pytest.approx(
        ddp2["metrics"]["throughput_samples_s"] / single["metrics"]["throughput_samples_s"]
    )
    assert stats == pytest.approx(
        single["metrics"]["epochs_to_accuracy"] / ddp2["metrics"]["epochs_to_accuracy"]
    )


def _row(per_rank):
    return {
        "run_id": "r",
        "status": "completed",
        "config": {"backend": "torch-ddp", "workers": len(per_rank)},
        "metrics": {"rank_step_time_mean_ms": per_rank},
    }


def test_stragglers_are_flagged():
    slow = rank_spread([_row({"0": 100.0, "1": 100.0, "2": 120.0})])
    assert slow is not None and len(slow.flags) == 1 and "rank 2" in slow.flags[0]
    even = rank_spread([_row({"0": 100.0, "1": 101.0})])
    assert even is not None and even.flags == []


def test_html_is_self_contained_and_lists_failures(rows):
    page, plots = build_html(rows, title="t", source="tests/data/results")
    assert plots == len(study_figures(rows))
    assert f'data-plots="{plots}"' in page
    assert "<script src=" not in page  # no CDN: plotly.js is inline
    assert "Failed runs (1)" in page and "data set too small for the batch size" in page
    assert rows[0]["environment"]["cpu_model"] in page
    assert "dlscale run" in page  # the command that reproduces the study


def test_report_command_writes_html_figures_and_tables(tmp_path: Path, cli):
    result = cli(
        "report",
        "--results",
        str(DATA / "results"),
        "--out",
        str(tmp_path / "r.html"),
        "--figures",
        str(tmp_path / "fig"),
        "--markdown",
        str(tmp_path / "runs.md"),
        "--csv",
        str(tmp_path / "runs.csv"),
    )
    assert result.returncode == 0, result.stderr
    assert "report:" in result.stdout
    assert (tmp_path / "runs.md").read_text() == (DATA / "golden" / "runs.md").read_text()
    pngs = sorted((tmp_path / "fig").glob("*.png"))
    pdfs = sorted((tmp_path / "fig").glob("*.pdf"))
    assert len(pngs) == len(pdfs) == 13
    from PIL import Image

    with Image.open(pngs[0]) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 20  # drawn, not blank


def test_report_without_results_is_a_clear_error(tmp_path: Path, cli):
    result = cli("report", "--results", str(tmp_path / "none"))
    assert result.returncode == 2
    assert "no results directory" in result.stderr and "Traceback" not in result.stderr
    # the directory given as predict --validate takes it: the same answer
    alone = cli("report", str(tmp_path / "none"))
    assert alone.returncode == 2 and "no results directory" in alone.stderr
    assert str(tmp_path / "none") in alone.stderr
    both = cli("report", str(tmp_path / "a"), "--results", str(tmp_path / "b\x1b[31m"))
    assert both.returncode == 2 and "Traceback" not in both.stderr
    assert "two results directories given" in both.stderr and "\x1b" not in both.stderr


def test_settings_that_differ_between_rows_of_one_backend_get_a_column():
    """Two horovod-torch rows differing only in compression must be told apart in the table."""

    def row(backend: str, **options):
        return {
            "run_id": f"{backend}-{options}",
            "status": "completed",
            "config": {"backend": backend, "model": "tiny", "workers": 2, **options},
            "metrics": {},
        }

    rows = [
        row("torch-single"),
        row("horovod-torch", compression="none", fusion_mb=64.0),
        row("horovod-torch", compression="fp16", fusion_mb=64.0),
    ]
    shown, _ = human_layout(rows)
    assert [c.label for c in shown][:2] == ["backend", "settings"]
    assert [shown[1].text(r) for r in rows] == ["-", "compression=none", "compression=fp16"]
    same, _ = human_layout(rows[:2])
    assert "settings" not in [c.label for c in same]


def test_provenance_names_every_framework_of_the_study_as_its_workers_recorded_it():
    """Not a PyTorch row only: each run's framework packages from its own workers' record
    (Horovod's too where the backend needs it); an old result shows its torch_version."""
    from dlscale.report.html import framework_versions, provenance

    def run(backend: str, framework: str | None, environment: dict) -> dict:
        config = {"backend": backend, "model": "m", "dataset": "d", "workers": 1}
        result = Result(
            run_id=backend, status="completed", framework=framework, config=config,
            environment=environment,
        )  # fmt: skip
        return result.row()

    rows = [
        run("torch-ddp", "torch", {"packages": {"torch": "2.13.0", "numpy": "2.4", "mxnet": "9"}}),
        run("tf-mwms", "tensorflow", {"packages": {"tensorflow": "2.21.0", "tf-keras": "2.21.0"}}),
        run("horovod-mxnet", "mxnet", {"packages": {"mxnet": "1.9.1", "horovod": "0.28.1"}}),
        run("torch-ddp", None, {"torch_version": "1.13"}),  # schema 1
        run("toy-ps", "numpy", {"packages": "not a dict"}),  # damaged: nothing from it
    ]
    assert framework_versions(rows) == (
        "horovod 0.28.1, mxnet 1.9.1, tensorflow 2.21.0, tf-keras 2.21.0, torch 1.13, torch 2.13.0"
    )
    assert "<th>frameworks</th><td>horovod 0.28.1, mxnet 1.9.1" in provenance(rows)
