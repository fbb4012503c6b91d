"""dlscale doctor's rules as data: what a node lacks for a study, which packages a backend
needs, and srun's labelled lines read back; the command itself runs here in
tests/e2e/test_cli.py's way (local) and on 2 Slurm nodes in tests/cluster/test_slurm_hosts.py."""

import json
import sys

import pytest

from dlscale.cli.doctor import _packages, _run
from dlscale.config import RunConfig
from dlscale.contract.errors import UserError
from dlscale.launchers.slurm import SlurmLauncher
from dlscale.runtime.node_check import missing

NODE = {"python": "3.11.7", "dlscale_version": "0.1.0", "gpu_names": ["H100"],
        "parent_packages": {"torch": "2.13.0", "horovod": "0.28.1"}}  # fmt: skip


def _missing(facts, packages=("torch",), cuda=False):
    return missing(facts, packages=packages, cuda=cuda, dlscale_version="0.1.0")


def test_a_node_with_everything_lacks_nothing_and_each_lack_is_named():
    assert _missing(NODE, ("torch", "horovod"), cuda=True) == []
    assert _missing({**NODE, "python": "3.9.2"}) == ["Python >= 3.11 (has 3.9.2)"]
    assert _missing({**NODE, "dlscale_version": "0.0.9"}) == ["dlscale 0.1.0 (has 0.0.9)"]
    assert _missing(NODE, ("tensorflow",)) == ["tensorflow"]
    assert _missing({**NODE, "gpu_names": []}, cuda=True) == ["a CUDA GPU (sees none; cuda absent)"]
    assert _missing({**NODE, "gpu_names": None}, cuda=True) == [
        "a framework that sees GPUs (torch reports them)"
    ]
    assert _missing({**NODE, "torch_error": "ImportError: libcudart.so.12"}) == [
        "torch loads (ImportError: libcudart.so.12)"
    ]


def test_a_backend_needs_its_frameworks_package_and_horovod_where_it_uses_it():
    assert _packages("torch-ddp") == ("torch",)
    assert _packages("horovod-torch") == ("torch", "horovod")
    assert _packages("horovod-keras")[-1] == "horovod" and "tensorflow" in _packages("tf-ps")


def test_the_nodes_facts_are_read_from_srun_labelled_lines_and_a_failure_is_one_line():
    lines = [f"{i}: " + json.dumps({"hostname": f"node{i}"}) for i in (1, 0)]
    code = f"print({chr(10).join(lines)!r}); print('srun: a line of its own')"
    nodes = _run((sys.executable, "-c", code))
    assert nodes == [(0, {"hostname": "node0"}), (1, {"hostname": "node1"})]
    failing = (
        "import sys; sys.stderr.write('srun: error: Unable to allocate resources\\n'); sys.exit(1)"
    )
    with pytest.raises(UserError, match=r"the node check failed on the nodes .*Unable to allocate"):
        _run((sys.executable, "-c", failing))
    own = "import sys; sys.stderr.write('dlscale: error: the Ray cluster is gone\\n'); sys.exit(2)"
    with pytest.raises(UserError, match=r"^the Ray cluster is gone$"):  # its words, not wrapped
        _run((sys.executable, "-c", own))
    with pytest.raises(UserError, match="cannot run no-such-srun: not installed here"):
        _run(("no-such-srun",))
    # mpirun --tag-output's and horovodrun's labels
    tagged = ["[1,1]<stdout>:" + json.dumps({"hostname": "b"}), "[0]<stdout>:" + json.dumps({})]
    code = f"print({chr(10).join(tagged)!r})"
    assert _run((sys.executable, "-c", code)) == [(0, {}), (1, {"hostname": "b"})]


def test_under_slurm_the_check_is_one_task_on_each_node_with_its_gpus():
    config = RunConfig.make(backend="torch-ddp", launcher="slurm", device="cuda", nodes=3,
                            cpus_per_node=16, gpus_per_node=4, partition="gpu")  # fmt: skip
    argv = SlurmLauncher().on_each_node(config, ("/py", "-P", "-m", "dlscale.runtime.node_check"))
    assert argv[0] == "srun" and argv[-4:] == ("/py", "-P", "-m", "dlscale.runtime.node_check")
    for option in ("--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--label",
                   "--partition=gpu", "--gpus-per-node=4"):  # fmt: skip
        assert option in argv
