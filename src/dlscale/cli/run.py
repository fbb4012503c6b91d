"""dlscale run [STUDY.toml] [flags]: expand the study, run each point, print the results."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from dlscale.config.describe import study_description
from dlscale.config.repeats import Repeats, coerce_study
from dlscale.config.study import (
    SCALE,
    Study,
    apply_scale,
    coerce,
    expand,
    load_study_file,
    parse_set,
    without_unused_options,
)
from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt, shell_command, visible
from dlscale.runtime.script_run import script_batch_size

DEFAULT_STUDY: dict[str, Any] = {
    "name": "quick",
    "description": "plain PyTorch at 1 worker against DDP at 1 and 2 workers",
    "backend": ["torch-single", "torch-ddp"],
    "model": "resnet44",
    "dataset": "synthetic",
    "workers": [1, 2],
    "batch_size": 64,
    "steps": 8,
    "windows": 3,
    "repeats": 3,
    "machine_reference": True,
}
"""The study `dlscale run` runs without a study file: a minute or two on 2 cores."""

# flag -> config key; a comma-separated value makes a grid (e.g. --workers 1,2,4).
FLAGS = {
    "--backend": "backend",
    "--model": "model",
    "--dataset": "dataset",
    "--data-dir": "data_dir",
    "--workers": "workers",
    "--batch-size": "batch_size",
    "--epochs": "epochs",
    "--steps": "steps",
    "--warmup-steps": "warmup_steps",
    "--lr": "lr",
    "--target-accuracy": "target_accuracy",
    "--device": "device",
    "--windows": "windows",
    "--seed": "seed",
    "--scaling": "scaling",
    "--launcher": "launcher",
    "--loader-only": "loader_only",
}


STUDY_FLAGS = (
    ("--repeats", "repeats", "independent runs of every point, interleaved (default 1)"),
    (
        "--target-ci",
        "target_ci",
        "add runs to a point until its 95%% interval is within PCT%% of its mean",
    ),
    ("--max-repeats", "max_repeats", "most runs per point under --target-ci (default 10)"),
    ("--time-budget", "time_budget_s", "seconds after which --target-ci starts no new run"),
    ("--order", "order", "order of the runs in a round: abba (default) or random"),
)
"""Flags of the study's own keys (runs and the stopping rule; config.repeats.Repeats)."""


