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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from dlscale.cli.arguments import decimal, whole, whole_list
from dlscale.cli.predict_trust import Trust, stored_rows, validation_rows
from dlscale.cli.profile import compute_profile, message_count
from dlscale.cli.stored_profile import stored_points, study_profile
from dlscale.cli.tables import cell, console, paragraph, say
from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt, shell_command
from dlscale.launchers.links import parse_latency, parse_rate
from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.networks import Fitted
from dlscale.perfmodel.predict import STRATEGIES, Profile, bandwidth_for, predict

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
    parser.add_argument("--bandwidth", help="each node's link: 25Gbit, 100mbit")
    parser.add_argument("--latency", default="5us", help="one-way latency per message: 5us")
    parser.add_argument(
        "--network-from",
        metavar="DIR",
        help="the network fitted by the newest dlscale microbench in DIR, not --bandwidth",
    )
    parser.add_argument(
        "--strategy",
        default=",".join(STRATEGIES),
        help=f"comma-separated, of {', '.join(STRATEGIES)}",
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
    strategies = [s.strip() for s in args.strategy.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise UserError(f"--strategy: unknown {unknown}; known: {', '.join(STRATEGIES)}")
    if args.validate is not None:
        return _validate(Path(args.validate), args)
    if (args.bandwidth is None) == (args.network_from is None):
        raise UserError("give the network: --bandwidth RATE (and --latency), or --network-from DIR")
    kind: tuple[Any, ...] | None = None
    if args.network_from is not None:
        fitted = fitted_networks(Path(args.network_from))
        key, newest = max(fitted.items(), key=lambda item: item[1].started_at)
        kind = key[1:]  # its launcher, emulated network and nodes
        nets = {s: newest.for_strategy(s)[0] for s in strategies}
        used = sorted({newest.for_strategy(s)[1] for s in strategies})
        network_source = f"{newest.said}; patterns used: {', '.join(used)}"
    else:
        given, _, network_source = _given_network(args)
        nets = dict.fromkeys(strategies, given)
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
        _show(args, profile, source, workers, strategies, nets, network_source, trust)
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
    nets: dict[str, Network],
    network_source: str,
    trust: Trust,
) -> None:
    """One batch's predictions: a table (or JSON records) and the bandwidth each strategy
    needs for the target efficiency, then how far each strategy was validated."""
    target = args.target_efficiency
    rows = {s: predict(profile, s, workers, nets[s], args.servers) for s in strategies}
    needed = {}
    if target is not None:
        needed = {
            s: bandwidth_for(profile, s, workers[-1], target, nets[s].alpha_s, args.servers)
            for s in strategies
        }
    if args.json:
        for strategy, predicted in rows.items():
            validated = trust.record(strategy, args.servers)  # [] where never validated
            unit = model_unit(args.model)
            for row in predicted:
                record = {"kind": "prediction", "batch": profile.batch,
                          "messages": profile.messages, **row.__dict__, **unit}  # fmt: skip
                print(json.dumps({**record, "validated": validated}))
        for strategy, value in needed.items():
            record = {"kind": "bandwidth_needed", "strategy": strategy, "workers": workers[-1],
                      "batch": profile.batch, "target_efficiency": target,
                      "bandwidth_bit_s": value}  # fmt: skip
            print(json.dumps(record))
        return
    net = nets[strategies[0]]
    out = console()
    link = (
        f"{_rate(net.bandwidth_bit_s)} links, {net.alpha_s * 1e6:g} us latency"
        if len(set(nets.values())) == 1
        else "links fitted per pattern (below)"
    )
    title = f"predicted: {args.model}, batch {profile.batch}/worker, {link} (speedup, efficiency)"
    paragraph(out, title, style="bold")
    out.print(_table(rows, args))
    say(out, "compute profile:", style="dim")
    for line in source:
        paragraph(out, f"  {line}", style="dim", indent="    ")
    paragraph(out, f"network: {network_source}", style="dim")
    for strategy, value in needed.items():
        at = f"{strategy} needs {_rate(value)}" if value else f"{strategy} cannot reach it"
        say(
            out,
            f"for {target:.0%} efficiency at {workers[-1]} workers: {at} at "
            f"{nets[strategy].alpha_s * 1e6:g} us",
        )
    for line in trust.lines(strategies, args.servers):
        paragraph(out, line, indent="    ")


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


def _given_network(args: argparse.Namespace) -> tuple[Network, float, str]:
    bandwidth = parse_rate(args.bandwidth, f"--bandwidth {args.bandwidth!r}")
    latency = parse_latency(args.latency, f"--latency {args.latency!r}")
    said = f"given: {args.bandwidth}, {args.latency} a message"
    return Network.from_link(bandwidth, latency), latency, said


def _validate(results: Path, args: argparse.Namespace) -> int:
    """Every measured point of ``results`` predicted on its network: the given one, or the
    newest microbench (in ``--network-from``, else ``results``) run with the same launcher,
    emulated network and nodes."""
    from dlscale.perfmodel import validate
    from dlscale.perfmodel.networks import link_lookup
    from dlscale.perfmodel.validate import Link, errors_in_words, median_basis

    as_json = args.json
    if args.bandwidth is not None:
        given, _, network_source = _given_network(args)
        sources = {"all points": network_source}
        link_of: Callable[[dict[str, Any]], Link | None] = lambda point: Link(given)  # noqa: E731
    else:
        link_of, sources = link_lookup(fitted_networks(Path(args.network_from or results)))

    rows = validation_rows(results, link_of)
    if not rows:
        raise UserError(
            f"no point in {results} to check: it needs completed points of 2 workers or more "
            "whose engine names its synchronization (sync_pattern: every multi-worker engine "
            "but tf-mirrored and PowerSGD) with its compute without synchronization (its no-sync "
            "probe, or its 1-worker baseline at the same threads in the same store), and a "
            "microbench run on the same network (dlscale microbench with the same --launcher "
            "and --set network/nnodes), or --bandwidth"
        )
    medians, engines = validate.median_errors(rows), validate.per_engine(rows)
    if as_json:
        for row in rows:
            print(json.dumps({"kind": "validation", **row}))
        for engine, errors in engines.items():
            print(json.dumps({"kind": "engine_median_abs_error", "backend": engine, **errors}))
        print(json.dumps({"kind": "median_abs_error", **medians}))
        return 0
    out = console()
    say(out, f"predicted against measured: {len(rows)} points of {results}", style="bold")
    out.print(_validation_table(rows))
    for where, said in sources.items():
        say(out, f"network ({where}): {said}", style="dim")
    for engine, errors in engines.items():
        basis = median_basis([r for r in rows if r["backend"] == engine])
        say(out, f"{engine}: median absolute error {errors_in_words(errors)} over {basis}")
    every = errors_in_words(medians)
    say(out, f"every engine: median absolute error {every} over {median_basis(rows)}")
    return 0


def _validation_table(rows: list[dict[str, Any]]) -> Table:
    """The validation rows, each throughput in the rows' unit (img/s, tok/s; samples/s for
    rows of several: :mod:`dlscale.metrics.units`)."""
    from dlscale.metrics.units import rate_for, sample_unit
    from dlscale.perfmodel.validate import share_words

    rate = rate_for(sample_unit(row) for row in rows)
    table = Table()
    for column in ("backend", "model", "workers", "network", "algorithm",
                   f"measured {rate.label}", "compute ms (from)", "sync ms (from)",
                   f"predicted {rate.label} (error)", "overlap bound"):  # fmt: skip
        right = "/s" in column or "ms" in column or column == "overlap bound"
        table.add_column(column, justify="right" if right else "left")
    for row in rows:
        algorithm = row["algorithm"] + (f", {row['servers']} srv" if row["servers"] else "")
        measured, predicted, bound = (
            rate.of(row, f"{which}_samples_s") for which in ("measured", "predicted", "overlap")
        )
        overlap = (
            f"{bound:,.1f} ({row['overlap_error']:+.1%}; {share_words(row)})"
            if bound is not None
            else "-"
        )
        table.add_row(
            cell(row["backend"]), cell(row["model"]) + (" (noisy)" if row["noisy"] else ""),
            str(row["workers"]), cell(row["network"] or row["launcher"]), cell(algorithm),
            f"{measured:,.1f}",
            f"{row['compute_ms']:.1f} ({cell(row['compute_from'])})",
            f"{row['comm_ms']:.2f} ({cell(row['comm_from'])})",
            f"{predicted:,.1f} ({row['error']:+.1%})", overlap,
        )  # fmt: skip
    return table


def fitted_networks(results: Path) -> dict[tuple[Any, ...], Fitted]:
    """The stored fitted networks of ``results`` (:mod:`dlscale.perfmodel.networks`); none at
    all is one line (naming the files left out as damaged and the fits that cannot be used).
    Beside a usable fit, each file left out and each fit that cannot be used (a microbench whose
    times did not grow with the size: no bandwidth term) is one warning line: its engine's
    network is then unknown, and the other engines' are still used."""
    from dlscale.perfmodel.networks import fitted_networks as stored
    from dlscale.store.results import print_warning

    skipped: list[str] = []
    found = stored(results, on_problem=skipped.append, on_skipped=skipped.append)
    if not found:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise UserError(
            f"no microbench with a fitted network in {results}{why}: run `"
            + shell_command(["dlscale", "microbench", "--workers", "2", "--results", results])
            + "` first, or give --bandwidth"
        )
    for problem in skipped:
        print_warning(problem)
    return found


def _rate(bit_s: float) -> str:
    for unit, size in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bit_s >= size:
            return f"{bit_s / size:.3g} {unit}"
    return f"{bit_s:.3g} bit/s"


def _table(rows: dict[str, list[Any]], args: Any) -> Table:
    table = Table()
    table.add_column("workers", justify="right")
    for strategy in rows:
        servers = f"{args.servers} server{'s' if args.servers != 1 else ''}"
        name = f"{strategy} ({servers})" if strategy.startswith("ps") else strategy
        table.add_column(cell(name), justify="right")
    for index, count in enumerate(row.workers for row in next(iter(rows.values()))):
        cells = [str(count)]
        for predicted in rows.values():
            row = predicted[index]
            cells.append(f"{row.speedup:,.1f}x {row.efficiency:.0%}")
        table.add_row(*cells)
    return table
