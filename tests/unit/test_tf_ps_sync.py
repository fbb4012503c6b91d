"""tf-ps's synchronous mode as data: which processes it starts, what its run id keeps, and the
check every worker makes of its step tokens (tests/distributed/test_tensorflow.py runs it)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.config import RunConfig

RACE = Path(__file__).with_name("tf_token_race.py")


def check_token(previous: int, token: int, worker: int) -> int:
    """The check under test, imported with TensorFlow (4 s) by the test that uses it, not when
    pytest collects this file."""
    from dlscale.frameworks.tensorflow.ps_sync import check_token as check

    return check(previous, token, worker=worker)


def roles(**options) -> list[tuple[str, int, bool, bool]]:
    layout = RunConfig.make(model="tiny", backend="tf-ps", workers=3, **options).layout()
    return [(p.role, p.index, p.trains, p.exits) for p in layout.processes]


def test_every_worker_trains_and_the_ps_tasks_serve():
    assert roles(ps_mode="sync", num_ps=2) == [
        ("worker", 0, True, True),
        ("worker", 1, True, True),
        ("worker", 2, True, True),
        ("ps", 0, False, False),
        ("ps", 1, False, False),
    ]
    # asynchronous (the default): the chief coordinates, workers and the ps task serve
    assert [r[:3] for r in roles()] == [("chief", 0, True)] + [
        ("worker", i, False) for i in range(3)
    ] + [("ps", 0, False)]


def test_the_mode_is_in_the_run_id_only_when_it_is_sync():
    before = RunConfig.make(model="tiny", backend="tf-ps", workers=2, async_update="sum")
    assert before.run_id() == "tiny-tf-ps-synthetic-w2-d62e7b1e9c"  # as at 34f2442
    assert RunConfig.make(model="tiny", backend="tf-ps", workers=2, ps_mode="async",
                          async_update="sum").run_id() == before.run_id()  # fmt: skip
    sync = RunConfig.make(model="tiny", backend="tf-ps", workers=2, ps_mode="sync")
    assert sync.run_id() != before.run_id()
    options = sync.identity()["options"]["backend"]
    assert options["ps_mode"] == "sync" and "async_update" not in options


def test_a_worker_goes_on_only_to_the_next_global_step():
    assert check_token(0, 1, worker=1) == 1
    assert check_token(41, 42, worker=0) == 42


@pytest.mark.parametrize(
    ("previous", "token", "what"),
    [(3, 3, "two gradients of one worker"), (3, 5, "no gradient of it")],
)
def test_a_mixed_update_ends_the_run_with_what_happened(previous, token, what):
    with pytest.raises(RuntimeError, match=what) as error:
        check_token(previous, token, worker=1)
    assert f"worker 1 pushed its gradient for global step {previous}" in str(error.value)
    assert f"was handed step {token}" in str(error.value)


@pytest.mark.dist
def test_a_fast_worker_cannot_take_the_token_of_a_worker_that_pushed_but_has_not_taken_it():
    """TF1's workers share one token queue: the fast worker's second push, made while the slow
    worker had pushed its first but not yet taken its token, took that token (a CI run ended on
    it: two gradients of one worker in one update). The barrier holds the second push until the
    slow worker takes its token. Both cases, side by side (8 s each, TensorFlow's start)."""
    cases = {
        case: subprocess.Popen(
            [sys.executable, str(RACE), *([] if case == "barrier" else ["--no-barrier"])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in ("barrier", "none")
    }
    seen = {}
    for case, process in cases.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        seen[case] = json.loads(out.strip().splitlines()[-1])
    # without the barrier: TF1's optimizer as it is, the steal (so the probe is a real one)
    assert seen["none"] == {"first": 1, "second": 1, "slow_took": "timed out"}
    # with it: the fast worker waits, and the slow worker's token is still there for it
    assert seen["barrier"] == {"first": 1, "second": "timed out", "slow_took": 1}
