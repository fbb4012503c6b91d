"""dlscale's cost per training step in user-space instructions, counted by ``perf stat`` (or,
where the machine has no hardware counters, by valgrind).

Wall time on a shared machine scatters by several percent; the number of instructions a
process executes in user space does not (the kernel's work, e.g. for page faults, which varies
from run to run, is left out by ``:u``). This script counts ``instructions:u`` and ``cycles:u``
of one training process:

  bare     benchmarks/bare_loop.py --dlscale-data (plain PyTorch: model, SGD, one fixed batch)
  dlscale  the worker of a 1-worker torch-single run (``dlscale run --json``), run under perf
           through the ``python`` key (a wrapper script written here); the dlscale parent,
           whose polling loop's instructions grow with wall time, is not counted

with the same model, optimizer, seed, data, batch, warm-up steps and 1 thread, each for N1 and
N2 measured steps (dlscale: one window of N steps), so that everything but the steps (start-up,
imports, the model's construction, the per-window bookkeeping) cancels in

  per step = (count(N2 steps) - count(N1 steps)) / (N2 - N1).

The bare loop and dlscale compute the same steps from the same weights and batch, which the
equal sums of their losses show (printed). Everything is measured ``--repeats`` times.

``--counter valgrind`` counts with valgrind's cachegrind instead (``--cache-sim=no``: the
instructions executed, ``Ir``, with no cache model), in software: exact and repeatable without
a PMU, about 20 to 50 times slower, and only ``instructions:u`` (no cycles). Valgrind shows
the program its own CPU, without AVX-512, so oneDNN picks AVX2 kernels and the bare step
counts more instructions than on the real CPU; the overhead is then a fraction of a larger
step, and the absolute instructions dlscale adds per step are the figure to carry over.
``--counter auto`` takes perf where it can count, else valgrind where installed; the default
is perf alone, so that a machine without counters answers at once instead of starting an
hour-long valgrind run nobody asked for.

Usage: python benchmarks/instructions.py [--n1 4] [--n2 12] [--repeats 2] [--model resnet44]
           [--counter auto|perf|valgrind]
Prints the per-step counts of both, each repeat's overhead (dlscale / bare - 1) and the mean;
exits 1 if the mean instruction overhead exceeds --max-overhead (0.5%). Where neither counter
can count (perf: no PMU, perf_event_paranoid; valgrind not installed), it says so in one line,
prints NOT MEASURED and exits 0: no verdict, not a pass. Exit 2: a run failed, or the repeats
disagree by more than the target (no verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVENTS = ("instructions:u", "cycles:u")
GATED = "instructions:u"
"""The event the overhead target applies to; cycles are printed, not gated (they depend on
the machine's state: caches, frequency, other tenants)."""
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
INSTALL = "scripts/install-counters.sh (Debian: apt-get install linux-perf; Ubuntu: linux-tools)"
VALGRIND_INSTALL = "scripts/install-counters.sh, or apt-get install valgrind"
RUN_TIMEOUT_S = 1800
LOSS_RTOL = 1e-9


class NotMeasurable(Exception):
    """perf cannot count the events here; the message says why."""


class Failed(Exception):
    """A measured run failed; the message says which and how."""


@dataclass(frozen=True)
class Count:
    values: dict[str, float]
    loss_sum: float | None


def perf_problem(perf: str | None, events: tuple[str, ...]) -> str | None:
    """Why perf cannot count ``events`` for this user here, and what would fix it; ``None`` if
    it can."""
    paranoid = _read(PARANOID)
    where = (
        f"perf_event_paranoid = {paranoid}" if paranoid is not None else "no perf_event_paranoid"
    )
    if perf is None:
        return f"perf is not installed; install it: {INSTALL}"
    try:
        trial = subprocess.run(
            [perf, "stat", "-x,", "-e", ",".join(events), "--", "true"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"{perf} does not run ({error}); reinstall it: {INSTALL}"
    lines = [line for line in trial.stderr.splitlines() if line.strip()]
    if trial.returncode != 0:
        last = lines[-1].strip() if lines else f"exit code {trial.returncode}"
        return (
            f"`perf stat -e {','.join(events)} true` failed ({where}): {last}; as root, "
            "`sysctl kernel.perf_event_paranoid=2` lets users count their own processes (a "
            "container also needs perf_event_open allowed by its seccomp profile)"
        )
    try:
        parse_perf_csv(trial.stderr, events)
    except NotMeasurable as error:
        return (
            f"{error} ({where}{_pmu_hint()}); counting needs a kernel that drives the CPU's "
            "counters: bare metal, or a virtual machine with a virtual PMU"
        )
    return None


def _pmu_hint() -> str:
    if Path("/sys/bus/event_source/devices").is_dir() and not any(
        Path("/sys/bus/event_source/devices", name).exists() for name in ("cpu", "cpu_core")
    ):
        return "; the kernel drives no hardware PMU, as in a virtual machine without one"
    return ""


def parse_perf_csv(text: str, events: tuple[str, ...]) -> dict[str, float]:
    """The counts of ``perf stat -x,`` output (file or stderr). perf has already scaled a
    multiplexed count (it ran on a counter part of the time) to the whole run; a hybrid CPU's
    per-PMU lines (``cpu_core/instructions:u/``, ``cpu_atom/...``) are added up."""
    counts: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if line.startswith("#") or len(fields) < 3:
            continue
        value, event = fields[0].strip(), _event_name(fields[2])
        if event not in events:
            continue
        if value.startswith("<"):  # <not supported>, <not counted>
            raise NotMeasurable(f"perf reports {event} as {value}")
        counts[event] = counts.get(event, 0.0) + float(value)
    missing = [event for event in events if event not in counts]
    if missing:
        raise NotMeasurable(f"perf printed no count for {', '.join(missing)}")
    return counts


def _event_name(field: str) -> str:
    """``instructions:u`` of ``instructions:u`` or ``cpu_core/instructions:u/``."""
    field = field.strip()
    if field.count("/") == 2 and field.endswith("/"):
        return field.split("/")[1]
    return field


class Perf:
    """``perf stat`` of the hardware counters."""

    name = "perf"
    suffix = "perf.csv"
    timeout_s = RUN_TIMEOUT_S

    def __init__(self, perf: str, events: tuple[str, ...]) -> None:
        self.perf, self.events = perf, events

    def argv(self, out: Path) -> list[str]:
        return [self.perf, "stat", "-x,", "-e", ",".join(self.events), "-o", str(out), "--"]

    def parse(self, text: str) -> dict[str, float]:
        return parse_perf_csv(text, self.events)


class Valgrind:
    """valgrind's cachegrind without its cache model: the user-space instructions executed."""

    name = "valgrind"
    suffix = "cachegrind.out"
    events = (GATED,)
    timeout_s = 7200  # 50 to 100 times slower than the program

    def __init__(self, valgrind: str) -> None:
        self.valgrind = valgrind

    def argv(self, out: Path) -> list[str]:
        return [
            self.valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--branch-sim=no",
            f"--cachegrind-out-file={out}",
        ]

    def parse(self, text: str) -> dict[str, float]:
        return parse_cachegrind(text)


def parse_cachegrind(text: str) -> dict[str, float]:
    """The instructions (``Ir``) of a cachegrind output file's ``events:`` and ``summary:``."""
    names = values = None
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            values = line.split()[1:]
    if not names or not values or "Ir" not in names:
        raise NotMeasurable("cachegrind wrote no Ir summary")
    return {GATED: float(values[names.index("Ir")])}


class Bench:
    def __init__(self, args: argparse.Namespace, counter: Perf | Valgrind, work: Path) -> None:
        self.args, self.counter, self.work = args, counter, work
        self.events: tuple[str, ...] = counter.events
        self.env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.runs = 0
        self._pinned: list[str] | None = None

    def _out(self, tag: str) -> Path:
        self.runs += 1
        return self.work / f"{self.runs:02d}-{tag}.{self.counter.suffix}"

    def bare(self, steps: int) -> Count:
        a = self.args
        out = self._out(f"bare-{steps}")
        cmd = [
            *self.counter.argv(out),
            sys.executable,
            str(HERE / "bare_loop.py"),
            "--dlscale-data",
            "--model",
            a.model,
            "--batch",
            str(a.batch),
            "--threads",
            "1",
            "--warmup",
            str(a.warmup),
            "--steps",
            str(steps),
        ]
        done = self._run(cmd, f"bare loop, {steps} steps")
        record = json.loads(done.stdout.strip().splitlines()[-1])
        return Count(self._counts(out, "bare loop"), record.get("loss_sum"))

    def dlscale(self, steps: int) -> Count:
        a = self.args
        out = self._out(f"dlscale-{steps}")
        wrapper = self.work / f"python-{self.runs:02d}.sh"
        counter_cmd = " ".join(_sh_quote(part) for part in self.counter.argv(out))
        wrapper.write_text(
            "#!/bin/sh\n"
            f"# The dlscale worker's interpreter, counted by {self.counter.name} "
            "(benchmarks/instructions.py).\n"
            f'exec {counter_cmd} {_sh_quote(sys.executable)} "$@"\n'
        )
        wrapper.chmod(0o755)
        results = self.work / f"results-{self.runs:02d}"
        cmd = [
            sys.executable,
            "-m",
            "dlscale",
            "run",
            "--json",
            "--force",
            "--results",
            str(results),
            "--backend",
            "torch-single",
            "--model",
            a.model,
            "--dataset",
            "synthetic",
            "--workers",
            "1",
            "--batch-size",
            str(a.batch),
            "--warmup-steps",
            str(a.warmup),
            "--windows",
            "1",
            "--steps",
            str(steps),
            "--seed",
            "0",
            "--lr",
            "0.1",
            *("--set", "momentum=0.9", "--set", "weight_decay=0.0005"),
            *("--set", "threads_per_worker=1", "--set", "comm_probe_steps=0"),
            *("--set", f"python={wrapper}"),
            *("--set", f"timeout_s={self.counter.timeout_s}"),
            *self._pins(),
        ]
        done = self._run(cmd, f"dlscale, {steps} steps")
        record = json.loads(done.stdout.strip().splitlines()[-1])
        if record.get("status") != "completed":
            raise Failed(f"dlscale run ({steps} steps) failed: {record.get('error')}")
        events = list(results.glob("**/events.rank0.jsonl"))
        if len(events) != 1:  # each run's worker would overwrite the one before's counts
            raise Failed(f"dlscale ran {len(events)} runs in {results}, not one: {' '.join(cmd)}")
        return Count(self._counts(out, "dlscale worker"), _window_loss(events[0]))

    def _pins(self) -> list[str]:
        """Settings the bare loop has, where this dlscale has the key: one run per invocation
        (``--repeats 1``: the default study repeats each point, and each run's worker would
        overwrite the counts) and glibc's malloc as is (``allocator=system``)."""
        if self._pinned is None:
            self._pinned = []
            if any("--repeats" in line for line in self._dlscale_says("--help")):
                self._pinned += ["--repeats", "1"]
            if any(line.split()[:1] == ["allocator"] for line in self._dlscale_says("--keys")):
                self._pinned += ["--set", "allocator=system"]
        return self._pinned

    def _dlscale_says(self, flag: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "dlscale", "run", flag],
            capture_output=True,
            text=True,
            env=self.env,
        )
        return done.stdout.splitlines()

    def _run(self, cmd: list[str], what: str) -> subprocess.CompletedProcess[str]:
        limit = self.counter.timeout_s
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=limit)
        except subprocess.TimeoutExpired:
            raise Failed(f"{what}: no end after {limit} s") from None
        if done.returncode != 0 or not done.stdout.strip():
            raise Failed(
                f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}"
            )
        return done

    def _counts(self, out: Path, what: str) -> dict[str, float]:
        if not out.is_file():
            raise Failed(f"{what}: {self.counter.name} wrote no counts to {out}")
        try:
            return self.counter.parse(out.read_text())
        except NotMeasurable as error:
            raise Failed(f"{what}: {error} ({out})") from None