def add_set_flag(parser: argparse.ArgumentParser, text: str) -> None:
    """``--set KEY=VALUE``, as often as wanted (``args.overrides``), for every command."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=text
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "study",
        nargs="?",
        type=Path,
        help="study file (TOML); without one, the quick default study runs",
    )
    for flag, key in FLAGS.items():
        parser.add_argument(
            flag,
            dest=key,
            metavar=key.upper(),
            help=f"set {key} (comma-separated values make a grid)",
        )
    parser.add_argument(
        "--results",
        default="dlscale-results",
        metavar="DIR",
        help="results directory (default: ./dlscale-results)",
    )
    add_set_flag(parser, "set any study key (see --keys)")
    for flag, key, text in STUDY_FLAGS:
        parser.add_argument(flag, dest=key, metavar=key.upper(), help=text)
    parser.add_argument(
        "--script",
        metavar="FILE.py",
        help="measure your own training script, unmodified, at each --workers count "
        "(default 1,2) under --backend torch-script, horovod-script or tf-script (default: "
        "the one its imports call for); its own arguments follow --",
    )
    parser.add_argument("--force", action="store_true", help="rerun points that already completed")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print each point's commands and environment; launch nothing",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per finished point instead of a table",
    )
    parser.add_argument("--keys", action="store_true", help="list every study key and exit")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="show every column of the results table, however wide (default: those that fit)",
    )


def settings_from(args: argparse.Namespace) -> tuple[dict[str, Any], str, str]:
    """The study's settings: the file (or the default study) at its chosen scale, then the
    flags, then ``--set``, each overriding the one before."""
    overrides = parse_set(args.overrides)
    chosen = overrides.pop(SCALE, None)
    if args.study is not None and getattr(args, "script", None):
        raise UserError(
            "give a study file or --script FILE.py, not both (a study runs a script with "
            'model = "FILE.py", backend = "torch-script", dataset = "own")'
        )
    if getattr(args, "script", None):
        settings = apply_scale(script_study(args), chosen, origin="--script")
        name, description = "script", f"your training script {args.script}"
    elif args.study is not None:
        settings = load_study_file(args.study)
        name = str(settings.pop("name", args.study.stem))
        description = str(settings.pop("description", ""))
        settings = apply_scale(settings, chosen, origin=str(args.study))
    else:
        settings = {k: v for k, v in DEFAULT_STUDY.items() if k not in ("name", "description")}
        name, description = DEFAULT_STUDY["name"], DEFAULT_STUDY["description"]
        settings = apply_scale(settings, chosen, origin="the default study")
    if args.epochs is not None and args.steps is not None:
        raise UserError(
            "give --epochs E (train by epochs) or --steps S (measured steps per window), not both"
        )
    from_study = set(settings)
    for key in FLAGS.values():
        text = getattr(args, key)
        if text is not None:
            values = [coerce(key, part) for part in text.split(",")]
            settings[key] = values if len(values) > 1 else values[0]
            from_study.discard(key)
    for flag, key, _ in STUDY_FLAGS:
        text = getattr(args, key)
        if text is not None:
            settings[key] = coerce_study(key, text, origin=flag)
    settings.update(overrides)
    return without_unused_options(settings, from_study - set(overrides)), name, description


def script_study(args: argparse.Namespace) -> dict[str, Any]:
    """The study of ``--script FILE.py [-- ARGS]``: the script at 1 and 2 workers (the flags
    change it), its arguments passed on as given."""
    import shlex

    script = str(args.script)
    if not script.endswith(".py"):
        raise UserError(f"--script takes a Python file (FILE.py), got {excerpt(script)}")
    passed_on = getattr(args, "passed_on", [])
    batch = script_batch_size(passed_on)
    if batch is None and args.batch_size is None:  # dlscale's own flag is applied after this
        raise UserError(
            f"cannot tell how many images one process of {script} trains per step: pass the "
            "script its --batch-size N after --, or give dlscale --batch-size N"
        )
    return {
        "backend": script_backend(Path(script)),
        "model": script,
        "dataset": "own",
        "workers": [1, 2],
        "batch_size": batch or 1,
        "script_args": shlex.join(passed_on),
    }


def script_backend(path: Path) -> str:
    """The script backend a script's imports call for (``--backend`` chooses another):
    horovod-script for a script importing Horovod, tf-script for one importing TensorFlow or
    Keras and not PyTorch, else torch-script. A file that cannot be read or parsed is left to
    the run to report."""
    from dlscale.contract.user_models import imported_modules

    imported = imported_modules([path])
    if "horovod" in imported:
        return "horovod-script"
    if imported & {"tensorflow", "keras", "tf_keras"} and "torch" not in imported:
        return "tf-script"
    return "torch-script"


def study_from(args: argparse.Namespace) -> Study:
    """The study to run, its description kept only while the flags and ``--set`` leave the
    grid it was written for as it was (a torch-ring study is not "plain PyTorch against
    DDP"); otherwise it says what the points run."""
    settings, name, description = settings_from(args)
    written_for, _, _ = settings_from(_without_grid_flags(args))
    study = expand(settings, name=name, description=description)
    described = study_description(description, written_for, settings, study.points)
    return dataclasses.replace(study, description=described)


def _without_grid_flags(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every flag and ``--set`` that changes the grid taken away (the scale
    and the runs per point kept): the settings the study's description was written for."""
    plain = argparse.Namespace(**vars(args))
    for key in FLAGS.values():
        setattr(plain, key, None)
    kept = {SCALE, *(key for _, key, _ in STUDY_FLAGS)}
    plain.overrides = [o for o in args.overrides if o.partition("=")[0].strip() in kept]
    return plain


def main(args: argparse.Namespace) -> int:
    if args.keys:
        _print_keys()
        return 0
    from dlscale.runner import check_inputs

    study = study_from(args)
    for note in check_inputs(study.points):
        print(f"dlscale: note: {visible(note)}", file=sys.stderr)
    from dlscale.preflight import check_points

    check_points(study.points, Path(args.results), create=not args.dry_run)
    command = ["dlscale", "run", *sys.argv[2:]] if sys.argv[1:2] == ["run"] else ["dlscale", "run"]
    for note in study.skipped:
        print(f"dlscale: note: skipped {visible(note)}", file=sys.stderr)
    from dlscale.cli.study_job import study_job

    one_job = study_job(study.points)
    if args.dry_run:
        job = (one_job, study.name) if one_job else None
        return _dry_run(study.points, Path(args.results), study.repeats, one_job=job)
    if one_job:
        from dlscale.cli.study_job import run_study_job

        return run_study_job(study, one_job, Path(args.results), command)
    from dlscale.cli.progress import run_study

    return run_study(
        study,
        Path(args.results),
        force=args.force,
        as_json=args.json,
        command=command,
        wide_table=args.wide,
    )


_FIELD_DOCS = {
    "repeats": "independent runs of every point, in interleaved rounds",
    "target_ci": "stopping rule: add runs until the interval is within this % of the mean",
    "max_repeats": "the stopping rule's limit of runs per point",
    "time_budget_s": "the stopping rule's limit of seconds for the study",
    "order": "abba (study order, then reversed, ...) or random",
    "order_seed": "seed of the random order",
    "machine_reference": "add the reference backend at 1 worker with every core",
}


def _print_keys() -> None:
    from dlscale.contract.run_config import config_defaults, declared_options, fields_doc

    defaults = config_defaults()
    print("core keys (every run):")
    for key, doc in fields_doc().items():
        print(visible(f"  {key:24} {doc} (default: {defaults[key]!r})"))
    print("study keys (the runs of every point; a study file, --set, or their flags):")
    for name, field in Repeats.__dataclass_fields__.items():
        doc = _FIELD_DOCS.get(name, "")
        print(f"  {name:24} {doc} (default: {field.default!r})")
    print(
        f"  {'scale':24} a study file's [scales.NAME] table of overrides (paper presets: "
        "scale = local runs a reduced study here) (default: none)"
    )
    by_owner: dict[str, list[str]] = {}
    for name, declarations in declared_options().items():
        for owner, option in declarations:
            by_owner.setdefault(owner, []).append(visible(f"  {name:24} {option.describe()}"))
    for owner in sorted(by_owner):  # plug-ins' text: each line shown literally
        print(visible(f"options of {owner}:"))
        print("\n".join(by_owner[owner]))


def _dry_run(points: Any, results: Path, repeats: Repeats, *, one_job: Any = None) -> int:
    """Each point's commands, to read or paste: a command is quoted for the shell (an argument
    with a space, ``;`` or ``$(...)`` stays one word), and every line is shown literally (a
    setting with a control character cannot move the cursor or start a line of its own).
    ``one_job`` (the study's job and name): its one batch script first, then each point as a
    step."""
    if one_job is not None:
        from dlscale.cli.study_job import study_job_lines

        study_job_lines(one_job[0], points, results, one_job[1])
    for config in points:
        for text in _planned(config, results, repeats, first=config is points[0]):
            print(visible(text))
    print(json.dumps({"points": len(points)}), file=sys.stderr)
    return 0


def _assignments(env: dict[str, str]) -> str:
    """``KEY=value`` words a shell reads as variable assignments (the value quoted, the key not:
    a quoted ``'KEY=value'`` would be a command name)."""
    return " ".join(f"{key}={shell_command([value])}" for key, value in env.items())


def _planned(config: Any, results: Path, repeats: Repeats, *, first: bool) -> list[str]:
    """The dry-run lines of one point."""
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
    lines = [
        f"# {run_id}: {config.backend} x{config.workers} {config.model} {config.dataset} "
        f"({plan.threads_per_worker} threads/process; {roles})"
    ]
    if plan.nodes:
        lines.append(f"#   planned for {plan.nodes}")
    lines += [f"#   {line}" for line in plan.placed]
    lines += [f"#   warning: {warning}" for warning in plan.warnings]
    for setup in plan.setups:
        lines.append("# made before the commands start, removed after:")
        lines += [f"#   {line}" for line in setup.describe()]
    if first and repeats.repeats > 1:
        last = repeats.repeats - 1
        lines.append(f"#   every point runs {repeats.repeats} times (repeat_id +0..+{last})")
    for entry in plan.entries:
        ranks = (
            f"rank {entry.ranks[0]}"
            if len(entry.ranks) == 1
            else (f"ranks {entry.ranks[0]}-{entry.ranks[-1]}")
        )
        lines.append(f"# {ranks}")
        if not plan.addresses.hosts:
            lines.append("#   each rank sets its cluster variables once the scheduler placed it")
        elif len(entry.ranks) > 1:  # one command: each rank sets its cluster variables
            backend = BACKENDS.get(config.backend)
            for rank in entry.ranks:
                process = plan.layout.processes[rank]
                cluster = backend.cluster_env(process, plan.layout, plan.addresses, config)
                lines.append(
                    f"#   rank {rank} ({process.role}) sets: {_assignments(cluster) or '-'}"
                )
        for path, text in entry.files.items():
            lines.append(f"# {path}:")
            lines += [f"#   {line}" for line in text.splitlines()]
        env = _assignments(dict(sorted(entry.env.items())))
        lines.append(f"{env} {shell_command(entry.argv)}".lstrip())
    return lines
