"""``dlscale predict``: step time, throughput, speedup and efficiency of a model for any
number of workers on a network given by bandwidth and latency (docs/perfmodel.md).

The compute profile (one worker's step at its batch, and the gradient's bytes) comes from
``--compute-ms`` and ``--gradient-bytes``; else from the study stored in ``--results`` (its
model, batch and 1-worker step: :mod:`dlscale.cli.stored_profile`); else from a short measured
1-worker run of the model (the ``--framework``'s reference backend on synthetic data, kept in
``--results`` where the user named it, so the next prediction reuses it:
:mod:`dlscale.cli.profile`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from dlscale.cli.arguments import decimal, whole, whole_list
from dlscale.cli.predict_trust import Trust, stored_rows
from dlscale.cli.predict_validate import fitted_networks, validate
from dlscale.cli.profile import compute_profile, message_count
from dlscale.cli.stored_profile import stored_points, study_profile
from dlscale.cli.tables import cell, console, paragraph, say
from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt
from dlscale.launchers.links import PLANNED, parse_latency, parse_rate
from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import variant, variants
from dlscale.perfmodel.predict import Predicted, Profile, bandwidth_for, predict

DEFAULT_MODEL, DEFAULT_BATCH, DEFAULT_RESULTS = "resnet50", 32, "dlscale-results"
"""What a prediction measures when neither the arguments nor a stored study say."""
MAX_WORKERS = 1_000_000
COMPUTE_MS = (1e-6, 1e10)
"""The step a prediction may be given (``--compute-ms``): 1 ns to about 100 days."""
MAX_GRADIENT_BYTES = 1e15
"""A petabyte: far beyond any model's gradient, far inside a float's range."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        help="model (dlscale ls models); default: the study stored in --results (its newest "
        f"scaled point's model), else {DEFAULT_MODEL}",
    )
    parser.add_argument(
        "--batch",
        help="images per worker per step; a list (16,32,64) predicts each, on the compute "
        f"profile stored or measured at each; default: the stored study's, else {DEFAULT_BATCH}",
    )
    parser.add_argument(
        "--workers", default="1..1024", help="1..1024 (powers of 2) or a list: 1,2,8,64"
    )
    parser.add_argument("--bandwidth", help="each node's link to the others: 25Gbit, 100mbit")
    parser.add_argument("--latency", default="5us", help="one-way latency per message: 5us")
    parser.add_argument(
        "--ranks-per-node",
        type=whole(1, MAX_WORKERS),
        default=1,
        help="workers sharing a node (and its link to the others); default 1",
    )
    parser.add_argument(
        "--intra-bandwidth",
        help="the link between the workers of one node: 600Gbit (NVLink), 128Gbit (PCIe 4 x16); "
        "needed with --ranks-per-node above 1",
    )
    parser.add_argument("--intra-latency", default="2us", help="one-way latency inside a node: 2us")
    parser.add_argument(
        "--network-from",
        metavar="DIR",
        help="the network fitted by the newest dlscale microbench in DIR, not --bandwidth",
    )
    parser.add_argument(
        "--pattern",
        "--strategy",
        dest="strategy",
        default=",".join(variants()),
        help=f"comma-separated, of {', '.join(variants())} (default: every one)",
    )
    parser.add_argument(
        "--servers", type=whole(1, MAX_WORKERS), default=1, help="parameter servers (ps-*)"
    )
    parser.add_argument(
        "--target-efficiency",
        type=decimal(0.0, 1.0, above=True),
        help="also print the bandwidth each strategy needs for this efficiency at the most workers",
    )
    parser.add_argument(
        "--framework",
        help="whose step is measured when nothing stored fits and --compute-ms is not given: "
        "the framework's reference backend at 1 worker (torch: torch-single, tensorflow: "
        "tf-single, mxnet: mxnet-single); default: the stored study's framework, else torch",
    )
    parser.add_argument(
        "--compute-ms",
        type=decimal(*COMPUTE_MS),
        help="one worker's step (forward+backward), 1 ns to 100 days",
    )
    parser.add_argument(
        "--gradient-bytes",
        type=decimal(0.0, MAX_GRADIENT_BYTES),
        help="the gradient's size in bytes (up to 1e15)",
    )
    parser.add_argument(
        "--backward-share",
        type=decimal(0.0, 1.0),
        help="the share of a step after its forward, which ring-overlap hides the all-reduce "
        "behind (default: timed by the 1-worker run that measures the step; 2/3, assumed, "
        "with --compute-ms or a run that times no forward alone: jax; predict --validate "
        "measures it per engine)",
    )
    parser.add_argument(
        "--messages",
        default="1",
        help="the messages a step's gradient travels in, each paying the latency (default 1; "
        "jax-dp: one per gradient array, mxnet-kv: one per parameter), or a backend's name: "
        "as many as its newest stored run of --model lists (in --network-from, else --results)",
    )
    parser.add_argument(
        "--results",
        help="the study whose 1-worker step a prediction starts from, and where a profile "
        "measured when none fits is kept for reuse (default: ./dlscale-results is read; a "
        "measurement is then not kept)",
    )
    parser.add_argument(
        "--validate",
        metavar="DIR",
        help="instead: predict every measured point in DIR on the network and show the error",
    )
    parser.add_argument("--json", action="store_true", help="one JSON record per prediction")


