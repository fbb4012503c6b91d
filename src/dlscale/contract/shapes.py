"""What every stored value may be: the shapes of a result's figures and facts, declared once
as data (units, bounds, whether a value may be absent).

The writer checks a run's metrics against them before it stores the run as completed, the
aggregation initialises exactly the keys of :data:`METRICS`, and readers check every stored
result against them (:mod:`dlscale.store.validate` holds the checks; :class:`Result`'s own
fields carry theirs, :mod:`dlscale.contract.result`). Definitions and units: docs/metrics.md
("Stored values" gives these bounds).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MAX_QUANTITY = 1e15
"""The largest throughput (samples/s), time (ms or s), byte count or count a stored result may
hold. Far beyond any machine (a petabyte per step, 31 million years), and far inside a float's
range, so sums, means and ratios of such figures never overflow."""
MAX_FLOPS = 1e21
"""The largest FLOP count of one sample or FLOP rate of one device a result may hold: a
trillion-parameter model's sequence of a million tokens, a zettaFLOP/s."""
TIMESTAMP_RANGE_S = (0.0, 4e9)
"""Seconds since the epoch a stored start or finish time may be: 1970 to 2096 (a time beyond
it cannot be printed as a date)."""


@dataclass(frozen=True)
class Shape:
    """What one stored value may be. ``None`` (not measured, does not apply) always may."""

    kind: str
    """``number``, ``count`` (a whole number), ``flag``, ``text``, ``list`` (of ``item``),
    ``by_key`` (an object of ``item`` keyed by a whole number: a rank, a staleness),
    ``records`` (a list of objects with ``fields``; ``record``: one of them) or ``any`` (every
    number in it finite)."""
    unit: str = ""
    low: float = 0.0
    high: float = MAX_QUANTITY
    positive: bool = False
    """Above ``low``, not equal to it."""
    item: Shape | None = None
    fields: tuple[tuple[str, Shape], ...] = ()
    """``records``: each record's fields, all present; a field's value may be None only
    where ``nullable``."""
    nullable: bool = True

    @property
    def expected(self) -> str:
        """The shape in words, for messages."""
        unit = f" {self.unit}" if self.unit else ""
        if self.kind in ("number", "count"):
            whole = "a whole number" if self.kind == "count" else "a number"
            low = f"({self.low:g}" if self.positive else f"[{self.low:g}"
            return f"{whole} in {low}, {self.high:g}]{unit}"
        if self.kind in ("list", "by_key") and self.item is not None:
            items = {"count": "whole numbers", "text": "strings"}.get(self.item.kind, "numbers")
            if self.kind == "by_key":
                return f"an object of {items} keyed by whole numbers"
            return f"a list of {items}"
        if self.kind in ("records", "record"):
            names = ", ".join(name for name, _ in self.fields)
            return (
                f"a list of records ({names})" if self.kind == "records" else f"a record ({names})"
            )
        return {"flag": "true or false", "text": "a string", "any": "a finite number"}[self.kind]


def number(unit: str = "", low: float = 0.0, high: float = MAX_QUANTITY) -> Shape:
    return Shape("number", unit, low, high)


def count(unit: str = "") -> Shape:
    return Shape("count", unit)


def list_of(item: Shape, *, gaps: bool = False) -> Shape:
    """A list of ``item``; ``gaps``: an item may be null (a step whose loss was not finite)."""
    return Shape("list", item=replace(item, nullable=gaps))


def by_key(item: Shape) -> Shape:
    return Shape("by_key", item=item)


def records(**fields: Shape) -> Shape:
    return Shape("records", fields=tuple(fields.items()))


FLAG, TEXT, ANY = Shape("flag"), Shape("text"), Shape("any")
SECONDS, MS, RATE, BYTES = number("s"), number("ms"), number("samples/s"), number("bytes")
EVAL_LOSS_ROUNDING = 1e-3
"""How far below 0 a held-out loss may read: a model that predicts its held-out set almost
surely sums losses of about 0 in float32, which MXNet's rounding took to -1.4e-6 nats."""
SIGNED = number(low=-MAX_QUANTITY)
"""A figure that may be below 0 (exposed communication: noise; an outside load or steal,
the probe's too: counters read a moment apart; seconds lost to a restart: clocks of two
hosts)."""
FRACTION = number(high=1.0)
TIMESTAMP = number("s since the epoch", *TIMESTAMP_RANGE_S)
LOSS = number("nats", low=-MAX_QUANTITY)

