"""The performance model's formulas against cases computed by hand, the fit against
synthetic times with known costs, and the inverse question (bandwidth for an efficiency)."""

import math

import numpy as np
import pytest

from dlscale.contract.errors import UserError
from dlscale.perfmodel.costs import Network, collective_s
from dlscale.perfmodel.fit import fit_network
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import PATTERNS
from dlscale.perfmodel.predict import Profile, bandwidth_for, predict

NET = Network(alpha_s=1e-5, beta_s_per_byte=1e-9)  # 10 us, 8 Gbit/s


def ring(n, p, net):
    return collective_s("all_reduce", n, p, net)


def comm(pattern, n, p, net, servers=1):
    return PATTERNS[pattern].comm(n, p, servers, Link(net)).seconds


def test_collective_costs_match_hand_computed_cases():
    # ring, 4 workers, 1 MB: 2*3*10us + 2*(3/4)*1e6*1ns = 60 us + 1.5 ms
    assert ring(1e6, 4, NET) == pytest.approx(1.56e-3)
    # tree: ceil(log2 4) = 2 levels, each way: 4 * (10 us + 1 ms); 5 workers: 3 levels
    assert comm("tree", 1e6, 4, NET) == pytest.approx(4.04e-3)
    assert comm("tree", 1e6, 5, NET) == pytest.approx(6.06e-3)
    # one server takes 4 workers' 1 MB each way: 2*10 us + 2*4 MB*1 ns; 4 servers: a worker's
    assert comm("ps-sync", 1e6, 4, NET) == pytest.approx(8.02e-3)
    assert comm("ps-sync", 1e6, 4, NET, servers=4) == pytest.approx(2.02e-3)
    # async: a worker's own compute + push + pull, until one server's link is the bound
    async_ = PATTERNS["ps-async"]
    for p, step in ((4, 0.01202), (64, 0.064)):
        own = async_.comm(1e6, p, 1, Link(NET)).seconds
        assert async_.step_s(0.01, 2 / 3, own, 1e6, p, 1, Link(NET)) == pytest.approx(step)
    # a reduction cost per byte adds (p-1)/p n gamma to the ring
    slow = Network(1e-5, 1e-9, gamma_s_per_byte=1e-9)
    assert ring(1e6, 4, slow) == pytest.approx(1.56e-3 + 0.75e-3)
    assert ring(1e6, 1, NET) == 0.0 and comm("tree", 1e6, 1, NET) == 0.0


def test_bus_bandwidth_uses_the_nccl_tests_factors():
    from dlscale.microbench.bus import bus_bandwidth

    assert bus_bandwidth("all_reduce", 1e6, 1e-3, 4) == pytest.approx((1e9, 1.5e9))
    assert bus_bandwidth("all_gather", 1e6, 1e-3, 4) == pytest.approx((1e9, 0.75e9))
    assert bus_bandwidth("broadcast", 1e6, 1e-3, 8) == pytest.approx((1e9, 1e9))
    assert Network.from_link(25e9, 5e-6).beta_s_per_byte == pytest.approx(8 / 25e9)


def test_the_fit_recovers_known_costs_from_noisy_times():
    rng = np.random.default_rng(7)
    sizes = [4.0 * 4**i for i in range(14)]  # 4 B .. 256 MB
    workers = [2] * len(sizes) + [4] * len(sizes)
    alpha, beta = 50e-6, 1.0 / 2e9
    truth = [ring(n, p, Network(alpha, beta)) for p, n in zip(workers, sizes * 2, strict=True)]
    noisy = [t * (1 + rng.uniform(-0.03, 0.03)) for t in truth]
    fit = fit_network("ring", workers, sizes * 2, noisy)
    assert fit.network.alpha_s == pytest.approx(alpha, rel=0.05)
    assert fit.network.beta_s_per_byte == pytest.approx(beta, rel=0.05)
    assert fit.median_error < 0.03 and fit.max_error < 0.06 and fit.samples == 28


@pytest.mark.parametrize(
    ("pattern", "cost"),
    [
        # a binomial broadcast: ceil(log2 p) rounds of the whole message
        (
            "tree",
            lambda n, p, net: math.ceil(math.log2(p)) * (net.alpha_s + n * net.beta_s_per_byte),
        ),
        ("p2p", lambda n, p, net: net.alpha_s + n * net.beta_s_per_byte),  # one message
    ],
)
def test_the_tree_and_point_to_point_fits_recover_known_costs(pattern, cost):
    rng = np.random.default_rng(11)
    sizes = [4.0 * 4**i for i in range(14)]
    workers = [2] * 14 + [8] * 14 if pattern == "tree" else [2] * 14
    net = Network(20e-6, 1.0 / 1e9)
    truth = [cost(n, p, net) for p, n in zip(workers, sizes * 2, strict=False)]
    noisy = [t * (1 + rng.uniform(-0.03, 0.03)) for t in truth]
    fit = fit_network(pattern, workers, (sizes * 2)[: len(workers)], noisy)
    assert fit.network.alpha_s == pytest.approx(20e-6, rel=0.05)
    assert fit.network.beta_s_per_byte == pytest.approx(1e-9, rel=0.05)