def parse_workers(text: str) -> list[int]:
    """``A..B``: the powers of 2 from A to B; else a comma-separated list."""
    from dlscale.config.worker_counts import worker_range

    counts = worker_range(text) if ".." in text else whole_list(text)
    if counts is None:
        raise UserError(f"--workers {excerpt(text)}: give A..B (powers of 2) or a list like 1,2,8")
    if any(not 1 <= n <= MAX_WORKERS for n in counts):
        raise UserError(f"--workers {excerpt(text)}: every count must be 1 to {MAX_WORKERS:,}")
    return sorted(set(counts))


def main(args: argparse.Namespace) -> int:
    workers = parse_workers(args.workers)
    strategies = list(dict.fromkeys(s.strip() for s in args.strategy.split(",") if s.strip()))
    for name in strategies:
        variant(name)  # an unknown one is one line naming every pattern
    if not strategies:
        raise UserError(f"--pattern: give one or more of {', '.join(variants())}")
    given = _given_network(args) if args.bandwidth is not None else None
    if args.validate is not None:
        return validate(Path(args.validate), args, *(given or (None, "")))
    if (args.bandwidth is None) == (args.network_from is None):
        raise UserError("give the network: --bandwidth RATE (and --latency), or --network-from DIR")
    kind: tuple[Any, ...] | None = None
    if given is None:
        given, kind = _fitted_network(Path(args.network_from), args)
    keep = args.results is not None  # a measured profile is kept only where the user said
    args.results = args.results or DEFAULT_RESULTS
    points = stored_points(Path(args.results)) if args.compute_ms is None else []  # read once
    study_profile(args, DEFAULT_MODEL, DEFAULT_BATCH, points)
    validated_in = Path(args.network_from or args.results)
    rows = stored_rows(validated_in, warn=args.network_from is None)  # read above if so
    trust = Trust(validated_in, rows, kind)
    batches = parse_batches(args.batch)
    if len(batches) > 1 and args.compute_ms is not None:
        raise UserError("--compute-ms is one batch's step: give one --batch with it")
    messages = message_count(args.messages, args.model, validated_in)
    profiles = [compute_profile(args, batch, messages, points, keep) for batch in batches]
    for profile, source in profiles:
        _show(args, profile, source, workers, strategies, given, trust)
    if len(profiles) > 1 and not args.json:
        from dlscale.metrics.units import rate_of

        unit = model_unit(args.model)
        rate = rate_of(unit)
        curve = ", ".join(
            f"{p.batch}: {p.compute_s * 1e3:.1f} ms "
            f"({rate.per_second(p.batch / p.compute_s, unit):,.1f} {rate.label})"
            for p, _ in profiles
        )
        say(console(), f"compute profile against batch (1 worker): {curve}")
    return 0


def parse_batches(text: str) -> list[int]:
    batches = whole_list(text, low=0)
    if batches is None:
        raise UserError(f"--batch {excerpt(text)}: give a number or a list like 16,32,64")
    if any(not 1 <= b <= 1_000_000 for b in batches):
        raise UserError(f"--batch {excerpt(text)}: every batch must be 1 to 1,000,000")
    return batches


