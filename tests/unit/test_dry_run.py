"""The dry run's summary (issue 44): the time a study would take, estimated from the runs a
results directory holds (the CLI's own run, with nothing stored: tests/e2e/test_cli.py)."""

import subprocess
from pathlib import Path

from dlscale.cli.dry_run import _command, point_names, summary
from dlscale.config.study import expand, load_study_file
from dlscale.contract.text import shell_command

DATA = Path(__file__).resolve().parent.parent / "data"


def test_the_time_is_estimated_from_the_stored_runs_of_as_many_workers():
    settings = load_study_file(DATA / "fixture-study.toml")
    name, description = settings.pop("name"), settings.pop("description")
    study = expand(settings, name=name, description=description)
    lines = summary(study, DATA / "results")  # 3 completed runs stored (a failed one is not)
    assert lines[:3] == [
        "study fixture: tiny CNN on digits, 1 and 2 workers, with a target accuracy",
        "3 points x 1 run(s) = 3 runs",
        "time: under a minute for the runs left, from 3 stored run(s)",
    ]
    assert point_names(study.points) == ["torch-single x1", "torch-ddp x1", "torch-ddp x2"]


def test_points_of_one_backend_and_workers_are_named_by_what_tells_them_apart():
    study = expand({"backend": "torch-ps", "workers": [1, 2], "ps_mode": ["sync", "async"],
                    "lr": [0.1, 0.2], "model": "tiny"})  # fmt: skip
    names = point_names(study.points)
    assert "torch-ps x2 lr=0.2 ps_mode=async" in names
    assert len(set(names)) == len(names)


def test_the_whole_machine_reference_is_named_apart_from_the_baseline():
    """The default study's two torch-single x1 points differ only in their threads: each is
    named by them, the one with every core as the whole-machine reference (issue 71)."""
    study = expand({"backend": ["torch-single", "torch-ddp"], "workers": [1, 2],
                    "model": "tiny", "machine_reference": True}, cores=4)  # fmt: skip
    names = point_names(study.points)
    assert names[:2] == [
        "torch-single x1, 2 thr",
        "torch-single x1, 4 thr (the whole-machine reference: every core to one worker)",
    ]
    assert names[2:] == ["torch-ddp x1", "torch-ddp x2"]


def test_a_long_command_is_continued_at_its_words_and_pastes_as_the_same_command():
    """In a terminal the dry run breaks a command wider than it with backslashes, between the
    shell's words only (a quoted word with spaces and quotes kept whole), so bash reads the
    same words back; a word longer than a line stays whole."""
    words = ["/a/long/path/" + "x" * 60 + "/spec.json", 'it\'s "quoted"', "a  b", "-P", "tail"]
    text = "A='x y' " + shell_command(["printf", "%s\\n", *words])
    shown = _command(text, 40)
    lines = shown.splitlines()
    assert len(lines) > 2 and all(line.endswith(" \\") for line in lines[:-1])
    assert all(len(line) <= 40 for line in lines if "xxxx" not in line)
    said = subprocess.run(["bash", "-c", shown], capture_output=True, text=True, check=True)
    assert said.stdout.splitlines() == words
    assert _command(text, 0) == text and _command("short", 40) == "short"
