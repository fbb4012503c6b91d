"""A prediction's whole loop for one engine, beside the microbench its test just ran in
``results``: a 2-worker point of that engine, ``predict --validate`` predicting it on the
engine's own algorithm from the microbench's own rows (recomputed here by hand, with no
dlscale code), and a forward ``predict`` on that network saying how far the strategy of that
algorithm was validated: by this engine, over this point."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

TRAIN = ("--workers", "2", "--model", "tiny", "--steps", "6", "--windows", "2", "--repeats", "1",
         "--set", "machine_reference=false")  # fmt: skip
COLLECTIVE = {"ring": "all_reduce", "ps-sync": "ps_pushpull"}
"""The collective a microbench measured that carries each algorithm's synchronization."""
SENDS_ON_CYCLE = ("horovod-torch",)
"""The engines whose messages go out once a cycle, seen with their ready times."""
LISTS_MESSAGES = ("jax-dp", "torch-ddp", "mxnet-kv", "horovod-torch")
"""The engines that list the messages a step sends (``sync_message_bytes``; horovod-torch from
its gradients' ready times, fused within Horovod's cycle)."""


def replayed(messages: list[int], metrics: dict[str, Any], backward_s: float, price) -> float:
    """Seconds after backward's end until a thread that wakes every ``sync_cycle_ms`` has sent
    ``messages``, fusing what is ready in each wake up to ``sync_fusion_bytes``, each message
    ready ``sync_message_ready_ms`` before the end (their span shrunk to ``backward_s`` where
    longer); ``price(bytes)``: one message's seconds. Written apart from dlscale's replay."""
    ready = [r / 1e3 for r in metrics["sync_message_ready_ms"]]
    ready = [r * min(1.0, backward_s / max(ready)) for r in ready] if max(ready) else ready
    cycle, threshold = metrics["sync_cycle_ms"] / 1e3, metrics["sync_fusion_bytes"]
    queue = sorted(zip([-r for r in ready], messages, strict=True))
    now, end = queue[0][0], 0.0
    while queue:
        batch = [m for at, m in queue if at <= now]
        if not batch:
            now += math.ceil((queue[0][0] - now) / cycle) * cycle
            continue
        queue = queue[len(batch) :]
        sizes: list[float] = []
        for m in batch:  # fused in order while the sum stays within the threshold
            if sizes and sizes[-1] + m <= threshold:
                sizes[-1] += m
            else:
                sizes.append(m)
        work = sum(price(m) for m in sizes)
        end = now + work
        now += max(cycle, work)
    return max(0.0, end)


def interpolated(rows: list[dict[str, Any]], n: float) -> float:
    """The seconds of ``n`` bytes between the two measured sizes around it, on log-log axes."""
    points = sorted((r["bytes"], r["time_s"]) for r in rows)
    for (n0, t0), (n1, t1) in itertools.pairwise(points):
        if n0 <= n <= n1:
            slope = (math.log(t1) - math.log(t0)) / (math.log(n1) - math.log(n0))
            return math.exp(math.log(t0) + (math.log(n) - math.log(n0)) * slope)
    raise AssertionError(f"{n} bytes is outside the sizes measured: {points}")


