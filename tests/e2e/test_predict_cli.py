"""``dlscale predict`` as a user runs it: from a given profile, from a measured 1-worker run
(stored, then reused), and with bad input."""

import json
import re
from pathlib import Path

import pytest

from dlscale.perfmodel.costs import Network, collective_s
from dlscale.perfmodel.patterns import variants


def _records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_a_given_profile_is_predicted_to_a_thousand_workers(cli):
    run = cli(
        "predict", "--model", "resnet50", "--workers", "1..1024", "--bandwidth", "25Gbit",
        "--latency", "5us", "--compute-ms", "900", "--gradient-bytes", "102228128",
        "--target-efficiency", "0.9", "--json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    records = _records(run.stdout)
    ring = [r for r in records if r.get("strategy") == "ring" and r["kind"] == "prediction"]
    assert [r["workers"] for r in ring] == [2**k for k in range(11)]
    # by hand: 0.9 s + 2*1023*5us + 2*(1023/1024)*102228128 B * 8/25e9 s per byte
    comm = collective_s("all_reduce", 102228128, 1024, Network.from_link(25e9, 5e-6))
    assert comm == pytest.approx(2 * 1023 * 5e-6 + 2 * 1023 / 1024 * 102228128 * 8 / 25e9)
    assert ring[-1]["step_s"] == pytest.approx(0.9 + comm)
    assert ring[-1]["efficiency"] == pytest.approx(0.9 / (0.9 + comm))
    needed = {
        r["strategy"]: r["bandwidth_bit_s"] for r in records if r["kind"] == "bandwidth_needed"
    }
    assert set(needed) == set(variants())  # every pattern, each with its overlap where it has one
    assert needed["ring-overlap"] < needed["ring"] < needed["tree"]
    table = cli(
        "predict", "--bandwidth", "25Gbit", "--compute-ms", "900", "--gradient-bytes", "1e8",
        "--workers", "1,8", "--strategy", "ring",
    )  # fmt: skip
    assert (
        table.returncode == 0
        and "1.0x 100%" in table.stdout
        and "compute profile:\n  step: 900 ms (given)\n  gradient: 100,000,000 bytes (given)"
        in table.stdout
    )


def test_the_overlap_hides_behind_the_backward_share_given_else_two_thirds(cli):
    """100 ms a step; 1 MB on 1 Gbit/s at 2 workers, no latency: 8 ms of ring. At a share of
    0.05 only 5 ms of backward hide it (100 - 5 + 8 = 103 ms); assumed 2/3, all of it."""
    flags = ("predict", "--bandwidth", "1gbit", "--latency", "0us", "--compute-ms", "100",
             "--gradient-bytes", "1e6", "--workers", "2", "--strategy", "ring-overlap")  # fmt: skip
    given = cli(*flags, "--backward-share", "0.05", "--json")
    assumed = cli(*flags, "--json")
    assert given.returncode == 0 == assumed.returncode, given.stderr + assumed.stderr
    (row,), (default,) = _records(given.stdout), _records(assumed.stdout)
    assert row["step_s"] == pytest.approx(0.095 + 0.008)
    assert default["step_s"] == pytest.approx(0.100)
    table = cli(*flags, "--backward-share", "0.05")
    assert "backward: 5% of the step (given)" in table.stdout
    assert "backward: 2/3 of the step (assumed" in cli(*flags).stdout


def test_a_gradient_in_many_messages_pays_each_ones_latency(cli):
    """jax-dp's 59 arrays at 64 workers: each further message pays every strategy's latency
    terms once more (ring 2(p-1), tree 2 ceil(log2 p), parameter servers 2), its bytes the
    same: by hand on 100 us a message, 1 Gbit/s."""
    flags = ("predict", "--bandwidth", "1gbit", "--latency", "100us", "--compute-ms", "190",
             "--gradient-bytes", "1078888", "--workers", "64", "--json")  # fmt: skip
    one, many = cli(*flags), cli(*flags, "--messages", "59")
    assert one.returncode == 0 == many.returncode, one.stderr + many.stderr
    single = {r["strategy"]: r for r in _records(one.stdout) if r["kind"] == "prediction"}
    split = {r["strategy"]: r for r in _records(many.stdout) if r["kind"] == "prediction"}
    rounds = {"ring": 2 * 63, "ring-overlap": 2 * 63, "tree": 2 * 6, "ps-sync": 2}
    for strategy, count in rounds.items():
        assert split[strategy]["messages"] == 59 and single[strategy]["messages"] == 1
        extra = 58 * count * 100e-6
        assert split[strategy]["comm_s"] == pytest.approx(single[strategy]["comm_s"] + extra)
    assert split["ring"]["step_s"] == pytest.approx(0.190 + single["ring"]["comm_s"] + 0.7308)
    # asynchronous: a worker's own pushes and pulls are priced as one, as validation priced
    # the asynchronous points (the ps-async record: not messaged), at 64 workers and at 2
    assert split["ps-async"]["step_s"] == single["ps-async"]["step_s"]
    two = [cli(*flags[:-2], "2", "--strategy", "ps-async", "--json", *more) for more in
           ((), ("--messages", "59"))]  # fmt: skip
    (alone,), (apart,) = (_records(run.stdout) for run in two)
    assert apart["step_s"] == pytest.approx(alone["step_s"])
    table = cli(*flags[:-1], "--messages", "59", "--strategy", "ring")
    assert "the gradient in 59 messages (given)" in table.stdout


def test_a_stored_microbench_predicts_each_strategy_with_its_own_patterns_fit(cli, tmp_path):
    from dlscale.store import write_json_atomic

    def fit(pattern, alpha, beta):
        return {"pattern": pattern, "alpha_s": alpha, "beta_s_per_byte": beta,
                "median_error": 0.1}  # fmt: skip

    fits = {"ring": fit("ring", 1e-4, 1e-9), "p2p": fit("p2p", 2e-4, 4e-9)}  # no tree fit
    (tmp_path / "microbench-x").mkdir()
    write_json_atomic(
        tmp_path / "microbench-x" / "microbench.json", "microbench",
        {"started_at": 1.0, "processes": 2, "rows": [], "error": None, "fit": fits["ring"],
         "fits": fits, "config": {"backend": "torch-ddp", "launcher": "local", "options": {}}},
    )  # fmt: skip
    run = cli("predict", "--network-from", str(tmp_path), "--compute-ms", "100",
              "--gradient-bytes", "1e6", "--workers", "4", "--strategy", "ring,tree,ps-sync",
              "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    step = {r["strategy"]: r["step_s"] for r in _records(run.stdout)}
    assert step["ring"] == pytest.approx(0.1 + 2 * 3 * 1e-4 + 2 * 3 / 4 * 1e6 * 1e-9)
    assert step["tree"] == pytest.approx(0.1 + 2 * 2 * (1e-4 + 1e6 * 1e-9))  # the ring's fit
    assert step["ps-sync"] == pytest.approx(0.1 + 2 * 2e-4 + 2 * 4 * 1e6 * 4e-9)  # p2p's fit
    table = cli("predict", "--network-from", str(tmp_path), "--compute-ms", "100",
                "--gradient-bytes", "1e6", "--workers", "4")  # fmt: skip
    said = re.sub(r"\n {2}", " ", table.stdout)  # each line as said, before its wrapping
    assert "priced by: p2p fit, ring fit" in said and "fit's median error 10.0%" in said


def test_a_parameter_server_fit_predicts_ps_sync_with_the_servers_asked_for(cli, tmp_path):
    """A microbench's ps fit (MXNet's push and pull) before its p2p fit: ps-sync on it with
    --servers, ring on the ring's."""
    from dlscale.store import write_json_atomic

    def fit(pattern, alpha, beta):
        return {"pattern": pattern, "alpha_s": alpha, "beta_s_per_byte": beta,
                "median_error": 0.1}  # fmt: skip

    fits = {"ring": fit("ring", 1e-4, 1e-9), "p2p": fit("p2p", 2e-4, 4e-9),
            "ps": fit("ps", 3e-4, 2e-9)}  # fmt: skip
    (tmp_path / "microbench-x").mkdir()
    write_json_atomic(
        tmp_path / "microbench-x" / "microbench.json", "microbench",
        {"started_at": 1.0, "processes": 2, "rows": [], "error": None, "fit": fits["ring"],
         "fits": fits, "config": {"backend": "x", "launcher": "local", "options": {}}},
    )  # fmt: skip
    run = cli("predict", "--network-from", str(tmp_path), "--compute-ms", "100",
              "--gradient-bytes", "1e6", "--workers", "4", "--strategy", "ring,ps-sync",
              "--servers", "2", "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    step = {r["strategy"]: r["step_s"] for r in _records(run.stdout)}
    assert step["ring"] == pytest.approx(0.1 + 2 * 3 * 1e-4 + 2 * 3 / 4 * 1e6 * 1e-9)
    # 2 servers take 4 workers' 1 MB: 2 MB each way on each server's link
    assert step["ps-sync"] == pytest.approx(0.1 + 2 * 3e-4 + 2 * 2 * 1e6 * 2e-9)
    table = cli("predict", "--network-from", str(tmp_path), "--compute-ms", "100",
                "--gradient-bytes", "1e6", "--workers", "4",
                "--strategy", "ring,ps-sync")  # fmt: skip
    assert "priced by: ps fit, ring fit" in re.sub(r"\n {2}", " ", table.stdout)


@pytest.mark.dist
def test_the_profile_is_measured_once_and_then_reused(cli, tmp_path: Path):
    flags = ("predict", "--model", "tiny", "--batch", "8", "--bandwidth", "1gbit",
             "--workers", "1,2,4", "--results", str(tmp_path))  # fmt: skip
    first = cli(*flags)
    assert first.returncode == 0, first.stderr
    assert "measuring tiny's step at batch 8" in first.stderr
    (result,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/result.json")]
    assert result["config"]["backend"] == "torch-single" and result["status"] == "completed"
    step_ms = result["metrics"]["step_time_p50_ms"]
    printed = re.sub(r"\n {4}", " ", first.stdout)  # each figure's line, wrapped at words
    said = re.search(r"step: ([\d.]+) ms, measured now: 1 worker of torch-single \(run ", printed)
    assert said and float(said.group(1)) == pytest.approx(step_ms, abs=0.05)
    assert f"in {tmp_path})" in printed  # kept where the user said
    # the same run timed its plain step and a forward alone after its windows: the overlap's
    # backward share is measured there, not assumed
    forward, whole = (result["metrics"][k] for k in ("forward_time_p50_ms",
                                                      "step_time_nosync_p50_ms"))  # fmt: skip
    share = min(1.0, max(0.0, 1 - forward / whole))
    assert f"backward: {share:.0%} of the step (1 - its forward alone / its plain step" in (printed)
    assert "assumed" not in first.stdout
    again = cli(*flags)
    assert again.returncode == 0 and len(list(tmp_path.glob("*/result.json"))) == 1
    # against batch size: batch 8 reused, 16 measured; each batch predicted on its own step
    both = cli(*flags[:4], "8,16", *flags[5:], "--json")
    assert both.returncode == 0, both.stderr
    assert "measuring tiny's step at batch 16" in both.stderr and "batch 8" not in both.stderr
    records = [r for r in _records(both.stdout) if r["workers"] == 1]
    steps = {r["batch"]: r["step_s"] for r in records if r["strategy"] == "ring"}
    assert steps[8] == pytest.approx(step_ms / 1e3) and set(steps) == {8, 16}
    table = cli(*flags[:4], "8,16", *flags[5:])
    assert "compute profile against batch (1 worker): 8: " in table.stdout
    # no --results: measured in a temporary directory, removed after it; nothing written where
    # the command ran
    here, scratch = tmp_path / "here", tmp_path / "scratch"
    here.mkdir(), scratch.mkdir()
    unkept = cli(*flags[:-2], cwd=here, env={"TMPDIR": str(scratch)})
    assert unkept.returncode == 0, unkept.stderr
    assert "dlscale: nothing stored in dlscale-results: measuring tiny's step at batch 8" in (
        unkept.stderr
    )
    assert "not kept: --results DIR keeps it for reuse" in re.sub(r"\n {4}", " ", unkept.stdout)
    assert list(here.iterdir()) == [] and list(scratch.iterdir()) == []


@pytest.mark.dist
def test_another_frameworks_step_is_measured_with_its_reference_backend(cli, tmp_path: Path):
    """--framework tensorflow measures tf-single's step (the framework registry names it), and
    a framework without a reference backend is one line naming those that have one."""
    flags = ("predict", "--model", "tiny", "--batch", "8", "--bandwidth", "1gbit",
             "--workers", "1,2", "--results", str(tmp_path))  # fmt: skip
    run = cli(*flags, "--framework", "tensorflow")
    assert run.returncode == 0, run.stderr
    (result,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/result.json")]
    assert result["config"]["backend"] == "tf-single" and result["status"] == "completed"
    assert "1 worker of tf-single" in re.sub(r"\n {4}", " ", run.stdout)
    bad = cli(*flags, "--framework", "caffe")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--framework 'caffe' has no reference backend" in bad.stderr
    assert "frameworks that do: jax, mxnet, tensorflow, torch" in bad.stderr


def test_messages_from_an_engine_that_never_ran_here_are_one_line(cli, tmp_path):
    run = cli("predict", "--compute-ms", "10", "--gradient-bytes", "1e6", "--bandwidth", "1gbit",
              "--messages", "jax-dp", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == (
        f"dlscale: error: --messages jax-dp: no completed run of jax-dp with resnet50 in "
        f"{tmp_path} lists its messages; run one there (dlscale run --backend jax-dp --model "
        f"resnet50 --workers 2 --results {tmp_path}), or give --messages N"
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--bandwidth", "fast"), "--bandwidth 'fast': cannot read the rate"),
        (("--bandwidth", "1gbit", "--latency", "nan"), "cannot read the latency"),
        (
            ("--bandwidth", "1gbit", "--workers", "0..4"),
            "give A..B (the powers of 2 from A to B, A >= 1)",
        ),
        (("--bandwidth", "1gbit", "--workers", "a,b"), "give A..B"),
        (("--bandwidth", "1gbit", "--strategy", "ring,<b>x</b>"), "unknown pattern '<b>x</b>'"),
        (("--bandwidth", "1gbit", "--pattern", "ps-async-overlap"), "known: ring, ring-overlap"),
        (("--bandwidth", "1gbit", "--pattern", ","), "--pattern: give one or more of ring"),
        (("--bandwidth", "1gbit", "--ranks-per-node", "4"), "give the link inside a node"),
        (("--bandwidth", "1gbit", "--ranks-per-node", "0"), "--ranks-per-node"),
        (
            ("--bandwidth", "1gbit", "--ranks-per-node", "2", "--intra-bandwidth", "<b>fast"),
            "--intra-bandwidth",
        ),
        (
            (
                "--bandwidth",
                "1gbit",
                "--ranks-per-node",
                "2",
                "--intra-bandwidth",
                "1gbit",
                "--intra-latency",
                "nan",
            ),
            "--intra-latency",
        ),
        (("--bandwidth", "1gbit", "--target-efficiency", "nan"), "'nan' is not a number in (0, 1]"),
        (
            ("--bandwidth", "1gbit", "--compute-ms", "nan", "--gradient-bytes", "1"),
            "--compute-ms: 'nan'",
        ),
        (("--bandwidth", "1gbit", "--compute-ms", "1", "--gradient-bytes", "-1"), "in [0, 1e+15]"),
        (("--bandwidth", "1gbit", "--servers", "0"), "--servers: '0' is not a whole number from 1"),
        (("--bandwidth", "1gbit", "--backward-share", "1.5"), "--backward-share: '1.5' is not a"),
        (("--bandwidth", "1gbit", "--backward-share", "nan"), "'nan' is not a number in [0, 1]"),
        (("--bandwidth", "1gbit", "--batch", "8,x"), "give a number or a list"),
        (("--bandwidth", "1gbit", "--batch", "0"), "every batch must be 1 to"),
        (("--bandwidth", "1gbit", "--batch", "8,16"), "give one --batch with it"),
        (
            ("--bandwidth", "1gbit", "--messages", "0"),
            "--messages must be a whole number from 1 to 1,000,000",
        ),
        (("--bandwidth", "1gbit", "--messages", "2000000"), "got '2000000'"),
        (("--bandwidth", "1gbit", "--messages", "<b>x</b>"), "give a count, or the backend"),
    ],
)
def test_bad_input_is_one_line(cli, flags, said):
    run = cli("predict", "--compute-ms", "10", "--gradient-bytes", "1e6", *flags)
    assert run.returncode == 2, run.stdout
    assert said in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_two_levels_of_network_price_the_hierarchical_all_reduce_by_hand(cli):
    """4 workers a node on 600 Gbit/s inside and 100 Gbit/s between: the hierarchical
    all-reduce's reduce-scatter and all-gather run inside, its all-reduce of the shards among
    the 128 nodes between; the flat ring crosses the slow link at all 2 x 511 steps. Every
    pattern is printed, each said not validated (nothing measured here)."""
    flags = (
        "predict",
        "--model",
        "resnet44",
        "--compute-ms",
        "100",
        "--workers",
        "8,64,512",
        "--ranks-per-node",
        "4",
        "--bandwidth",
        "100Gbit",
        "--intra-bandwidth",
        "600Gbit",
    )
    run = cli(*flags, "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = {(r["strategy"], r["workers"]): r for r in _records(run.stdout)}
    assert {name for name, _ in rows} == set(variants())
    n = rows["ring", 512]["comm_s"]  # recover n from the ring: 2 x 511 x 5 us + ...
    n = (n - 2 * 511 * 5e-6) / (2 * 511 / 512 * 8 / 100e9)
    assert n == pytest.approx(2_634_344, rel=1e-9)  # resnet44's 658,586 float32 parameters
    inside = 3 * 2e-6 + 3 / 4 * n * 8 / 600e9  # each half of the ring among a node's 4
    between = 2 * 127 * 5e-6 + 2 * 127 / 128 * n * 8 / 100e9
    assert rows["hierarchical", 512]["comm_s"] == pytest.approx(2 * inside + between)
    assert rows["hierarchical", 512]["ranks_per_node"] == 4
    assert rows["hierarchical", 512]["interval"] is None  # never validated
    table = cli(*flags)
    assert table.returncode == 0, table.stderr
    assert "100 Gbit/s, 5 us links between nodes; 600 Gbit/s, 2 us inside (4 workers a" in (
        re.sub(r"\n {2}", " ", table.stdout)
    )
    for name in variants():
        assert re.search(rf"│ {re.escape(name)} .*not validated │", table.stdout), name


def test_two_levels_fitted_by_a_microbench_on_one_host_and_one_across_hosts(cli, tmp_path):
    """--network-from with --ranks-per-node: the link between nodes from the newest
    microbench across nodes, the link inside from the newest on one node without an emulated
    link; without the one-node run, one line naming the microbench to run."""
    from dlscale.store import write_json_atomic

    def bench(name, alpha, beta, launcher, nnodes, network=""):
        fit = {"pattern": "ring", "alpha_s": alpha, "beta_s_per_byte": beta,
               "median_error": 0.05}  # fmt: skip
        options = {"launcher": {"network": network, "nnodes": nnodes}}
        (tmp_path / name).mkdir()
        write_json_atomic(
            tmp_path / name / "microbench.json", "microbench",
            {"started_at": 2.0 if nnodes > 1 else 1.0, "processes": 2, "rows": [],
             "error": None, "fit": fit, "fits": {"ring": fit},
             "config": {"backend": "torch-ddp", "launcher": launcher, "options": options}},
        )  # fmt: skip

    bench("microbench-across", 2e-4, 8e-8, "mpirun", 2, "100mbit")  # 100 Mbit/s between
    flags = ("predict", "--network-from", str(tmp_path), "--compute-ms", "100",
             "--gradient-bytes", "1e6", "--workers", "8", "--ranks-per-node", "2")  # fmt: skip
    alone = cli(*flags)
    assert alone.returncode == 2 and "has no microbench on one node" in alone.stderr
    assert "dlscale microbench --workers 2" in alone.stderr and "Traceback" not in alone.stderr
    bench("microbench-inside", 1e-5, 1e-10, "local", 1)  # 80 Gbit/s on one host
    run = cli(*flags, "--pattern", "hierarchical,ring", "--json")
    assert run.returncode == 0, run.stderr
    comm = {r["strategy"]: r["comm_s"] for r in _records(run.stdout)}
    inside = 1e-5 + 1 / 2 * 1e6 * 1e-10  # each half of the ring between a node's 2 ranks
    between = 2 * 3 * 2e-4 + 2 * 3 / 4 * 1e6 * 8e-8  # the shards' all-reduce among 4 nodes
    assert comm["hierarchical"] == pytest.approx(2 * inside + between)
    assert comm["ring"] == pytest.approx(2 * 7 * 2e-4 + 2 * 7 / 8 * 1e6 * 8e-8)
    words = re.sub(r"\n {2}", " ", cli(*flags).stdout)
    assert (
        "fitted by microbench-across" in words
        and "inside a node: fitted by microbench-inside" in words
    )


def test_a_language_models_profile_is_measured_on_random_tokens():
    """A profile measured for a GPT runs on the generated data set of its samples (random
    tokens): synthetic images were refused for it ('takes token sequences')."""
    from dlscale.cli.profile import _generated_dataset

    assert _generated_dataset("gpt-mini") == "tokens"
    assert _generated_dataset("resnet44") == "synthetic"
    assert _generated_dataset("<b>no such model") == "synthetic"  # the run's checks name it