def test_a_few_slow_small_messages_do_not_pull_the_fit():
    """A busy machine makes some small messages 2-5x slower (seen here on 2 cores): the robust
    fit keeps the bandwidth that the large messages show."""
    sizes = [4.0 * 4**i for i in range(12)]
    net = Network(250e-6, 8 / 100e6)  # 100 Mbit/s
    times = [ring(n, 2, net) for n in sizes]
    for index, factor in ((1, 5.0), (3, 3.0), (6, 4.0), (7, 2.5)):
        times[index] *= factor
    fit = fit_network("ring", [2] * len(sizes), sizes, times)
    assert fit.network.bandwidth_bit_s == pytest.approx(100e6, rel=0.05)
    assert fit.network.alpha_s == pytest.approx(250e-6, rel=0.25)


def test_the_parameter_server_fit_recovers_known_costs_with_the_servers_of_each_message():
    """Synchronous push and pull (the ps-sync pattern): 2 alpha + 2 max(n, p n / k) beta; the fit
    reads k per sample (MXNet holds a small message on one server, splits a large one)."""
    rng = np.random.default_rng(13)
    sizes = [4.0 * 4**i for i in range(14)]
    samples = [(p, k, n) for p in (2, 4) for k in (1, 2) for n in sizes]
    net = Network(300e-6, 1.0 / 2e9)
    truth = [comm("ps-sync", n, p, net, k) for p, k, n in samples]
    noisy = [t * (1 + rng.uniform(-0.03, 0.03)) for t in truth]
    workers, servers, bytes_ = zip(*samples, strict=True)
    fit = fit_network("ps", workers, bytes_, noisy, servers)
    assert fit.network.alpha_s == pytest.approx(300e-6, rel=0.05)
    assert fit.network.beta_s_per_byte == pytest.approx(0.5e-9, rel=0.05)
    assert fit.median_error < 0.03 and fit.samples == 56
    # read as if every message were on one server, the 2-server samples misfit
    assert fit_network("ps", workers, bytes_, noisy).max_error > 0.2
    with pytest.raises(UserError, match="1 server or more"):
        fit_network("ps", [2, 2], [1e3, 1e6], [1.0, 2.0], [1, 0])


def test_a_fit_without_latency_sets_alpha_to_zero_not_below():
    sizes = [1e3, 1e5, 1e7, 1e8]
    times = [ring(n, 2, Network(0.0, 1e-9)) * f for n, f in
             zip(sizes, (0.9, 1.0, 1.0, 1.0), strict=True)]  # fmt: skip
    fit = fit_network("ring", [2] * 4, sizes, times)
    assert fit.network.alpha_s >= 0 and fit.network.beta_s_per_byte == pytest.approx(1e-9, rel=0.1)


@pytest.mark.parametrize("bad", [[math.nan, 1.0], [0.0, 1.0], [-1.0, 1.0], [math.inf, 1.0]])
def test_a_fit_refuses_impossible_times(bad):
    with pytest.raises(UserError, match="positive, finite times"):
        fit_network("ring", [2, 2], [1e3, 1e6], bad)
    with pytest.raises(UserError, match="unknown pattern"):
        fit_network("butterfly", [2, 2], [1e3, 1e6], [1.0, 2.0])


def test_prediction_by_hand_for_two_workers_with_and_without_overlap():
    # 0.1 s compute at batch 32, a 100 MB gradient, 10 Gbit/s, no latency:
    # the ring moves 2 * 1/2 * 1e8 B * 0.8 ns = 80 ms
    profile = Profile(compute_s=0.1, batch=32, gradient_bytes=1e8)
    net = Network.from_link(10e9, 0.0)
    one, two = predict(profile, "ring", [1, 2], Link(net))
    assert one.speedup == pytest.approx(1.0) and one.step_s == pytest.approx(0.1)
    assert two.step_s == pytest.approx(0.18) and two.efficiency == pytest.approx(0.1 / 0.18)
    assert two.throughput_samples_s == pytest.approx(64 / 0.18)
    # overlapped with backward (2/3 of compute): 1/30 s forward + max(1/15 s, 80 ms)
    (hidden,) = predict(profile, "ring-overlap", [2], Link(net))
    assert hidden.step_s == pytest.approx(0.1 / 3 + 0.08)
    fast = Network.from_link(100e9, 0.0)  # 8 ms: hidden entirely behind backward
    assert predict(profile, "ring-overlap", [2], Link(fast))[0].efficiency == pytest.approx(1.0)


