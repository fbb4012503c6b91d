"""``dlscale run --dry-run``: what a study would do, without doing it. It opens with a summary
(points and runs, how long it would take from the runs the results directory already holds, the
node facts the plans are made from and where they came from, the claims it checks, the points
it skips and why, each point named with the settings that tell it from the others of its
backend and workers), then each point's plan: its ranks' commands, quoted for the shell, the
environment variables and the files a launcher writes only with ``--verbose``. Every line is
shown literally (a setting with a control character cannot move the cursor or start a line of
its own)."""

from __future__ import annotations

import dataclasses
import textwrap
from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

from dlscale.config.study import Study
from dlscale.contract.text import shell_command, visible

NOT_NAMING = {"repeat_id", "threads_per_worker", "python", "timeout_s", "resource_guard"}
"""Keys that never tell a point from another in its name (labels, where it runs, how long)."""


def dry_run(study: Study, results: Path, *, verbose: bool, one_job: Any = None) -> int:
    """Print the summary, the study's one job where it runs as one, then every point's plan."""
    from dlscale.cli.tables import console

    out = console()
    width = out.width if out.is_terminal else 0  # into a pipe or a file: whole lines
    for line in summary(study, results):
        _comment(f"# {line}", width)
    if one_job is not None:
        from dlscale.cli.study_job import study_job_lines

        study_job_lines(one_job[0], study.points, results, one_job[1])
    for config, name in zip(study.points, point_names(study.points), strict=True):
        for text in planned(config, results, verbose=verbose, name=name):
            if isinstance(text, Verbatim):  # a file's line: whole, as the file has it
                print(text)
            elif text.startswith("#"):
                _comment(text, width)
            else:  # a command, to paste: continued lines in a terminal
                print(_command(visible(text), width))
    return 0


class Verbatim(str):
    """A line of the dry run printed as it is, never wrapped or continued: a line of a file
    a launcher writes (an ``#SBATCH`` line is read whole or not at all)."""


HEREDOC_END = "DLSCALE_EOF"


def file_lines(path: Path, text: str) -> list[str]:
    """The file ``text`` that dlscale writes at ``path``, as the shell command that writes it:
    a here-document whose lines are the file's own, each whole (shown literally: `visible`),
    so that it reads as the script it is, its lines pasted into a file are that script, and
    the whole pasted into a shell writes it (quoted delimiter: nothing in it is expanded; a
    delimiter no line of the file is)."""
    lines = [visible(line) for line in text.splitlines()]
    end, number = HEREDOC_END, 1
    while end in lines:
        end, number = f"{HEREDOC_END}{number}", number + 1
    head = f"cat > {visible(shell_command([str(path)]))} <<'{end}'"
    return [Verbatim(line) for line in (head, *lines, end)]


def _command(text: str, width: int) -> str:
    """A shell command fitted to ``width`` (0: one line) by breaking it between its words with
    a backslash, so that it pastes as the same command; a word longer than a line stays whole."""
    if not width or len(text) <= width:
        return text
    lines, line = [], ""
    for word in _words(text):
        if line and len(line) + 1 + len(word) > width - 2:  # room for " \"
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return " \\\n".join([*lines, line])


def _words(text: str) -> list[str]:
    """``text`` split at the spaces a shell splits at: outside quotes (`shell_command` quotes
    with ``'`` and writes a ``'`` inside as ``'"'"'``, so a word is kept whole)."""
    words, word, quote = [], "", ""
    for char in text:
        if char == " " and not quote:
            if word:
                words.append(word)
            word = ""
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        word += char
    return [*words, word] if word else words


def _comment(text: str, width: int) -> None:
    """A comment line wrapped at words to ``width`` (0: not wrapped), its further lines
    indented under it."""
    indent = "#" + " " * (len(text) - len(text[1:].lstrip()) + 1)
    shown = visible(text)
    if not width:
        print(shown)
        return
    lines = textwrap.wrap(shown, width=width, subsequent_indent=indent, break_on_hyphens=False,
                          break_long_words=False)  # fmt: skip
    print("\n".join(lines or [shown]))