METRICS: dict[str, Shape] = {
    "throughput_samples_s": RATE,
    "throughput_ci95_samples_s": RATE,
    "throughput_windows_samples_s": list_of(RATE),
    "sample_unit": TEXT,
    "units_per_sample": Shape("count", "units", low=1),
    "step_time_p50_ms": MS,
    "step_time_p95_ms": MS,
    "input_time_p50_ms": MS,
    "input_wait_fraction": number(),
    "step_time_nosync_p50_ms": MS,
    "forward_time_p50_ms": MS,
    "exposed_comm_fraction": SIGNED,
    "exposed_comm_ci95": number(),
    "exposed_comm_significant": FLAG,
    "exposed_comm_outside_load_max": SIGNED,
    "exposed_comm_steal_max": SIGNED,
    "exposed_comm_noisy": FLAG,
    "page_faults_per_step": number("faults"),
    "outside_load_max": SIGNED,
    "steal_max": SIGNED,
    "windows": count("windows"),
    "windows_loaded": count("windows"),
    "windows_recorded": count("windows"),
    "windows_left_out": count("windows"),
    "noise_guard_shift": number(low=-1.0),
    "noisy": FLAG,
    "run_delay_max": number(),
    "waited": FLAG,
    "epoch_time_s": SECONDS,
    "final_train_loss": LOSS,
    "loss_diverged": FLAG,
    "train_loss_by_window": list_of(LOSS),
    "train_loss_by_step": list_of(LOSS, gaps=True),
    "eval_accuracy": FRACTION,
    "eval_history": records(
        epoch=Shape("count", nullable=False),
        accuracy=Shape("number", high=1.0, nullable=False),
        loss=LOSS,
        elapsed_s=Shape("number", "s", nullable=False),
        images=Shape("count", nullable=False),
    ),
    "time_to_accuracy_s": SECONDS,
    "eval_loss": number("nats", low=-EVAL_LOSS_ROUNDING),
    "time_to_loss_s": SECONDS,
    "epochs_to_accuracy": count("epochs"),
    "measured_steps": count("steps"),
    "measured_images": count("images"),
    "rank_step_time_mean_ms": by_key(Shape("number", "ms", nullable=False)),
    "bytes_sent_per_step_model": BYTES,
    "bytes_sent_per_step_counted": BYTES,
    "gradient_bytes": count("bytes"),
    "sync_pattern": TEXT,
    "sync_servers": count("servers"),
    "sync_message_bytes": list_of(Shape("count", "bytes", nullable=False)),
    "sync_message_ready_ms": list_of(Shape("number", "ms", nullable=False)),
    "sync_cycle_ms": Shape("number", "ms", positive=True),
    "sync_fusion_bytes": count("bytes"),
    "staleness_mean": number("updates"),
    "staleness_p50": number("updates"),
    "staleness_max": count("updates"),
    "staleness_histogram": by_key(Shape("count", nullable=False)),
    "train_flops_per_sample": Shape("number", "FLOPs", high=MAX_FLOPS, positive=True),
    "train_flops_per_sample_causal": Shape("number", "FLOPs", high=MAX_FLOPS, positive=True),
    "flops_rule": TEXT,
    "flops_source": TEXT,
    "peak_flops_per_worker": Shape("number", "FLOP/s", high=MAX_FLOPS, positive=True),
    "peak_basis": TEXT,
    "peak_source": TEXT,
    "mfu_missing": TEXT,
    "rss_peak_bytes": count("bytes"),
    "rss_peak_bytes_by_rank": by_key(Shape("count", "bytes", nullable=False)),
    "rss_peak_reset": FLAG,
    "device_peak_allocated_bytes": count("bytes"),
    "device_peak_reserved_bytes": count("bytes"),
    "restarts": count("restarts"),
    "restart_lost_s": number("s", low=-MAX_QUANTITY),
    "traces": list_of(Shape("text", nullable=False)),
}
"""Every metric a run's ``result.json`` holds (docs/metrics.md defines each), by its shape.
:func:`dlscale.metrics.aggregate.aggregate` writes exactly these keys; readers check them
(:mod:`dlscale.store.validate`)."""

RENAMED_METRICS = {
    "throughput_img_s": "throughput_samples_s",
    "throughput_ci95_img_s": "throughput_ci95_samples_s",
    "throughput_windows_img_s": "throughput_windows_samples_s",
}
"""Metrics a result stored before schema 4 holds under another name (it measured images, one a
sample: its images per second are its samples per second); checked under the name it holds,
then read under today's (:mod:`dlscale.store.migrate`)."""

MEASURED = ("throughput_windows_samples_s", "throughput_samples_s")
"""A completed run's measurement: above 0 (an empty or backwards clock is no measurement)."""
COMPLETED = {
    "throughput_samples_s": Shape("number", "samples/s", positive=True),
    "throughput_windows_samples_s": list_of(
        Shape("number", "samples/s", positive=True, nullable=False)
    ),
}

ENVIRONMENT: dict[str, Shape] = {
    **dict.fromkeys(
        ("hostname", "cpu_model", "os", "python", "dlscale_version", "git_commit", "engine_code"),
        TEXT,
    ),
    **dict.fromkeys(("torch_version", "cuda_version", "device"), TEXT),
    **dict.fromkeys(("cpu_cores_logical", "cpu_cores_usable", "torch_threads"), count("cores")),
    "memory_gib": number("GiB"),
    "gpu_names": list_of(Shape("text", nullable=False)),
    "gloo_available": FLAG,
    "nccl_available": FLAG,
}
"""The environment's values that reports print (``runtime.environment``, a framework's facts);
any other key (a plug-in's facts) may hold anything whose numbers are finite."""