def test_the_bandwidth_for_an_efficiency_inverts_the_prediction():
    profile = Profile(compute_s=0.1, batch=32, gradient_bytes=1e8)
    needed = bandwidth_for(profile, "ring", 2, 0.1 / 0.18, Link(Network(0.0, 1e-9)))
    assert needed == pytest.approx(10e9, rel=0.002)
    for strategy in ("ring", "ring-overlap", "tree", "ps-sync"):
        bandwidth = bandwidth_for(profile, strategy, 64, 0.9, Link(Network(5e-6, 1e-9)))
        assert bandwidth is not None
        (row,) = predict(profile, strategy, [64], Link(Network.from_link(bandwidth, 5e-6)))
        assert row.efficiency == pytest.approx(0.9, abs=0.002)
    # 1 s of latency per message: 2*1023 s of ring latency, no bandwidth reaches 50%
    assert bandwidth_for(profile, "ring", 1024, 0.5, Link(Network(1.0, 1e-9))) is None
    with pytest.raises(UserError, match="target efficiency"):
        bandwidth_for(profile, "ring", 2, math.nan, Link(Network(0.0, 1e-9)))


def test_a_profile_refuses_impossible_values():
    for bad in ({"compute_s": math.nan}, {"compute_s": 0.0}, {"gradient_bytes": -1.0},
                {"batch": 0}, {"backward_share": 1.5}):  # fmt: skip
        with pytest.raises(UserError):
            Profile(**{"compute_s": 0.1, "batch": 32, "gradient_bytes": 1e6, **bad})


def _point(workers=2, nosync=20.0, gradient=1e6, measured=3000.0, status="completed", **more):
    return {
        "status": status,
        "run_id": more.pop("run_id", "r"),
        "config": {"backend": more.pop("backend", "torch-ddp"), "model": "tiny",
                   "workers": workers, "launcher": "local", "options": {}},
        "batch_size_per_worker": 32,
        "metrics": {"step_time_nosync_p50_ms": nosync, "gradient_bytes": gradient,
                    "throughput_samples_s": measured, "step_time_p50_ms": 21.0,
                    "sync_pattern": more.pop("pattern", "ring"), **more},
    }  # fmt: skip


def test_validation_predicts_each_point_from_its_own_compute_and_the_network():
    from dlscale.perfmodel.validate import Link, compare, median_errors, per_engine

    net = Network.from_link(8e9, 0.0)  # 1 ns a byte: the ring moves 1 MB in 1 ms at 2 workers
    points = [_point(), _point(workers=1), _point(status="failed"), _point(gradient=None), _point()]
    points.append(_point(pattern=None))  # an engine that names no pattern: not predicted
    points.append(_point(pattern="<b>ring</b>"))  # nor one the model does not know
    rows = compare(points, lambda point: Link(net))
    assert compare(points, lambda point: None) == []  # no network known: nothing predicted
    assert len(rows) == 2  # 1 worker, failed and incomplete points are not predicted
    row = rows[0]
    assert row["algorithm"] == "ring" and row["compute_from"] == "no-sync probe"
    assert row["comm_from"] == "ring fit" and row["comm_ms"] == pytest.approx(1.0)
    # no overlap: 20 ms + 1 ms; 2 * 32 / 0.021 = 3047.6 img/s against 3000 measured
    assert row["predicted_samples_s"] == pytest.approx(64 / 0.021)
    assert row["error"] == pytest.approx(64 / 0.021 / 3000 - 1)
    # overlap: 1 ms hides behind 13.3 ms of backward: 64 / 0.020
    assert row["overlap_samples_s"] == pytest.approx(64 / 0.020)
    medians = median_errors(rows)
    assert medians["error"] == pytest.approx(abs(64 / 0.021 / 3000 - 1))
    assert median_errors([]) == {"error": None, "overlap_error": None}
    assert list(per_engine(rows)) == ["torch-ddp"]


def test_the_ideal_overlap_hides_behind_the_backward_share_the_probe_measured():
    """An engine whose probe timed a forward alone: the window after it (here 20 - 15 = 5 ms,
    a quarter) is what the synchronization can hide in, not the assumed 2/3; a share that
    cannot be one (a forward longer than the step, NaN) is clipped or left assumed."""
    from dlscale.perfmodel.validate import Link, compare
    from dlscale.report.model import share_words

    net = Network.from_link(8e9 / 6, 0.0)  # 6 ms for the ring of 1 MB at 2 workers
    measured, longer, nan, none = compare(
        [_point(forward_time_p50_ms=15.0), _point(forward_time_p50_ms=25.0),
         _point(forward_time_p50_ms=float("nan")), _point()],
        lambda point: Link(net),
    )  # fmt: skip
    assert measured["backward_share"] == pytest.approx(0.25)
    assert measured["backward_share_from"] == "measured: forward 15.0 ms of 20.0 ms"
    assert share_words(measured) == "ideal: backward 25% measured"
    # 15 ms forward + max(5 ms backward, 6 ms ring): 1 ms of the ring stays exposed
    assert measured["overlap_samples_s"] == pytest.approx(64 / 0.021)
    assert longer["backward_share"] == 0.0 and longer["overlap_samples_s"] == pytest.approx(
        64 / 0.026
    )
    for assumed in (nan, none):
        assert assumed["backward_share"] == pytest.approx(2 / 3)
        assert share_words(assumed) == "ideal: backward 67% assumed"
        assert assumed["overlap_samples_s"] == pytest.approx(64 / 0.020)  # 6 ms behind 13.3 ms
    # the plain prediction takes no share at all
    for row in (measured, longer, nan, none):
        assert row["predicted_samples_s"] == pytest.approx(64 / 0.026)