def _show(
    args: argparse.Namespace,
    profile: Profile,
    source: list[str],
    workers: list[int],
    strategies: list[str],
    given: tuple[Link, str],
    trust: Trust,
) -> None:
    """One batch's predictions: a table (or JSON records) of every pattern with the span its
    validation measured, the bandwidth each needs for the target efficiency, then how far each
    pattern was validated."""
    link, network_source = given
    target = args.target_efficiency
    rows = {s: predict(profile, s, workers, link, args.servers) for s in strategies}
    spans = {s: trust.interval(s, args.servers) for s in strategies}
    needed = {}
    if target is not None:
        needed = {
            s: bandwidth_for(profile, s, workers[-1], target, link, args.servers)
            for s in strategies
        }
    if args.json:
        unit = model_unit(args.model)
        for strategy, predicted in rows.items():
            pattern, overlap = variant(strategy)
            validated = trust.record(strategy, args.servers)  # [] where never validated
            for row in predicted:
                record = {"kind": "prediction", "pattern": pattern.name, "overlap": overlap,
                          "batch": profile.batch, "messages": profile.messages,
                          "ranks_per_node": link.ranks_per_node, **row.__dict__, **unit,
                          "interval": _interval(row, spans[strategy])}  # fmt: skip
                print(json.dumps({**record, "validated": validated}))
        for strategy, value in needed.items():
            record = {"kind": "bandwidth_needed", "strategy": strategy, "workers": workers[-1],
                      "batch": profile.batch, "target_efficiency": target,
                      "bandwidth_bit_s": value}  # fmt: skip
            print(json.dumps(record))
        return
    out = console()
    title = (
        f"predicted: {args.model}, batch {profile.batch}/worker, {_link_words(link)} "
        "(speedup, efficiency at each worker count)"
    )
    paragraph(out, title, style="bold")
    out.print(_table(rows, spans, args.servers))
    say(out, "compute profile:", style="dim")
    for line in source:
        paragraph(out, f"  {line}", style="dim", indent="    ")
    used = sorted({row.comm_from for found in rows.values() for row in found} - {"none", ""})
    paragraph(out, f"network: {network_source}; priced by: {', '.join(used)}", style="dim")
    for strategy, value in needed.items():
        at = f"{strategy} needs {_rate(value)}" if value else f"{strategy} cannot reach it"
        say(
            out,
            f"for {target:.0%} efficiency at {workers[-1]} workers: {at} at "
            f"{link.network.alpha_s * 1e6:g} us",
        )
    for line in trust.lines(strategies, args.servers):
        paragraph(out, line, indent="    ")


def _interval(row: Predicted, span: tuple[float, float, int] | None) -> dict[str, Any] | None:
    """A predicted point's interval: the throughput its validating points' errors span."""
    if span is None:
        return None
    low, high, points = span
    rate = row.throughput_samples_s
    return {"low_samples_s": rate * low, "high_samples_s": rate * high, "points": points}


def model_unit(model: str) -> dict[str, Any]:
    """What a sample of ``model`` is, as a result says it (``sample_unit``: image, token;
    ``units_per_sample``: a token model's declared ``block_size``): a prediction's throughput
    is in samples (images, sequences), read in this unit (:mod:`dlscale.metrics.units`)."""
    from dlscale.contract.models import MODELS
    from dlscale.contract.workload import KINDS

    try:
        spec = MODELS.get(model)
    except UserError:
        spec = None
    kind = KINDS.get(spec.sample) if spec is not None else None
    if spec is None or kind is None or kind.unit == "image":
        return {"sample_unit": "image", "units_per_sample": 1}
    return {"sample_unit": kind.unit, "units_per_sample": spec.input_shape()[0]}


def _given_network(args: argparse.Namespace) -> tuple[Link, str]:
    """The network given by ``--bandwidth`` and ``--latency`` (and the link inside a node)."""
    bandwidth = _rate_of(args.bandwidth, "--bandwidth")
    latency = parse_latency(args.latency, f"--latency {args.latency!r}", PLANNED)
    said = f"given: {args.bandwidth}, {args.latency} a message"
    return _two_level(Link(Network.from_link(bandwidth, latency), fit="given"), args), said