def summary(study: Study, results: Path) -> list[str]:
    """The summary's lines (without their ``# ``)."""
    runs = study.repeats.repeats
    ids = [[_repeat(p, k).run_id() for k in range(runs)] for p in study.points]
    took, stored = _stored_durations(results, ids)
    total = len(study.points) * runs
    lines = [f"study {study.name}: {study.description}".rstrip(": ")]
    said = f"{len(study.points)} points x {runs} run(s) = {total} runs"
    if study.repeats.target_ci is not None:
        said += f", more where an interval is wider than {study.repeats.target_ci}%"
    done = sum(1 for run_ids in ids for run_id in run_ids if run_id in stored)
    if done:
        said += f"; {done} already in {results} (kept, not run again)"
    lines.append(said)
    lines.append(_estimate(study, ids, took, stored))
    lines.append(node_facts_line(study.points))
    for claim in study.claims:
        lines.append(f"checks claim {claim.id}: {claim.says} ({claim.source})")
    lines += [f"skips {note}" for note in study.skipped]
    lines.append("points:")
    lines += [f"  {name}" for name in point_names(study.points)]
    lines.append(
        "each point's commands follow (--verbose: their environment, which numbers each rank, "
        "and the files the launcher writes)"
    )
    return lines


def node_facts_line(points: tuple[Any, ...]) -> str:
    """``node facts used: 16 CPUs, 4 GPUs a node (cpus_per_node=16, gpus_per_node=4)``: what
    the plans below are made from, and where each fact came from (given, the scheduler,
    this machine), each distinct set once."""
    from dlscale.config.resources import node_facts

    said: list[str] = []
    for config in points:
        facts = node_facts(config)
        gpus = "" if facts.gpus is None else f", {facts.gpus} GPUs"
        text = f"{facts.cpus} CPUs{gpus} a node ({facts.source})"
        if text not in said:
            said.append(text)
    return "node facts used: " + ("; ".join(said) or "none (no point)")


def _repeat(point: Any, number: int) -> Any:
    return dataclasses.replace(point, repeat_id=point.repeat_id + number) if number else point


def _stored_durations(
    results: Path, ids: list[list[str]]
) -> tuple[dict[int, list[float]], set[str]]:
    """Seconds each completed stored run took, by its point's workers; the study's run ids
    (``ids``: each point's, one per run) already completed. Nothing when there is no results
    directory yet."""
    took: dict[int, list[float]] = defaultdict(list)
    stored: set[str] = set()
    if not results.is_dir():
        return took, stored
    from dlscale.store.results import RunStore

    wanted = {run_id for run_ids in ids for run_id in run_ids}
    for result in RunStore(results).results():
        if result.status != "completed" or result.duration_s is None:
            continue
        took[int(result.config.get("workers", 0))].append(result.duration_s)
        if result.run_id in wanted:
            stored.add(result.run_id)
    return took, stored


def _estimate(
    study: Study, ids: list[list[str]], took: dict[int, list[float]], stored: set[str]
) -> str:
    """About how long the runs still to do take: each as long as the stored runs with as many
    workers took (their mean), else as any stored run."""
    every = [s for seconds in took.values() for s in seconds]
    if not every:
        return "time: not known before a run of it is stored (a first run times it)"
    seconds = 0.0
    for point, run_ids in zip(study.points, ids, strict=True):
        left = sum(1 for run_id in run_ids if run_id not in stored)
        seconds += left * fmean(took.get(point.workers) or every)
    minutes = seconds / 60
    return (
        f"time: about {minutes:.0f} min for the runs left, from {len(every)} stored run(s) "
        "of as many workers (not counting the interpreters' start)"
        if minutes >= 1
        else f"time: under a minute for the runs left, from {len(every)} stored run(s)"
    )


