"""The records a worker writes, defined once: name, fields with their units, schema version.

Every process writes its own JSON-lines file of these (``events.rank<r>.jsonl``); the writer
stamps each with the schema, rank, host and time. The parent reads them back as these types
(:func:`dlscale.contract.events.read_records`) and aggregates them; nothing else parses events.
Fields that an engine cannot give are ``None`` (Keras ``fit`` reports per window, so a window
may come without ``step_ms`` and ``data_ms``). Units are in the names (house style 7).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

EVENTS_SCHEMA = 3
"""Version of the records; bump it when a record changes meaning. 3: a window's load counters,
the interleaved ``probe`` window, ``synchronizes`` on ``environment`` (later within 3, as an
optional field that an older record lacks and a reader takes as ``None``: the probe windows'
load counters with ``load_span_s``); 2: typed records, a role on ``start``, optional per-step
times; 1 had the same fields, all required."""


@dataclass(frozen=True, kw_only=True)
class Record:
    event: ClassVar[str]
    rank: int = -1
    """Stamped by the writer (the process's rank)."""
    host: str = ""
    time: float = 0.0
    """Seconds since the epoch when written."""

    def payload(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("rank", "host", "time")
        }


@dataclass(frozen=True, kw_only=True)
class Start(Record):
    event = "start"
    pid: int = 0
    world_size: int = 0
    """Processes in the run (every role)."""
    local_rank: int = 0
    role: str = "worker"
    python: str = ""
    cpus: list[int] = field(default_factory=list)
    """The CPUs the process may run on as it starts (its affinity, before a framework pins
    it); empty where that cannot be read (not Linux) or the record is older."""


@dataclass(frozen=True, kw_only=True)
class Environment(Record):
    """What the process ran on, read inside it: its interpreter and packages, the framework's
    own facts (``framework``: e.g. torch_version, gpu_names)."""

    event = "environment"
    python: str = ""
    """Path of the worker's interpreter."""
    python_version: str = ""
    packages: dict[str, str] = field(default_factory=dict)
    """Versions of numpy and the frameworks, from the worker's own site-packages."""
    framework: dict[str, Any] = field(default_factory=dict)
    synchronizes: bool | None = None
    """Whether the engine's steps synchronize gradients (False: a single process; its exposed
    communication is 0 by definition). ``None``: not said (events schema < 3)."""
    allocator: str | None = None
    """The memory allocator really mapped in the process (``runtime.allocator``)."""
    scheduler: dict[str, str] = field(default_factory=dict)
    """The batch scheduler's ids of the job and step the process ran in (``slurm_job_id``,
    ``slurm_step_id``), where a scheduler started it; recorded in result.json's environment."""
    data: dict[str, Any] = field(default_factory=dict)
    """What the data set says of the data the process read (``python-source``: the Python
    version, files, tokens and SHA-256 of its corpus); empty where it says nothing."""
    peak: dict[str, Any] = field(default_factory=dict)
    """The peak FLOP/s of one worker's device, the denominator of MFU
    (:meth:`dlscale.runtime.peak.Peak.to_dict`: ``flops_s``, ``basis``, ``source``); empty
    where there is none, with why in ``peak_missing``."""
    peak_missing: str | None = None
    """Why the process knows no peak (an unknown GPU: the key that sets one), in one line."""
    flops: dict[str, Any] = field(default_factory=dict)
    """A model's training FLOPs per sample counted in the worker where nothing declares them
    (a user's torch model: :class:`~dlscale.contract.flops.TrainingFlops`); empty otherwise."""


@dataclass(frozen=True, kw_only=True)
class Strategy(Record):
    """Facts of the gradient synchronization, written once by rank 0."""

    event = "strategy"
    gradient_bytes: int | None = None
    bytes_sent_per_step_model: float | None = None
    """Bytes one worker sends per step, by the strategy's model (e.g. 2(N-1)/N x payload)."""
    facts: dict[str, Any] = field(default_factory=dict)
    traces: list[str] = field(default_factory=list)
    """Files the engine writes into the run's directory in Chrome's trace format (Horovod's
    timeline): the report links them."""


@dataclass(frozen=True, kw_only=True)
class Messages(Record):
    """The messages a synchronized step sent, as the engine saw them while it ran (Horovod's
    fused responses, from its timeline), written after the last step by the first training
    rank; where present they are the run's ``sync_message_bytes`` rather than the ones its
    ``strategy`` record listed."""

    event = "messages"
    message_bytes: list[int] = field(default_factory=list)
    """The bytes of each message of one typical step (the median count), in the order sent."""
    ready_ms: list[float] = field(default_factory=list)
    """For each message, how long before the step's last gradient (backward's end) it was
    ready, in ms; empty where not seen (a message read from Horovod's timeline)."""
    cycle_ms: float | None = None
    """The engine sends what is ready once a cycle of this long (Horovod's ``cycle_ms``)."""
    fusion_bytes: int | None = None
    """It fuses what is ready into messages of up to this many bytes (0: none)."""
    steps: int = 0
    """The complete steps seen."""
    counts: list[int] = field(default_factory=list)
    """Each seen step's count of messages, ascending."""
    source: str = ""
    """Where they were read (e.g. the timeline's file)."""


@dataclass(frozen=True, kw_only=True)
class Window(Record):
    """One timed window of steps on one process (a measurement, or the no-sync probe)."""

    event = "window"
    kind: str = "measure"
    """``measure``; or the exposed-communication probe, whose steps alternate: ``probe``
    (synchronized steps), ``nosync`` (the same steps without gradient synchronization) and,
    where the engine can run one alone, ``forward`` (a step's forward and loss only)."""
    index: int = 0
    epoch: int | None = None
    steps: int = 0
    samples: int = 0
    """Images this process trained in the window."""
    duration_s: float = 0.0
    step_ms: list[float] | None = None
    """Each step's time, input included; ``None`` when the engine times whole windows."""
    data_ms: list[float] | None = None
    """Each step's input time (fetching the batch); ``None`` when not measurable."""
    loss_sum: float | None = None
    """Sum of the steps' mean training losses; ``None`` when a loss was not finite."""
    loss_count: int = 0
    loss_nonfinite: bool = False
    step_losses: list[float | None] | None = None
    """Each step's mean training loss on this process, in order (``None`` where not finite);
    ``None`` when the engine trains whole windows (Keras ``fit`` reports a running mean, not
    each step's loss) or returned no loss. Two engines' runs can be compared step by step
    from these."""
    bytes_sent: float | None = None
    """Bytes this process sent for gradient synchronization in the window, if counted."""
    epoch_steps: int | None = None
    """Steps of the whole epoch this window belongs to (epoch mode: the first epoch's window
    lacks the warm-up steps)."""
    minor_faults: int | None = None
    """Minor page faults of this process during the window."""
    machine_busy_s: float | None = None
    """CPU seconds the whole machine was busy during the window (first training rank only)."""
    machine_steal_s: float | None = None
    """CPU seconds stolen by the hypervisor during the window (first training rank only)."""
    run_cpu_s: float | None = None
    """CPU seconds used by the run's own processes during the window (first training rank)."""
    machine_cores: int | None = None
    """CPUs the machine counters sum over."""
    step_starts_s: list[float] | None = None
    """The probe's windows (``probe``, ``nosync``): each timed step's start, seconds after the
    probe began, so that the two windows' steps merged by start show the ABBA order they ran in
    (``None``: a measured window, or records written before it existed)."""
    run_delay_s: float | None = None
    """Seconds this process's threads waited, runnable, for a CPU during the window, summed
    over its threads (the kernel's run delay, ``/proc/self/task/*/schedstat``); ``None``: not
    read (no /proc, records written before it existed)."""
    involuntary_switches: int | None = None
    """Times this process's threads were preempted during the window."""
    load_span_s: float | None = None
    """Wall seconds the machine counters above span where that is not ``duration_s``: the
    probe's two windows (``probe``, ``nosync``) carry the same counters, read around the whole
    probe (its steps of both kinds interleave, its warm-up pair included). ``None``: the
    window's own time (every ``measure`` window, and records written before it existed)."""
    rss_peak_bytes: int | None = None
    """The process's high-water resident set (``VmHWM``: its memory in RAM, shared libraries,
    the framework's threads and pinned buffers included) at the window's end, the mark reset
    as the window began where the kernel allows (``rss_peak_reset``); ``None``: not read."""
    rss_peak_reset: bool | None = None
    """The mark was reset as the window began, so the warm-up's peak is not in it (False: the
    process's peak since it started)."""
    device_peak_allocated_bytes: int | None = None
    """On a GPU: the most memory torch's caching allocator held in tensors during the window
    (``allocated_bytes.all.peak``); JAX and TensorFlow engines do not record it yet."""
    device_peak_reserved_bytes: int | None = None
    """On a GPU: the most the allocator reserved from the device (torch only)."""


@dataclass(frozen=True, kw_only=True)
class Eval(Record):
    event = "eval"
    epoch: int = 0
    correct: int = 0
    total: int = 0
    loss_sum: float | None = 0.0
    """Summed evaluation loss; ``None`` when it was not finite (a diverged model)."""
    elapsed_s: float = 0.0
    """Seconds since training started (time to accuracy)."""


@dataclass(frozen=True, kw_only=True)
class Staleness(Record):
    """Histogram of gradient staleness at one parameter server (value -> gradients)."""

    event = "staleness"
    server: int = 0
    histogram: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Server(Record):
    """A server's counters at the end of the run."""

    event = "server"
    server: int = 0
    counters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Resume(Record):
    """A restarted process of the run resumed (:mod:`dlscale.runtime.checkpoint`)."""

    event = "resume"
    restart: int = 0
    """Which attempt this process is (1: the first restart), counted from its rank's records."""
    windows_done: int = 0
    """Windows (epochs) kept from the saved state; this process measures the rest."""
    lost_s: float = 0.0
    """Seconds from the last state kept (its save, or the first start without one) to this
    process's first new work: the failed attempt's work after it, the failure's detection,
    the restart, this process's start-up and the restore."""


@dataclass(frozen=True, kw_only=True)
class Error(Record):
    event = "error"
    kind: str = ""
    """``user`` for a problem with the input, else the exception's type."""
    message: str = ""
    traceback: str | None = None


@dataclass(frozen=True, kw_only=True)
class End(Record):
    event = "end"


@dataclass(frozen=True, kw_only=True)
class Collective(Record):
    """One collective at one message size on one rank (``dlscale microbench``)."""

    event = "collective"
    collective: str = ""
    """all_reduce, all_gather, reduce_scatter, broadcast, send_recv or ps_pushpull."""
    bytes: int = 0
    """The message size as nccl-tests counts it (all_gather: the gathered output)."""
    times_s: list[float] = dataclasses.field(default_factory=list)
    """This rank's time of each timed iteration (send_recv: half the round trip); empty on a
    rank that sat it out."""
    max_error: float = 0.0
    """The largest difference from the exact result, checked after the first timed call (of
    the elements whose difference is a finite number: one that is not is still wrong)."""
    correct: bool = True
    wrong_elements: int = 0
    """How many elements of this rank's checked result differ from the exact one (0: exact;
    also 0 in records written before it existed, where ``correct`` alone says)."""
    first_wrong: int | None = None
    """The index of the first of them in this rank's result; ``None`` when none differs."""
    checked_elements: int = 0
    """How many elements the check compared (this rank's result: all_gather's p parts,
    reduce_scatter's own part, JAX's every array of the call in order); 0: not said (records
    written before it existed)."""
    servers: int = 0
    """The parameter servers that held the message (MXNet's kvstore: one below
    ``MXNET_KVSTORE_BIGARRAY_BOUND`` elements, else all of them); 0: it went through none."""
    messages_per_call: int = 1
    """The messages of ``bytes`` one timed call ran back to back (JAX: one compiled program
    reducing that many arrays, as a training step's gradient; ``times_s`` is then each call's
    time divided by them: one message's share)."""


RECORD_TYPES: dict[str, type[Record]] = {
    cls.event: cls
    for cls in (
        Start,
        Environment,
        Strategy,
        Messages,
        Window,
        Eval,
        Staleness,
        Server,
        Resume,
        Error,
        End,
        Collective,
    )
}


def from_dict(data: dict[str, Any]) -> Record | None:
    """A stored record as its type; ``None`` for an event this version does not know."""
    cls = RECORD_TYPES.get(data.get("event", ""))
    if cls is None:
        return None
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