def test_each_engine_is_predicted_on_its_own_algorithm_by_hand():
    """FSDP: all-gathers and a reduce-scatter; parameter servers: push and pull through their
    servers, sync or async; a ring of a compressed gradient: its payload as sent. Each from
    the microbench's own collectives where it measured them at the point's workers."""
    from dlscale.perfmodel.validate import Link, compare

    net = Network.from_link(8e9, 0.0)  # 1 ns a byte
    two = lambda t: ((1e5, t / 10), (1e7, t * 10))  # noqa: E731  t at 1e6 B on log-log axes
    link = Link(net, {"all_gather": two(2e-3), "reduce_scatter": two(3e-3),
                      "ps_pushpull/2": two(5e-3)}, processes=2)  # fmt: skip
    fsdp, no_reshard, sync, other_servers, hvd, async_ = compare(
        [_point(backend="torch-fsdp", pattern="fsdp"),
         _point(backend="torch-fsdp", pattern="fsdp-no-reshard"),
         _point(backend="mxnet-kv", pattern="ps-sync", sync_servers=2),
         _point(backend="torch-ps", pattern="ps-sync", sync_servers=1),
         _point(backend="horovod-torch", bytes_sent_per_step_model=5e5),  # fp16: half on the wire
         _point(backend="tf-ps", pattern="ps-async", sync_servers=1, workers=4)],
        lambda point: link,
    )  # fmt: skip
    assert fsdp["comm_ms"] == pytest.approx(2 * 2 + 3) and fsdp["comm_from"] == "measured"
    assert fsdp["predicted_samples_s"] == pytest.approx(64 / 0.027)
    assert fsdp["overlap_samples_s"] == pytest.approx(64 / (0.020 / 3 + 0.040 / 3))  # 7 ms hidden
    assert no_reshard["comm_ms"] == pytest.approx(2 + 3)
    assert sync["comm_ms"] == pytest.approx(5.0) and sync["predicted_samples_s"] == pytest.approx(
        64 / 0.025
    )
    # its ideal: push and pull in the link's two directions at once (2.5 ms), behind 13.3 ms of
    # backward: 64 / 0.020
    assert sync["overlap_samples_s"] == pytest.approx(64 / 0.020)
    assert async_["overlap_samples_s"] is None  # a worker's own push and pull: no bound of it
    assert sync["algorithm"] == "ps-sync" and sync["servers"] == 2
    # 1 server was never measured: the fit, 2 alpha + 2 max(n, p n / k) beta = 4 ms
    assert (
        other_servers["comm_ms"] == pytest.approx(4.0) and other_servers["comm_from"] == "ring fit"
    )
    assert hvd["comm_ms"] == pytest.approx(0.5)  # a 0.5 MB payload around the ring: 0.5 ms
    # asynchronous, 4 workers, 1 server: the server's link carries 4 MB a round (4 ms); a
    # worker's own step is 20 ms + push and pull (2 ms): 22 ms
    assert async_["comm_ms"] == pytest.approx(2.0)
    assert async_["predicted_samples_s"] == pytest.approx(4 * 32 / 0.022)