def _window_loss(events: Path) -> float | None:
    """The loss sum of the run's measured window (from rank 0's events)."""
    for line in events.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "window" and record.get("kind") == "measure":
            value = record.get("loss_sum")
            return float(value) if value is not None else None
    return None


def _fmt(value: float) -> str:
    return f"{value / 1e9:.5f} G" if abs(value) >= 1e6 else f"{value:.6g}"


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _per_step(short: Count, long: Count, steps: int, event: str) -> float:
    return (long.values[event] - short.values[event]) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet44")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps (both)")
    parser.add_argument("--n1", type=int, default=4, help="measured steps of the short runs")
    parser.add_argument("--n2", type=int, default=12, help="measured steps of the long runs")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--max-overhead", type=float, default=0.5, help="percent of instructions (exit 1 above)"
    )
    parser.add_argument(
        "--events",
        default=",".join(EVENTS),
        help="perf events, comma-separated; the target applies to instructions:u only",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--counter",
        choices=("auto", "perf", "valgrind"),
        default="perf",
        help="perf (hardware counters; the default), valgrind (cachegrind, in software: about "
        "an hour for ResNet-44 on 2 cores) or auto: perf where it can count, else valgrind",
    )
    args = parser.parse_args()
    if not 0 < args.n1 < args.n2:
        parser.error("need 0 < --n1 < --n2")
    counter, problem = choose_counter(args.counter, tuple(args.events.split(",")))
    if counter is None:
        print(f"no instruction counter here: {problem}")
        print(
            "NOT MEASURED: no instruction counts on this machine, so no verdict on dlscale's "
            "overhead (this is not a pass)"
            + (
                "; `--counter valgrind` counts in software, slowly"
                if args.counter == "perf"
                else ""
            )
        )
        return 0
    if problem:
        print(f"# {problem}")
    events = counter.events
    work = Path(tempfile.mkdtemp(prefix="instr-"))
    steps = args.n2 - args.n1
    print(
        f"# {args.model}, batch {args.batch}, 1 thread, {args.warmup} warm-up steps; per step = "
        f"(count({args.n2} steps) - count({args.n1} steps)) / {steps}; {counter.name} "
        f"{','.join(events)}; runs in {work}",
        flush=True,
    )
    bench = Bench(args, counter, work)
    per_step: dict[str, dict[str, list[float]]] = {
        kind: {event: [] for event in events} for kind in ("bare", "dlscale")
    }
    try:
        for repeat in range(args.repeats):
            kinds = ("bare", "dlscale") if repeat % 2 == 0 else ("dlscale", "bare")
            counts: dict[str, tuple[Count, Count]] = {}
            for kind in kinds:
                run = bench.bare if kind == "bare" else bench.dlscale
                counts[kind] = (run(args.n1), run(args.n2))
            for kind, (short, long) in counts.items():
                for event in events:
                    per_step[kind][event].append(_per_step(short, long, steps, event))
            _print_repeat(repeat, counts, per_step, events)
    except Failed as error:
        print(f"MEASUREMENT FAILED: {error}", file=sys.stderr)
        print(f"(files kept in {work})", file=sys.stderr)
        return 2
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return _summary(args, per_step, events)


