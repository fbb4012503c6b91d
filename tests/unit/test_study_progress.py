"""A study's progress where stderr is no terminal (a pipe, a batch job's log): one plain line
per run, in order, with no escape code; in a terminal the live line alone, as before."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from dlscale.cli.eta import StudyClock
from dlscale.cli.progress import run_study
from dlscale.cli.study_progress import FinishedRun, RunLines, run_line
from dlscale.config.study import expand
from dlscale.store import read_json, write_json_atomic
from tests.runs import made_here

DATA = Path(__file__).resolve().parent.parent / "data"
TEMPLATE = DATA / "results" / "tiny-torch-single-digits-w1-749c9ebe62" / "result.json"


def _stored_study(results: Path, name: str, workers: list[int]):
    """A study whose points are stored already: run_study says each run without a worker."""
    settings = {"backend": "torch-single", "model": "tiny", "dataset": "digits", "workers": 1}
    settings.update(batch_size=32, steps=2, machine_reference=False, seed=workers)
    study = expand(settings, name=name, description="stored")
    for config in study.points:
        document = read_json(TEMPLATE, "result")
        document.update(run_id=config.run_id(), config=config.to_dict(), study=name)
        (results / config.run_id()).mkdir(parents=True)
        write_json_atomic(results / config.run_id() / "result.json", "result", made_here(document))
    return study


def _consoles(monkeypatch, *, terminal: bool) -> tuple[io.StringIO, io.StringIO]:
    buffers = io.StringIO(), io.StringIO()
    out, err = (Console(file=b, force_terminal=terminal, width=200, emoji=False) for b in buffers)
    monkeypatch.setattr("dlscale.cli.progress.console", lambda stderr=False: err if stderr else out)
    return buffers


def test_off_a_terminal_each_run_is_one_plain_line(tmp_path: Path, monkeypatch):
    study = _stored_study(tmp_path, "s\x1b[31m", [1, 2])
    out, err = _consoles(monkeypatch, terminal=False)
    assert run_study(study, tmp_path, force=False, as_json=False, command=["dlscale"]) == 0
    lines = [line for line in err.getvalue().splitlines() if line.startswith("dlscale: run ")]
    assert [line.split(":")[1] for line in lines] == [" run 1 of 2", " run 2 of 2"]
    said = r"torch-single x1, \d+ thr, tiny #0 kept \(stored, not run again\); 0:00:00 elapsed"
    assert all(re.search(said, line)
               for line in lines)  # fmt: skip
    assert lines[-1].endswith("elapsed, time left not known yet")  # no run was timed here
    assert "\x1b" not in out.getvalue() + err.getvalue()
    assert "s\\x1b[31m" in out.getvalue()  # the study's name shown, its escape written out


def test_in_a_terminal_the_live_line_alone(tmp_path: Path, monkeypatch):
    study = _stored_study(tmp_path, "s", [1])
    _, err = _consoles(monkeypatch, terminal=True)
    assert run_study(study, tmp_path, force=False, as_json=False, command=["dlscale"]) == 0
    assert "dlscale: run " not in err.getvalue()


def test_a_runs_line_says_its_figure_its_time_and_the_time_left():
    clock = StudyClock(workers=[1, 2], runs_each=1)
    clock.record(0, 10.0)
    run = FinishedRun(number=1, total=2, name="torch-ddp x1 tiny #0", state="completed",
                      throughput=1234.56, took_s=10.2)  # fmt: skip
    assert run_line(run, 71.6, clock) == (
        "dlscale: run 1 of 2: torch-ddp x1 tiny #0 completed, 1234.6 img/s in 10 s; "
        "0:01:12 elapsed, about 10 s left"
    )
    clock.record(1, 10.0)
    failed = FinishedRun(number=2, total=2, name="x\ny", state="failed", took_s=3.0)
    assert run_line(failed, 80, clock) == (
        "dlscale: run 2 of 2: x\\ny failed in 3 s; 0:01:20 elapsed, none left"
    )
    buffer = io.StringIO()
    lines = RunLines(Console(file=buffer), on=False, clock=clock, started=0.0)
    lines.finished("p", SimpleNamespace(state="completed", result=None), total=1, took_s=1,
                   now=1.0)  # fmt: skip
    assert buffer.getvalue() == "" and lines.count == 1  # off: counted, not said