def test_an_engine_without_a_probe_takes_its_baselines_step():
    """tf-ps and keras-fit skip no synchronization: their compute is the 1-worker baseline's
    median step (the point names it as add_scaling does); a baseline on other threads, or
    none, leaves the point out."""
    from dlscale.perfmodel.validate import Link, compare

    net = Network.from_link(8e9, 0.0)
    point = _point(backend="tf-ps", pattern="ps-sync", nosync=None, sync_servers=1)
    point.update(baseline="tf-single x1, 1 thr", baseline_run_ids=["base"])
    base = _point(backend="tf-single", workers=1, run_id="base", pattern=None)
    base["metrics"]["step_time_p50_ms"] = 25.0
    (row,) = compare([point, base], lambda p: Link(net))
    assert row["compute_ms"] == 25.0 and row["compute_from"] == "tf-single x1, 1 thr step"
    assert row["predicted_samples_s"] == pytest.approx(64 / 0.029)  # 25 ms + 4 ms of push and pull
    assert compare([{**point, "baseline_threads_differ": True}, base], lambda p: Link(net)) == []
    assert compare([point], lambda p: Link(net)) == []
    # a ring synchronizes nothing at 1 worker: keras-fit's own 1-worker step is its compute
    # (its fit loop, which tf-single's step does not time), where that point exists
    fit = _point(backend="keras-fit", nosync=None)
    fit.update(baseline="tf-single x1, 1 thr", baseline_run_ids=["base"])
    alone = _point(backend="keras-fit", nosync=None, workers=1, run_id="alone")
    alone["metrics"]["step_time_p50_ms"] = 35.0
    slower = {**alone, "config": {**alone["config"], "model": "other"}}  # another setting
    (row,) = compare([fit, base, slower, alone], lambda p: Link(net))
    assert row["compute_ms"] == 35.0 and row["compute_from"] == "keras-fit x1 step"
    (row,) = compare([fit, base, slower], lambda p: Link(net))
    assert row["compute_ms"] == 25.0 and row["compute_from"] == "tf-single x1, 1 thr step"
    # across 2 torchrun nodes: its 1-worker point ran on one node (a 1-worker point does)
    nodes = {"launcher": "torchrun", "max_restarts": 0, "network": "100mbit"}
    two = {**fit, "config": {**fit["config"], **nodes, "nnodes": 2}}
    one = {**alone, "config": {**alone["config"], **nodes, "nnodes": 1, "network": ""}}
    (row,) = compare([two, base, one], lambda p: Link(net))
    assert row["compute_ms"] == 35.0 and row["compute_from"] == "keras-fit x1 step"
    other = {**one, "config": {**one["config"], "model": "other"}}  # another setting
    assert compare([two, base, other], lambda p: Link(net))[0]["compute_ms"] == 25.0


def test_an_engine_without_a_probe_takes_its_backward_share_from_its_compute_point():
    """torch-fsdp and tf-ps time no step without synchronization; the 1-worker point their
    compute comes from timed its plain step and a forward alone (runtime/schedule.py): the
    share is that point's, never the multi-worker point's own leftovers; a compute point
    without a forward leaves the share assumed."""
    from dlscale.perfmodel.validate import Link, compare
    from dlscale.report.model import share_words

    net = Network.from_link(8e9, 0.0)  # 1 ns a byte
    fsdp = _point(backend="torch-fsdp", pattern="fsdp", nosync=None, forward_time_p50_ms=1.0)
    alone = _point(backend="torch-fsdp", pattern="fsdp", nosync=40.0, workers=1, run_id="x1",
                   forward_time_p50_ms=10.0)  # fmt: skip
    alone["metrics"]["step_time_p50_ms"] = 40.0
    (row,) = compare([fsdp, alone], lambda p: Link(net))
    assert row["compute_from"] == "torch-fsdp x1 step" and row["compute_ms"] == 40.0
    assert row["backward_share"] == pytest.approx(0.75)  # 1 - 10/40, not 1 - 1/None
    assert row["backward_share_from"] == "measured: forward 10.0 ms of 40.0 ms"
    assert share_words(row) == "ideal: backward 75% measured"
    # FSDP's all-gathers and reduce-scatter (fit: 2 x 1 ms + 1 ms at 1 MB) behind 30 ms
    assert row["overlap_samples_s"] == pytest.approx(64 / 0.040)
    bare = {**alone, "metrics": {k: v for k, v in alone["metrics"].items()
                                 if k != "forward_time_p50_ms"}}  # fmt: skip
    (row,) = compare([fsdp, bare], lambda p: Link(net))
    assert row["backward_share"] == pytest.approx(2 / 3)
    assert share_words(row) == "ideal: backward 67% assumed"
    # tf-ps: from its baseline's point (tf-single at 1 worker)
    ps = _point(backend="tf-ps", pattern="ps-sync", nosync=None, sync_servers=1)
    ps.update(baseline="tf-single x1, 1 thr", baseline_run_ids=["base"])
    base = _point(backend="tf-single", workers=1, run_id="base", pattern=None, nosync=24.0,
                  forward_time_p50_ms=6.0)  # fmt: skip
    (row,) = compare([ps, base], lambda p: Link(net))
    assert row["compute_from"] == "tf-single x1, 1 thr step"
    assert row["backward_share"] == pytest.approx(0.75)
    assert row["backward_share_from"] == "measured: forward 6.0 ms of 24.0 ms"