def choose_counter(
    wanted: str, events: tuple[str, ...]
) -> tuple[Perf | Valgrind | None, str | None]:
    """The counter to use and, when perf was passed over or nothing can count, why."""
    perf = shutil.which("perf")
    why = None
    if wanted in ("auto", "perf"):
        why = perf_problem(perf, events)
        if why is None:
            assert perf is not None
            return Perf(perf, events), None
        why = f"perf cannot count {','.join(events)} here: {why}"
        if wanted == "perf":
            return None, why
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        lack = f"valgrind is not installed ({VALGRIND_INSTALL})"
        return None, f"{why}; {lack}" if why else lack
    return Valgrind(valgrind), (f"{why}; counting with valgrind instead" if why else None)


def _print_repeat(
    repeat: int,
    counts: dict[str, tuple[Count, Count]],
    per_step: dict[str, dict[str, list[float]]],
    events: tuple[str, ...],
) -> None:
    for event in events:
        bare, ours = per_step["bare"][event][-1], per_step["dlscale"][event][-1]
        print(
            f"repeat {repeat}: {event:15} per step  bare {_fmt(bare)}  dlscale {_fmt(ours)}  "
            f"overhead {(ours / bare - 1) * 100:+.3f}%",
            flush=True,
        )
    for index, label in enumerate(("short", "long")):
        a, b = counts["bare"][index].loss_sum, counts["dlscale"][index].loss_sum
        if a is None or b is None:
            verdict = "not compared (a loss sum is missing)"
        elif abs(a - b) <= LOSS_RTOL * max(abs(a), abs(b), 1e-30):
            verdict = "equal: the same computation"
        else:
            verdict = "DIFFERENT: the two do not compute the same steps"
        print(f"repeat {repeat}: loss sum of the {label} runs  bare {a}  dlscale {b}  {verdict}")


