"""Numbers and files a user or a forger gives, each read with bounds (issue 42).

What a hostile trial found: ``str.isdigit()`` accepts ``²`` and ``int()`` then raises; numbers
past a float (``1e999``, ``10**400``) raise where they are compared; a TOML file nested 3,000
deep raises RecursionError; a lock, claims or result file may hold any of these. Each case is
one line naming the problem, or the file skipped with one warning, never a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from dlscale import runner
from dlscale.cli import main, tables
from dlscale.config import RunConfig
from dlscale.config.claims import parse_claims
from dlscale.config.study import load_study_file
from dlscale.contract.errors import UserError
from dlscale.contract.files import read_json, write_atomic, write_json_atomic
from dlscale.contract.numbers import finite_number, whole_number, whole_value
from dlscale.contract.text import clip, excerpt
from dlscale.contract.user_models import classes_from_output
from dlscale.launchers.watch import STDERR_TAIL_LINES, TAIL_LINE_CHARS, tail_of
from dlscale.runner import run_point
from dlscale.runtime.script_run import script_batch_size
from dlscale.store import RunStore, locks
from tests.unit.test_store_damage import good_result
from tests.unit.test_store_hostile import _fake_launch

HOSTILE_DIGITS = ["²", "٣", "1" * 5000, "+1", " 1", "1 ", "1\n", "", "0x10", "1_000", "-1"]


@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_whole_number_refuses_what_int_would_refuse_or_misread(text):
    assert whole_number(text) is None


def test_whole_number_reads_plain_digits_within_bounds():
    assert whole_number("0") == 0 and whole_number("4096", high=4096) == 4096
    assert whole_number("4097", high=4096) is None and whole_number("0", low=1) is None
    assert whole_number("9" * 18) == 10**18 - 1 and whole_number("9" * 19) is None


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -float("inf"), 10**400, True, "1", None, [1]]
)
def test_finite_number_refuses_what_is_not_a_finite_real_number(value):
    assert not finite_number(value)


def test_finite_number_and_whole_value_keep_their_bounds():
    assert finite_number(3) and finite_number(2.5, 0, 3) and not finite_number(3.5, 0, 3)
    assert whole_value(5, 1, 9) == 5 and whole_value(10, 1, 9) is None
    assert whole_value(True) is None and whole_value(5.0) is None


def test_an_excerpt_of_any_value_is_short_and_never_raises():
    assert excerpt(10**5000) == "an integer of about 5001 digits"
    assert len(excerpt("x" * 10_000)) <= 40 and excerpt("a\x1b[2Jb") == "'a\\x1b[2Jb'"
    assert clip("y" * 5000, 100).endswith("(5000 characters in all)")


@pytest.mark.parametrize("value", ["²", "1" * 5000, "0", "-2"])
def test_a_scripts_batch_size_that_is_no_whole_number_is_one_line(value):
    with pytest.raises(UserError, match="is not a positive integer") as caught:
        script_batch_size(["--batch-size", value])
    assert len(str(caught.value)) < 200
    assert script_batch_size([f"--batch-size={8}"]) == 8


@pytest.mark.parametrize("columns", ["²", "1" * 5000, "0", "-5", "abc"])
def test_a_columns_variable_that_is_no_whole_number_is_ignored(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert tables._columns() is None
    monkeypatch.setenv("COLUMNS", "120")
    assert tables._columns() == 120


@pytest.mark.parametrize("name", ["COLUMNS", "LINES"])
def test_ls_runs_with_a_terminal_size_that_is_no_number_lists_the_runs(
    tmp_path, monkeypatch, capsys, name
):
    """rich reads $COLUMNS and $LINES with isdigit() and int(): `COLUMNS=² dlscale ls runs`
    was a traceback."""
    run_id, result = good_result()
    RunStore(tmp_path).write_result(run_id, result)
    monkeypatch.setenv(name, "²")
    assert main(["ls", "runs", "--results", str(tmp_path)]) == 0
    listed = capsys.readouterr().out  # its id's end at least (the columns say its start)
    assert run_id.rpartition("-")[2] in listed and name not in os.environ


# a lock anyone who can write to the store can forge


def _forged_lock(tmp_path: Path, folder: str, owner: object) -> Path:
    (tmp_path / folder).mkdir()
    lock = tmp_path / folder / "lock"
    lock.write_text(owner if isinstance(owner, str) else json.dumps(owner))
    return lock


FORGED_OWNERS = {
    "pid-1e999": '{"pid": 1e999, "host": "HOST", "time": 0}',
    "pid-huge": json.dumps({"pid": 10**30, "host": "HOST"}),
    "pid-text": json.dumps({"pid": "12", "host": "HOST"}),
    "pid-negative": json.dumps({"pid": -4, "host": "HOST"}),
    "nested": "[" * 3000 + "]" * 3000,
    "digits": '{"pid": ' + "9" * 5000 + "}",
}


@pytest.mark.parametrize("kind", sorted(FORGED_OWNERS))
def test_a_forged_lock_is_taken_over_at_once_never_a_traceback(tmp_path, kind, monkeypatch):
    run_id, result = good_result()
    lock = _forged_lock(tmp_path, run_id, FORGED_OWNERS[kind].replace("HOST", socket.gethostname()))
    assert locks.read_owner(lock) is None
    assert locks.describe_owner(locks.read_owner(lock)) == "owner unknown"
    # whole JSON with no owner in it: damage, not one being written
    assert locks._stale(lock.read_bytes(), lock.stat().st_mtime)
    calls: list[str] = []
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls))
    point = RunConfig.from_dict(result.config)
    outcome = run_point(point, RunStore(tmp_path), force=False, command=["t"], study="t")
    assert outcome.state == "completed" and calls == [run_id]
    assert not lock.exists()


def test_a_lock_time_past_any_date_is_left_out_of_its_description(tmp_path):
    owner = {"pid": 123, "host": "h", "time": 1e300, "start": 10**40}
    lock = _forged_lock(tmp_path, "point", owner)
    read = locks.read_owner(lock)
    assert read is not None and read["time"] is None and read["start"] is None
    assert locks.describe_owner(read) == "pid 123 on host h"
    owner["time"] = 1.7e9
    lock.write_text(json.dumps(owner))
    assert "since 20" in locks.describe_owner(locks.read_owner(lock))


# claims and study files


def _claim(**changes: object) -> dict[str, object]:
    claim: dict[str, object] = {
        "id": "c1",
        "says": "x",
        "source": "y",
        "measure": "speedup",
        "of": {"backend": "torch-ddp"},
        "published": 2.0,
    }
    claim.update(changes)
    return claim


@pytest.mark.parametrize(
    "changes, said",
    [
        ({"published": 10**400}, "an integer of about 401 digits"),
        ({"published": float("inf")}, "published must be a number above 0"),
        ({"published": 0}, "published must be a number above 0"),
        ({"published": 1e7}, r"at most 1e\+06"),
        ({"id": "c1\n"}, "id must be letters"),  # `$` matched before a trailing newline
        ({"of": {"workers": 10**400}}, "an integer of about 401 digits"),
        ({"needs": {"lr": float("inf")}}, "lr must be a finite number, got inf"),
    ],
)
def test_a_claim_with_a_value_past_its_bounds_is_one_line(changes, said):
    with pytest.raises(UserError, match=said) as caught:
        parse_claims([_claim(**changes)], "study.toml")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


def test_twenty_thousand_claims_are_read_and_a_repeated_id_is_named():
    many = [_claim(id=f"c{i}") for i in range(20_000)]
    assert len(parse_claims(many, "study.toml")) == 20_000
    with pytest.raises(UserError, match="two claims have the id 'c7'"):
        parse_claims([*many, _claim(id="c7")], "study.toml")


@pytest.mark.parametrize(
    "text, said",
    [
        ("x = " + "[" * 3000 + "]" * 3000, "nests tables or arrays too deeply"),
        ("steps = " + "1" * 5000, "more than 4300 digits"),
        ("model = 'tiny'\nname = 5", "name must be a string, got 5"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_study_file_nested_too_deep_or_with_a_huge_number_is_one_line(tmp_path, text, said):
    path = tmp_path / "study.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError, match=said) as caught:
        load_study_file(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("device", ["/dev/zero", "fifo"])
def test_a_study_file_that_is_a_device_or_a_fifo_is_refused_without_reading(tmp_path, device):
    path = Path(device)
    if device == "fifo":
        path = tmp_path / "study.toml"
        os.mkfifo(path)
    with pytest.raises(UserError, match="cannot read study file"):
        load_study_file(path)


def test_a_result_json_larger_than_any_dlscale_writes_is_refused_unread(tmp_path, monkeypatch):
    from dlscale.contract import files

    monkeypatch.setattr(files, "DOCUMENT_LIMIT", 1000)
    monkeypatch.setattr(files.read_regular, "__defaults__", (1000,))
    path = tmp_path / "result.json"
    path.write_text('{"schema": "dlscale.result/3", "pad": "' + "x" * 5000 + '"}')
    with pytest.raises(files.UnreadableFile, match="larger than 1000 bytes"):
        read_json(path, "result")


# output a script can make as long as it likes


def test_the_tail_of_a_ranks_output_is_bounded_and_says_how_much_there_was(tmp_path):
    path = tmp_path / "rank0.stderr"
    path.write_bytes(b"start\n" + b"x" * (5 * 2**20) + b"\nlast line\n")
    lines = tail_of(path)
    assert lines[0].startswith(f"[{path.stat().st_size} bytes in all") and str(path) in lines[0]
    assert lines[-1] == "last line" and len(lines) <= STDERR_TAIL_LINES + 1
    assert all(len(line) < TAIL_LINE_CHARS + 200 for line in lines)
    path.write_text("a\nb\n")
    assert tail_of(path) == ["a", "b"]


def test_a_model_of_fewer_than_two_classes_is_one_line():
    with pytest.raises(UserError, match="predicts 0 classes for each image"):
        classes_from_output("m.py:build", (2, 0), "synthetic", None)
    with pytest.raises(UserError, match="predicts 1 class for each image"):
        classes_from_output("m.py:build", (2, 1), "synthetic", None)


# files a group can share


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_dlscale_writes_follow_the_umask(tmp_path, umask, mode):
    from dlscale.contract import files

    files._umask.cache_clear()
    previous = os.umask(umask)
    try:
        write_atomic(tmp_path / "report.html", "<p>")
        write_json_atomic(tmp_path / "result.json", "claims", {"study": "s", "claims": []})
        store = RunStore(tmp_path / "store")
        (tmp_path / "store").mkdir()
        assert store.reserve("point")
        lock_mode = stat.S_IMODE((tmp_path / "store" / "point" / "lock").stat().st_mode)
    finally:
        os.umask(previous)
        files._umask.cache_clear()
    for name in ("report.html", "result.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode
    assert lock_mode == mode


def test_a_stored_result_copied_into_another_points_folder_is_not_that_point(tmp_path):
    store = RunStore(tmp_path, on_warning=(warnings := []).append)
    run_id, result = good_result()
    store.write_result(run_id, result)
    (tmp_path / "forged").mkdir()
    (tmp_path / "forged" / "result.json").write_bytes(
        (tmp_path / run_id / "result.json").read_bytes()
    )
    assert [r.run_id for r in store.results()] == [run_id]
    (warning,) = warnings
    assert "copied or forged" in warning and "forged/result.json" in warning


def test_a_worker_records_its_failure_even_when_a_signal_handler_raises_meanwhile(tmp_path):
    """torch's SIGCHLD handler raised inside the recording of a ConnectionResetError once (CI,
    a killed DataLoader process): the rank left no record and its peer was blamed."""
    from dlscale import worker
    from dlscale.contract.events import EventWriter, events_path, read_events

    class Interrupted(EventWriter):
        raised = False

        def write(self, record):
            if not self.raised:  # as the handler raises at the next bytecode, once
                self.raised = True
                raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Killed.")
            super().write(record)

    events = Interrupted(events_path(tmp_path, 0), 0)
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as error:
        worker._record(events, type(error).__name__, error, with_traceback=True)
    events.close()
    (record,) = read_events(events_path(tmp_path, 0))
    assert record["event"] == "error" and "Connection reset by peer" in record["message"]