def test_predict_takes_the_newest_microbench_fit_of_the_engine_and_leaves_a_bad_one_out(
    tmp_path, capsys
):
    from dlscale.cli.predict import fitted_networks
    from dlscale.contract.files import write_json_atomic
    from dlscale.perfmodel.networks import fitted_for

    fit = {"alpha_s": 2e-5, "beta_s_per_byte": 1e-9, "median_error": 0.04}

    def config(network="", backend="torch-ddp"):
        options = {"launcher": {"network": network, "nnodes": 2}}
        return {"backend": backend, "launcher": "torchrun", "options": options}

    def store(name, started, fit, error=None, **where):
        (tmp_path / name).mkdir()
        stored = {"started_at": started, "fit": fit, "error": error, "config": config(**where)}
        write_json_atomic(tmp_path / name / "microbench.json", "microbench", stored)

    store("microbench-a", 1.0, {**fit, "beta_s_per_byte": 5e-9})
    store("microbench-b", 2.0, fit)
    store("microbench-c", 3.0, fit, error="wrong results: all_reduce 4 B")  # not trusted
    (tmp_path / "microbench-d").mkdir()
    (tmp_path / "microbench-d" / "microbench.json").write_text("{damaged")
    store("microbench-f", 9.0, {**fit, "beta_s_per_byte": 8e-8}, network="100mbit")
    store("microbench-g", 1.5, {**fit, "beta_s_per_byte": 3e-9}, backend="torch-ring")
    found = fitted_networks(tmp_path)
    ddp = fitted_for(found, config())  # the newest of the engine's own on that network
    assert ddp.network.beta_s_per_byte == 1e-9 and ddp.network.alpha_s == 2e-5
    assert "microbench-b" in ddp.said and "8 Gbit/s" in ddp.said and "4.0%" in ddp.said
    assert fitted_for(found, config(backend="torch-ring")).run_id == "microbench-g"
    # an engine never measured there: the newest of its framework's engines on the same
    # network (keras-fit on tf-mwms' collectives, though torch-ddp's are newer), else any's
    store("microbench-t", 1.8, fit, backend="tf-mwms")
    found = fitted_networks(tmp_path)
    assert fitted_for(found, config(backend="keras-fit")).run_id == "microbench-t"
    assert fitted_for(found, config(backend="horovod-torch")).run_id == "microbench-b"
    assert fitted_for(found, config(backend="mxnet-kv")).run_id == "microbench-b"
    (tmp_path / "microbench-k").mkdir()  # newer, but a parameter server's fit: no ring
    write_json_atomic(tmp_path / "microbench-k" / "microbench.json", "microbench",
                      {"started_at": 8.0, "fit": None, "error": None,
                       "fits": {"ps": {**fit, "pattern": "ps"}},
                       "config": config(backend="mxnet-kv")})  # fmt: skip
    found = fitted_networks(tmp_path)
    assert fitted_for(found, config(backend="mxnet-kv")).link.fit == "ps"
    assert fitted_for(found, config(backend="horovod-torch")).run_id == "microbench-b"
    # the same package (whose code synchronizes) before the same framework: horovod-keras on
    # Horovod's all-reduce (horovod-torch's microbench), though tf-mwms' is its framework's
    store("microbench-v", 1.2, fit, backend="horovod-torch")
    found = fitted_networks(tmp_path)
    assert fitted_for(found, config(backend="horovod-keras")).run_id == "microbench-v"
    assert fitted_for(found, config(backend="keras-fit")).run_id == "microbench-t"
    assert fitted_for(found, config("100mbit")).network.beta_s_per_byte == 8e-8
    assert fitted_for(found, config("1gbit")) is None
    capsys.readouterr()
    # the newest of torch-ddp's on loopback has times that did not grow with the size: a
    # warning naming it and the fix; the other engines' networks are still used, and torch-ddp
    # is not given its older fit in silence (it takes torch-ring's, as an unmeasured engine)
    store("microbench-e", 4.0, {**fit, "beta_s_per_byte": 0.0})
    found = fitted_networks(tmp_path)
    lines = capsys.readouterr().err.splitlines()
    (warning,) = [line for line in lines if "microbench-e" in line]
    assert len(lines) == 2 and "microbench-d" in lines[0]  # the damaged file, as before
    assert warning.startswith("dlscale: warning: ") and "microbench-e" in warning
    assert "did not grow with the size" in warning and "--sizes 4..4M" in warning
    assert fitted_for(found, config()).run_id == "microbench-g"
    assert fitted_for(found, config("100mbit")).run_id == "microbench-f"
    store("microbench-h", 10.0, {**fit, "beta_s_per_byte": 0.0}, network="100mbit")
    store("microbench-i", 6.0, {**fit, "beta_s_per_byte": 0.0}, backend="torch-ring")
    store("microbench-j", 7.0, {**fit, "beta_s_per_byte": 0.0}, backend="tf-mwms")
    store("microbench-w", 7.5, {**fit, "beta_s_per_byte": 0.0}, backend="horovod-torch")
    (tmp_path / "microbench-l").mkdir()  # and mxnet-kv's parameter server
    write_json_atomic(tmp_path / "microbench-l" / "microbench.json", "microbench",
                      {"started_at": 9.5, "fit": None, "error": None,
                       "fits": {"ps": {**fit, "pattern": "ps", "beta_s_per_byte": 0.0}},
                       "config": config(backend="mxnet-kv")})  # fmt: skip
    with pytest.raises(UserError, match=r"no microbench with a fitted network.*did not grow"):
        fitted_networks(tmp_path)
    with pytest.raises(UserError, match="no microbench with a fitted network"):
        fitted_networks(tmp_path / "microbench-a")


