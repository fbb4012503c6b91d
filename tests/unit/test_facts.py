"""A run's framework facts read alike for every framework, from what each one records."""

from dlscale.contract.facts import FrameworkFacts
from dlscale.contract.result import Result


def stored(framework: str, environment: dict) -> Result:
    config = {"backend": "b", "model": "m", "dataset": "d", "workers": 1, "options": {}}
    return Result(
        run_id=f"{framework}-run",
        status="completed",
        framework=framework,
        config=config,
        environment=environment,
    )


def test_each_frameworks_own_keys_give_one_shape():
    torch_run = stored(
        "torch",
        {
            "packages": {"torch": "2.13.0+cpu", "numpy": "2.1.0"},
            "torch_version": "2.13.0+cpu",
            "gpu_names": ["NVIDIA H100"],
        },
    )
    tf_run = stored(
        "tensorflow",
        {
            "packages": {"tensorflow-cpu": "2.21.0", "tf-keras": "2.21.0"},
            "tensorflow": "2.21.0",
            "gpus": [],
        },
    )
    # recorded before the workers' package record: MXNet's own fact
    mx_run = stored("mxnet", {"mxnet": "1.9.1", "gpus": 2})
    torch_facts, tf_facts, mx_facts = (r.facts for r in (torch_run, tf_run, mx_run))
    assert torch_facts == FrameworkFacts(
        name="torch", packages=(("torch", "2.13.0+cpu"),), gpus=("NVIDIA H100",)
    )
    assert torch_facts.version == "2.13.0+cpu"
    assert tf_facts.version == "2.21.0" and tf_facts.gpus == ()
    assert tf_facts.packages == (("tensorflow-cpu", "2.21.0"), ("tf-keras", "2.21.0"))
    assert mx_facts.version == "1.9.1" and mx_facts.gpus == ("GPU 0", "GPU 1")
    assert torch_run.row()["facts"] == torch_facts  # what tables and the report read


def test_a_result_that_recorded_nothing_has_no_version():
    facts = stored("torch", {}).facts
    assert facts.version is None and facts.packages == () and facts.gpus == ()
    odd = stored("torch", {"packages": ["torch"], "gpus": True}).facts
    assert odd.version is None and odd.gpus == ()
    # a result from before results named their framework: torch's, by its version key
    assert FrameworkFacts.of("", {"torch_version": "1.13.1"}).version == "1.13.1"


def test_the_reports_gpu_row_reads_every_frameworks_gpus():
    from dlscale.report.html import provenance

    rows = [
        stored("tensorflow", {"gpus": ["/physical_device:GPU:0"]}).row(),
        stored("mxnet", {"gpus": 1}).row(),
        stored("torch", {"gpu_names": []}).row(),
    ]
    assert "<th>GPU</th><td>/physical_device:GPU:0, GPU 0, none</td>" in provenance(rows)