def _fitted_network(where: Path, args: argparse.Namespace) -> tuple[tuple[Link, str], Any]:
    """The network the newest microbench in ``where`` fitted (across nodes, where one ran
    across nodes), and its kind (launcher, emulated network, nodes); with ``--ranks-per-node``
    above 1 and no ``--intra-bandwidth``, the link inside a node from the newest microbench on
    one node without an emulated link."""
    from dlscale.perfmodel.networks import across_nodes, one_node

    fitted = fitted_networks(where)
    across = {k: f for k, f in fitted.items() if across_nodes(k)} or fitted
    key, newest = max(across.items(), key=lambda item: item[1].started_at)
    link, said = newest.link, newest.said
    if args.ranks_per_node > 1 and args.intra_bandwidth is None:
        inside = one_node(fitted)
        if inside is None or inside is newest:
            raise UserError(
                f"--ranks-per-node {args.ranks_per_node}: {where} has no microbench on one node "
                "beside one across nodes to fit the link inside a node from: run `dlscale "
                f"microbench --workers {args.ranks_per_node}` on one host into it, or give "
                "--intra-bandwidth RATE"
            )
        link = replace(link, intra=inside.network, ranks_per_node=args.ranks_per_node)
        said += f"; inside a node: {inside.said}"
    return (_two_level(link, args), said), key[1:]


def _two_level(link: Link, args: argparse.Namespace) -> Link:
    """``link`` between nodes with ``--ranks-per-node`` workers a node, on ``--intra-bandwidth``
    inside each (needed where more than one worker shares a node)."""
    per_node = args.ranks_per_node
    if args.intra_bandwidth is None:
        if per_node > 1 and link.intra is None:
            raise UserError(
                f"--ranks-per-node {per_node}: give the link inside a node too, "
                "--intra-bandwidth RATE (600Gbit for NVLink, 128Gbit for PCIe 4 x16)"
            )
        return link
    rate = _rate_of(args.intra_bandwidth, "--intra-bandwidth")
    latency = parse_latency(args.intra_latency, f"--intra-latency {args.intra_latency!r}", PLANNED)
    return replace(link, intra=Network.from_link(rate, latency), ranks_per_node=per_node)


def _rate_of(text: str, option: str) -> float:
    """A planned link's rate: up to :data:`~dlscale.perfmodel.predict.MAX_BANDWIDTH_BIT_S`
    (NVLink's 3.6 Tbit/s a direction is a link users plan for; tc shapes no more than 1 Tbit/s,
    but nothing is shaped here)."""
    from dlscale.perfmodel.predict import MAX_BANDWIDTH_BIT_S

    return parse_rate(text, f"{option} {text!r}", int(MAX_BANDWIDTH_BIT_S), PLANNED)


def _link_words(link: Link) -> str:
    """``100 Gbit/s, 5 us between nodes; 600 Gbit/s, 2 us inside (4 workers a node)``."""
    net = link.network
    words = f"{_rate(net.bandwidth_bit_s)}, {net.alpha_s * 1e6:.3g} us links"
    if link.intra is None:
        return words
    inside = f"{_rate(link.intra.bandwidth_bit_s)}, {link.intra.alpha_s * 1e6:.3g} us"
    return f"{words} between nodes; {inside} inside ({link.ranks_per_node} workers a node)"


def _rate(bit_s: float) -> str:
    for unit, size in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bit_s >= size * (1 - 1e-9):  # 8 / (8 / 1e9) is a hair under 1e9
            return f"{bit_s / size:.3g} {unit}"
    return f"{bit_s:.3g} bit/s"


def _table(rows: dict[str, list[Predicted]], spans: dict[str, Any], servers: int) -> Table:
    """A row per pattern, a column per worker count, and the span of what its validating
    points measured against their predictions (``measured within``)."""
    from dlscale.report.model import span_words

    table = Table()
    table.add_column("pattern")
    for row in next(iter(rows.values())):
        table.add_column(f"{row.workers:,}", justify="right")
    table.add_column("measured within", justify="right")
    for strategy, predicted in rows.items():
        name = strategy
        if variant(strategy)[0].served:
            name += f" ({servers} server{'s' if servers != 1 else ''})"
        within = span_words(spans[strategy])
        cells = [f"{row.speedup:,.1f}x {row.efficiency:.0%}" for row in predicted]
        table.add_row(cell(name), *cells, within)
    return table