def test_a_microbench_with_only_a_parameter_server_fit_is_a_network_for_every_strategy(tmp_path):
    """An mxnet-kv microbench fits no ring (its push and pull are no all-reduce around a ring):
    its ps fit predicts ps-sync and ps-async, and stands for the link where no other fit is."""
    from dlscale.cli.predict import fitted_networks
    from dlscale.contract.files import write_json_atomic

    ps = {"pattern": "ps", "alpha_s": 3e-4, "beta_s_per_byte": 1e-9, "median_error": 0.01}
    (tmp_path / "microbench-mx").mkdir()
    write_json_atomic(
        tmp_path / "microbench-mx" / "microbench.json", "microbench",
        {"started_at": 1.0, "processes": 2, "rows": [], "error": None, "fit": None,
         "fits": {"ps": ps}, "config": {"backend": "mxnet-kv", "launcher": "local"}},
    )  # fmt: skip
    (found,) = fitted_networks(tmp_path).values()
    assert found.link.fit == "ps" and found.network == Network(3e-4, 1e-9)
    assert found.link.fit_for("ps_pushpull") == (Network(3e-4, 1e-9), "ps")
    assert found.link.fit_for("all_reduce") == (Network(3e-4, 1e-9), "ps")  # the only fit there is
    assert "microbench-mx (ps fit): alpha 300.0 us, 8 Gbit/s effective" in found.said
    assert found.link.measured == {}  # no measured all-reduce to validate a ring with


def test_the_published_horovod_anchor_as_docs_perfmodel_states_it():
    """docs/perfmodel.md: ResNet-101 (178,196,640 gradient bytes), batch 64 at 119.4 img/s on
    one GPU, 512 GPUs on 25 Gbit/s links: 82% without overlap, 100% with ideal overlap."""
    profile = Profile(compute_s=64 / 119.4, batch=64, gradient_bytes=178_196_640)
    net = Network.from_link(25e9, 5e-6)
    (ring,) = predict(profile, "ring", [512], Link(net))
    comm = 2 * 511 * 5e-6 + 2 * 511 / 512 * 178_196_640 * 8 / 25e9
    assert ring.efficiency == pytest.approx((64 / 119.4) / (64 / 119.4 + comm))
    assert round(ring.efficiency, 2) == 0.82
    (overlap,) = predict(profile, "ring-overlap", [512], Link(net))
    assert overlap.efficiency == pytest.approx(1.0)


def test_validation_uses_the_measured_all_reduce_where_the_microbench_measured_it():
    from dlscale.perfmodel.validate import Link, compare

    net = Network.from_link(1e9, 0.0)
    link = Link(net, {"all_reduce": ((100_000.0, 1e-1), (1_000.0, 1e-3))}, processes=2)
    measured = link.measured_s
    assert measured("all_reduce", 10_000, 2) == pytest.approx(1e-2)  # straight on log-log axes
    assert measured("all_reduce", 1_000, 2) == pytest.approx(1e-3)
    assert measured("all_reduce", 999, 2) is None and measured("all_reduce", 200_000, 2) is None
    assert link.measured_s("all_reduce", 10_000, 4) is None  # measured with 2 ranks only
    assert Link(net).measured_s("all_reduce", 10_000, 2) is None
    point = {"status": "completed", "run_id": "a", "batch_size_per_worker": 32,
             "config": {"workers": 2, "launcher": "local"},
             "metrics": {"step_time_nosync_p50_ms": 20.0, "gradient_bytes": 10_000,
                         "throughput_samples_s": 2000.0, "sync_pattern": "ring"}}  # fmt: skip
    (row,) = compare([point], lambda p: link)
    assert row["comm_from"] == "measured" and row["comm_ms"] == pytest.approx(10.0)
    assert row["predicted_samples_s"] == pytest.approx(64 / 0.030)
    four = {**point, "config": {"workers": 4, "launcher": "local"}}
    (row,) = compare([four], lambda p: link)  # no measurement at 4: the fitted ring
    ring = 2 * 3 / 4 * 10_000 * 8 / 1e9
    assert row["comm_from"] == "ring fit" and row["comm_ms"] == pytest.approx(ring * 1e3)


