"""The asynchronous rule as an option: in the run id only where it changes the run, and a
stored run from before the option reads as the rule it applied (tests/distributed/
test_async_rule.py proves each engine applies it)."""

import pytest

from dlscale.config import RunConfig
from dlscale.contract.algorithms import async_gradient_scale
from dlscale.contract.result import Result
from dlscale.store import RunStore

ASYNC = {
    "torch-ps": {"ps_mode": "async"},
    "mxnet-kv": {"kvstore": "dist_async"},
    "tf-ps": {},
}


def identity_has_the_rule(backend: str, **options) -> bool:
    config = RunConfig.make(model="tiny", backend=backend, workers=2, **options)
    return "async_update" in config.identity()["options"]["backend"]


def test_the_rule_is_in_the_run_id_where_it_changes_the_run_and_differs_from_before():
    # torch-ps scaled by 1/N before the option: its points keep their ids, sync or async
    assert not identity_has_the_rule("torch-ps")
    assert not identity_has_the_rule("torch-ps", ps_mode="async")
    assert identity_has_the_rule("torch-ps", ps_mode="async", async_update="sum")
    # mxnet-kv's dist_async and tf-ps applied each push whole: the new default is a new point
    assert not identity_has_the_rule("mxnet-kv")  # dist_sync: the rule changes nothing
    assert not identity_has_the_rule("mxnet-kv", kvstore="dist_sync", async_update="sum")
    assert identity_has_the_rule("mxnet-kv", kvstore="dist_async")
    assert not identity_has_the_rule("mxnet-kv", kvstore="dist_async", async_update="sum")
    assert identity_has_the_rule("tf-ps")
    assert not identity_has_the_rule("tf-ps", async_update="sum")
    assert not identity_has_the_rule("tf-ps", ps_mode="sync")  # no asynchronous update there


def test_run_ids_of_points_stored_before_the_rule_are_unchanged():
    """Ids main gave these points at 34f2442, before async_update existed."""
    ids = {
        ("torch-ps", "sync"): "tiny-torch-ps-synthetic-w2-46ea9bc7e7",
        ("torch-ps", "async"): "tiny-torch-ps-synthetic-w2-de53c44ddc",
        ("mxnet-kv", "sync"): "tiny-mxnet-kv-synthetic-w2-6135804468",
        ("mxnet-kv", "async"): "tiny-mxnet-kv-synthetic-w2-f3cbd28b13",
        ("tf-ps", "async"): "tiny-tf-ps-synthetic-w2-d62e7b1e9c",
    }
    before = {"torch-ps": "mean", "mxnet-kv": "sum", "tf-ps": "sum"}  # what each engine did
    for (backend, mode), run_id in ids.items():
        options = ASYNC[backend] if mode == "async" else {}
        config = RunConfig.make(
            model="tiny", backend=backend, workers=2, async_update=before[backend], **options
        )
        assert config.run_id() == run_id, (backend, mode)


@pytest.mark.parametrize(
    ("backend", "mode", "reads_as"),
    [
        ("torch-ps", "async", "mean"),
        ("mxnet-kv", "async", "sum"),
        ("tf-ps", "async", "sum"),
        ("mxnet-kv", "sync", "mean"),  # the rule changed nothing: the default
    ],
)
def test_a_result_stored_before_the_rule_reads_as_the_rule_it_applied(
    tmp_path, backend, mode, reads_as
):
    options = ASYNC[backend] if mode == "async" else {}
    config = RunConfig.make(model="tiny", backend=backend, workers=2, **options)
    stored = config.to_dict()
    del stored["options"]["backend"]["async_update"]  # as a result of 34f2442 holds it
    result = Result(run_id=config.run_id(), status="completed", config=stored)
    RunStore(tmp_path).write_result(result.run_id, result)
    (read,) = RunStore(tmp_path).results()
    assert read.settings["async_update"] == reads_as


def test_the_scale_of_each_rule():
    assert async_gradient_scale("mean", 4) == 0.25
    assert async_gradient_scale("sum", 4) == 1.0
    with pytest.raises(ValueError, match="mean, sum"):
        async_gradient_scale("median", 4)