def point_names(points: tuple[Any, ...]) -> list[str]:
    """``torch-ps x1 ps_mode=sync``: each point by backend and workers, with the settings that
    tell it apart from the other points of the same backend and workers."""
    flat = [_flat(p) for p in points]
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for index, point in enumerate(points):
        groups[(point.backend, point.workers)].append(index)
    names = []
    for index, point in enumerate(points):
        group = groups[(point.backend, point.workers)]
        differ = sorted({key for i in group for key in flat[i]
                         if any(flat[j].get(key) != flat[i].get(key) for j in group)})  # fmt: skip
        extra = " ".join(f"{key}={flat[index].get(key)}" for key in differ)
        names.append(f"{point.backend} x{point.workers} {extra}".rstrip())
        threads = {points[i].threads_per_worker for i in group}
        told_apart = len(threads) > 1 and all(isinstance(t, int) for t in threads)
        if not differ and told_apart:  # by their threads alone
            names[-1] += f", {point.threads_per_worker} thr"
            if point.workers == 1 and point.threads_per_worker == max(threads):
                names[-1] += " (the whole-machine reference: every core to one worker)"
    return names


def _flat(point: Any) -> dict[str, Any]:
    data = point.to_dict()
    options = data.pop("options")
    flat = {k: v for k, v in data.items() if k not in NOT_NAMING}
    for group in options.values():
        flat.update(group)
    return flat


def planned(config: Any, results: Path, *, verbose: bool, name: str = "") -> list[str]:
    """The dry-run lines of one point; ``name``: as the summary names it (its variant)."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.launchers import LAUNCHERS
    from dlscale.launchers.launch_run import interpreter

    run_id = config.run_id()
    plan = (
        LAUNCHERS.get(config.launcher)
        .create()
        .plan(config, results / run_id / "spec.json", interpreter(config))
    )
    roles = ", ".join(f"{p.role}{p.index}=rank{p.rank}" for p in plan.layout.processes)
    name = name or f"{config.backend} x{config.workers}"
    lines = [
        f"# {run_id}: {name} {config.model} {config.dataset} "
        f"({plan.threads_per_worker} threads/process; {roles})"
    ]
    if plan.nodes:
        lines.append(f"#   planned for {plan.nodes}")
    lines += [f"#   {line}" for line in plan.placed]
    lines += [f"#   warning: {warning}" for warning in plan.warnings]
    for setup in plan.setups:
        lines.append("# made before the commands start, removed after:")
        lines += [f"#   {line}" for line in setup.describe()]
    for entry in plan.entries:
        ranks = (
            f"rank {entry.ranks[0]}"
            if len(entry.ranks) == 1
            else (f"ranks {entry.ranks[0]}-{entry.ranks[-1]}")
        )
        lines.append(f"# {ranks}")
        if verbose and not plan.addresses.hosts:
            lines.append("#   each rank sets its cluster variables once the scheduler placed it")
        elif verbose and len(entry.ranks) > 1:  # one command: each rank sets its variables
            backend = BACKENDS.get(config.backend)
            for rank in entry.ranks:
                process = plan.layout.processes[rank]
                cluster = backend.cluster_env(process, plan.layout, plan.addresses, config)
                lines.append(
                    f"#   rank {rank} ({process.role}) sets: {_assignments(cluster) or '-'}"
                )
        for path, text in entry.files.items():
            if verbose:
                lines.append("# written at launch, as it is (each line whole):")
                lines += file_lines(path, text)
            else:
                lines.append(f"# {path} (written at launch)")
        env = _assignments(dict(sorted(entry.env.items()))) if verbose else ""
        pinned = ("taskset", "-c", ",".join(map(str, entry.cpus))) if entry.cpus else ()
        lines.append(f"{env} {shell_command([*pinned, *entry.argv])}".lstrip())
    return lines


def _assignments(env: dict[str, str]) -> str:
    """``KEY=value`` words a shell reads as variable assignments (the value quoted, the key not:
    a quoted ``'KEY=value'`` would be a command name)."""
    return " ".join(f"{key}={shell_command([value])}" for key, value in env.items())