def _summary(
    args: argparse.Namespace, per_step: dict[str, dict[str, list[float]]], events: tuple[str, ...]
) -> int:
    """Mean per-step counts, the repeats' spread and the verdict: 0 ok (or no target), 1 above
    the target, 2 no verdict (a count that does not grow with the steps, or repeats that
    disagree by more than the target, so that the figure cannot tell)."""
    verdict = 0
    for event in events:
        bare, ours = per_step["bare"][event], per_step["dlscale"][event]
        spread = {kind: _spread(v) for kind, v in (("bare", bare), ("dlscale", ours))}
        agree = "one repeat" if len(bare) == 1 else "repeats within {:.3f}%"
        line = (
            f"{event:15} per step: bare {_fmt(statistics.mean(bare))} "
            f"({agree.format(spread['bare'])}), dlscale {_fmt(statistics.mean(ours))} "
            f"({agree.format(spread['dlscale'])})"
        )
        if min(bare + ours) <= 0:
            print(f"{line}; a count did not grow with the steps: raise --n2")
            verdict = max(verdict, 2) if event == GATED else verdict
            continue
        overhead = (statistics.mean(ours) / statistics.mean(bare) - 1) * 100
        line += f"; dlscale overhead {overhead:+.3f}%"
        if event == GATED:
            line += f" (target <= {args.max_overhead}%) "
            if max(spread.values()) > args.max_overhead:
                line += "NO VERDICT: the repeats disagree by more than the target"
                verdict = max(verdict, 2)
            elif overhead > args.max_overhead:
                line += "ABOVE TARGET"
                verdict = max(verdict, 1)
            else:
                line += "ok"
        print(line)
    if GATED not in events:
        print(f"no verdict: the target applies to {GATED}, which was not counted")
    return verdict


def _spread(values: list[float]) -> float:
    """(max - min) / |mean| in percent; 0 for one value."""
    mean = abs(statistics.mean(values))
    return (max(values) - min(values)) / mean * 100 if len(values) > 1 and mean else 0.0


if __name__ == "__main__":
    sys.exit(main())