def test_a_step_that_sends_many_messages_pays_each_ones_time():
    """jax-dp's per-array all-reduces, mxnet-kv's per-key pushes and pulls: each message at
    its own measured time, summed; outside the sizes measured, each on the fit (its latency
    every time); a compressed payload's messages scaled to it; a damaged list ignored."""
    from dlscale.perfmodel.validate import Link, compare

    net = Network(alpha_s=1e-4, beta_s_per_byte=1e-9)  # 100 us a message, 1 ns a byte
    rows = ((10.0, 1e-3), (1e6, 3e-3))  # 1 ms at 10 B .. 3 ms at 1 MB (log-log)
    link = Link(net, {"all_reduce": rows, "ps_pushpull/1": rows}, processes=2)
    many = [1000.0] * 10 + [990_000.0]  # 10 small arrays and a large one: 1 MB in all
    ring, ps, outside, compressed, one, damaged = compare(
        [_point(sync_message_bytes=many),
         _point(backend="mxnet-kv", pattern="ps-sync", sync_servers=1, sync_message_bytes=many),
         _point(gradient=2e6, sync_message_bytes=[5.0, 2e6 - 5]),
         _point(bytes_sent_per_step_model=5e5, sync_message_bytes=many),
         _point(),
         _point(sync_message_bytes=[1e6, float("nan")])],
        lambda point: link,
    )  # fmt: skip
    small, large = link.measured_s("all_reduce", 1000, 2), link.measured_s("all_reduce", 990_000, 2)
    assert small == pytest.approx(1e-3 * 3 ** (2 / 5))  # 1000 B: 2/5 of the way on log axes
    assert ring["comm_ms"] == pytest.approx((10 * small + large) * 1e3)
    assert ring["comm_from"] == "measured, 11 messages" and ring["messages"] == 11
    assert ring["predicted_samples_s"] == pytest.approx(64 / (0.020 + 10 * small + large))
    assert ps["comm_ms"] == pytest.approx(ring["comm_ms"]) and ps["algorithm"] == "ps-sync"
    # 5 B lies below what was measured, 2 MB above: both on the fit, a latency each
    fitted = 2 * 1e-4 + 5 * 1e-9 + 2 * 1e-4 + (2e6 - 5) * 1e-9
    assert outside["comm_ms"] == pytest.approx(fitted * 1e3)
    assert outside["comm_from"] == "ring fit, 2 messages"
    # fp16: the 11 messages carry half the bytes each (0.5 MB sent as the payload)
    half = link.measured_s("all_reduce", 500, 2) * 10 + link.measured_s("all_reduce", 495_000, 2)
    assert compressed["comm_ms"] == pytest.approx(half * 1e3)
    for single in (one, damaged):
        assert single["comm_from"] == "measured" and single["messages"] is None
        assert single["comm_ms"] == pytest.approx(3.0)
    # one message under the sizes measured: that one on the fit, the other measured
    (mixed,) = compare([_point(gradient=1005.0, sync_message_bytes=[5.0, 1000.0])],
                       lambda point: link)  # fmt: skip
    assert mixed["comm_from"] == "measured, 2 messages (1 on the ring fit)"
    assert mixed["comm_ms"] == pytest.approx((2e-4 + 5e-9 + small) * 1e3)
    # FSDP: each unit's all-gathers (2 with resharding) and reduce-scatter, unit by unit
    units = Link(net, {"all_gather": rows, "reduce_scatter": rows}, processes=2)
    (fsdp,) = compare([_point(backend="torch-fsdp", pattern="fsdp", sync_message_bytes=many)],
                      lambda point: units)  # fmt: skip
    assert fsdp["comm_ms"] == pytest.approx(3 * (10 * small + large) * 1e3)
    assert fsdp["comm_from"] == "measured, 11 messages"


def test_the_messages_of_a_compiled_jax_step_are_its_all_reduces_operands():
    """XLA's CPU runtime runs one gloo all-reduce per operand of a (combined) all-reduce: each
    array is a message; an asynchronous start/done pair counts once; other ops do not."""
    from dlscale.frameworks.jax.hlo import all_reduce_messages

    hlo = """
  %p = f32[16,3,3,3]{3,2,1,0} parameter(0)
  %all-reduce = (f32[16,3,3,3]{3,2,1,0}, f32[16]{0}, bf16[64,10]{1,0}) all-reduce(%a, %b, %c), channel_id=1, to_apply=%sum
  %ars = f64[] all-reduce-start(%d), channel_id=2, to_apply=%sum
  %ard = f64[] all-reduce-done(%ars)
  %one = s32[7]{0} all-reduce(%e), channel_id=3, metadata={op_name="jit(step)/all-reduce(x)"}
  %g = f32[8]{0} all-gather(%f), dimensions={0}
"""  # noqa: E501
    assert all_reduce_messages(hlo) == [1728, 64, 1280, 8, 28]
    assert all_reduce_messages("") == []
    with pytest.raises(ValueError, match="unknown XLA type"):
        all_reduce_messages("%x = f8e4m3[4]{0} all-reduce(%y), to_apply=%sum")


def test_a_stored_fit_under_a_name_that_is_no_pattern_is_left_out():
    """A hand-edited microbench.json's fit named ``[bold red]<b>x</b>[/]``: no pattern of the
    model, so never a network, and its name never reaches the tables' markup."""
    from dlscale.perfmodel.networks import stored_fits

    fit = {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9, "median_error": 0.01}
    run = {"fits": {"[bold red]<b>x</b>[/]": fit, "ps": fit, "tree": [1]}, "fit": fit}
    assert stored_fits(run) == {"ps": fit, "ring": fit}
    assert stored_fits({"fits": {"<b>x</b>": fit}}) == {}