def check_the_whole_loop(
    cli, results: Path, backend: str, algorithm: str, *, options: tuple[str, ...] = (),
    baseline: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train ``backend`` (with ``--set`` ``options``) into ``results``, then check its
    validation row and the forward prediction's trust; the row, and the validation's records
    under ``"records"``. ``baseline``: an engine without a step that skips synchronization
    takes its compute and backward share from that 1-worker point, trained first (1 thread a
    process, both)."""
    scratch = results.parent / f"{results.name}.tmp"  # its temporary directory: empty after it
    scratch.mkdir()
    threads = ("--set", "threads_per_worker=1") if baseline else ()
    if baseline:
        first = cli("run", "--backend", baseline, *TRAIN, "--workers", "1", *threads,
                    "--results", str(results), env={"TMPDIR": str(scratch)})  # fmt: skip
        assert first.returncode == 0, first.stderr
    sets = [arg for option in options for arg in ("--set", option)]
    run = cli("run", "--backend", backend, *TRAIN, *threads, *sets, "--results", str(results),
              env={"TMPDIR": str(scratch)})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert list(scratch.iterdir()) == []  # (TensorFlow's autograph wrote thousands to /tmp)
    check = cli("predict", "--validate", str(results), "--json")
    assert check.returncode == 0, check.stderr
    records = [json.loads(line) for line in check.stdout.splitlines()]
    (row,) = [r for r in records if r["kind"] == "validation"]
    points = [json.loads(p.read_text()) for p in results.glob("tiny-*/result.json")]
    (point,) = [p for p in points if p["config"]["backend"] == backend]
    metrics = point["metrics"]
    assert row["backend"] == backend and row["algorithm"] == algorithm
    assert row["network"] == "" and row["launcher"] == "local"
    assert row["measured_samples_s"] == metrics["throughput_samples_s"]
    own = metrics  # where the compute and the backward's share come from
    if baseline:  # the baseline's step (it synchronizes nothing) and its probe
        (reference,) = [p for p in points if p["config"]["backend"] == baseline]
        own = reference["metrics"]
        assert row["compute_from"] == f"{baseline} x1, 1 thr step"
        assert row["compute_ms"] == own["step_time_p50_ms"] > 0
    else:
        assert row["compute_from"] == "no-sync probe"
        assert row["compute_ms"] == own["step_time_nosync_p50_ms"] > 0
    # the synchronization: the microbench's own rows of that collective around the payload
    (bench,) = [json.loads(p.read_text()) for p in results.glob("microbench-*/microbench.json")]
    rows = [r for r in bench["rows"] if r["collective"] == COLLECTIVE[algorithm]]
    if algorithm == "ring":  # the bytes one worker sends, undone to the payload: 2(p-1)/p = 1
        payload = metrics.get("bytes_sent_per_step_model") or metrics["gradient_bytes"]
    else:  # one server holds it all
        payload = metrics["gradient_bytes"]
        rows = [r for r in rows if r["servers"] == 1]
        assert row["servers"] == 1
    # the messages a step sends, as the engine listed them: each at its own measured time
    messages = metrics.get("sync_message_bytes")
    assert bool(messages) == (backend in LISTS_MESSAGES)
    if messages:
        assert sum(messages) == metrics["gradient_bytes"]  # every array of the gradient, once
        count = f"{len(messages)} messages" if len(messages) > 1 else "1 message"
        assert row["comm_from"] == f"measured, {count}" and row["messages"] == len(messages)
        comm = sum(interpolated(rows, m * payload / sum(messages)) for m in messages)
    else:
        assert row["comm_from"] == "measured" and row["messages"] is None
        comm = interpolated(rows, payload)
    assert row["comm_ms"] == pytest.approx(comm * 1e3, rel=1e-9)
    images = 2 * point["batch_size_per_worker"]  # a step of both workers, neither overlapped
    step = row["compute_ms"] / 1e3 + row["comm_ms"] / 1e3
    assert row["predicted_samples_s"] == pytest.approx(images / step, rel=1e-12)
    assert row["error"] == pytest.approx(row["predicted_samples_s"] / row["measured_samples_s"] - 1)
    # the ideal overlap: forward, then backward beside the synchronization (a ps-sync's half),
    # backward's share measured by the probe where the engine times a forward alone
    forward_ms = own["forward_time_p50_ms"]  # every engine here times one
    # clipped to [0, 1]: a 6-step tiny model's forward can exceed its no-sync step's median
    share = min(1.0, max(0.0, 1 - forward_ms / own["step_time_nosync_p50_ms"]))
    assert forward_ms > 0 and row["backward_share_from"].startswith("measured")
    assert row["backward_share"] == pytest.approx(share, rel=1e-12)
    hidden = row["comm_ms"] / (2 if algorithm == "ps-sync" else 1)
    backward = row["compute_ms"] * share
    overlapped = (row["compute_ms"] - backward + max(backward, hidden)) / 1e3
    if backend in SENDS_ON_CYCLE:  # Horovod's cycle replayed on when each message was ready
        assert row["overlap_from"] == "cycle replayed"
        price = lambda m: interpolated(rows, m * payload / sum(messages))  # noqa: E731
        exposed = replayed(messages, metrics, backward / 1e3, price)
        overlapped = row["compute_ms"] / 1e3 + exposed
    else:
        assert "overlap_from" not in row
    assert row["overlap_samples_s"] == pytest.approx(images / overlapped, rel=1e-12)
    (median,) = [r for r in records if r["kind"] == "median_abs_error"]
    assert median["error"] == abs(row["error"])
    # a forward prediction on that network: that strategy validated by this engine, here
    strategy = {"ring": "ring", "ps-sync": "ps-sync"}[algorithm]
    # (in as many messages as the engine's stored run lists, where it lists them)
    counted = ("--messages", backend) if messages else ()
    ahead = cli("predict", "--network-from", str(results), "--compute-ms", "100",
                "--gradient-bytes", "1e6", "--workers", "2", "--strategy", strategy,
                "--model", "tiny", *counted, "--json")  # fmt: skip
    assert ahead.returncode == 0, ahead.stderr
    (forward,) = [json.loads(line) for line in ahead.stdout.splitlines()]
    assert forward["strategy"] == strategy
    assert forward["messages"] == (len(messages) if messages else 1)
    assert forward["validated"] == [
        {"backend": backend, "network": "local launcher", "points": 1,  # noisy or not
         "median_abs_error": median["error"], "models": ["tiny"]}
    ]  # fmt: skip
    return {**row, "records": records}
