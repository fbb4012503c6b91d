"""A run's framework facts read alike for every framework, from what each one records."""

from dlscale.contract.facts import FrameworkFacts


def test_each_frameworks_own_keys_give_one_shape():
    torch_row = {
        "framework": "torch",
        "config": {"device": "cuda"},
        "environment": {
            "packages": {"torch": "2.13.0+cpu", "numpy": "2.1.0"},
            "torch_version": "2.13.0+cpu",
            "gpu_names": ["NVIDIA H100"],
        },
    }
    tf_row = {
        "framework": "tensorflow",
        "config": {"device": "cpu"},
        "environment": {
            "packages": {"tensorflow-cpu": "2.21.0", "tf-keras": "2.21.0"},
            "tensorflow": "2.21.0",
            "gpus": [],
        },
    }
    mx_row = {  # recorded before the workers' package record: MXNet's own fact
        "framework": "mxnet",
        "config": {"device": "cpu"},
        "environment": {"mxnet": "1.9.1", "gpus": 2},
    }
    torch_facts, tf_facts, mx_facts = map(FrameworkFacts.of, (torch_row, tf_row, mx_row))
    assert torch_facts == FrameworkFacts(
        name="torch", packages=(("torch", "2.13.0+cpu"),), gpus=("NVIDIA H100",)
    )
    assert torch_facts.version == "2.13.0+cpu"
    assert tf_facts.version == "2.21.0" and tf_facts.gpus == ()
    assert tf_facts.packages == (("tensorflow-cpu", "2.21.0"), ("tf-keras", "2.21.0"))
    assert mx_facts.version == "1.9.1" and mx_facts.gpus == ("GPU 0", "GPU 1")


def test_a_result_that_recorded_nothing_has_no_version():
    facts = FrameworkFacts.of({"framework": "torch", "config": {}, "environment": {}})
    assert facts.version is None and facts.packages == () and facts.gpus == ()
    odd = {"framework": "torch", "environment": {"packages": ["torch"], "gpus": True}}
    assert FrameworkFacts.of(odd).version is None and FrameworkFacts.of(odd).gpus == ()


def test_the_reports_gpu_row_reads_every_frameworks_gpus():
    from dlscale.report.html import provenance

    rows = [
        {"framework": "tensorflow", "environment": {"gpus": ["/physical_device:GPU:0"]}},
        {"framework": "mxnet", "environment": {"gpus": 1}},
        {"framework": "torch", "environment": {"gpu_names": []}},
    ]
    assert "<th>GPU</th><td>/physical_device:GPU:0, GPU 0, none</td>" in provenance(rows)
