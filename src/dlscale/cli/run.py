"""dlscale run [STUDY.toml | --preset NAME] [flags]: expand the study, run each point, print
the results."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from dlscale.config.describe import study_description
from dlscale.config.presets import load_preset, preset_names
from dlscale.config.repeats import coerce_study
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
from dlscale.contract.text import excerpt, visible
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
    "--target-loss": "target_loss",
    "--optimizer": "optimizer",
    "--device": "device",
    "--windows": "windows",
    "--seed": "seed",
    "--scaling": "scaling",
    "--launcher": "launcher",
    "--loader-only": "loader_only",
}


STUDY_FLAGS = (
    (
        "--repeats",
        "repeats",
        "independent runs of every point, interleaved (default: the study's; 1 where it says "
        "none; 3 in the default study of a bare dlscale run)",
    ),
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


def _flag_help(key: str) -> str:
    """A study key's flag: what the key means (its field's doc), its default, what the bare
    `dlscale run` sets instead, and how a grid is given."""
    from dlscale.contract.run_config import config_defaults, fields_doc

    default = config_defaults()[key]
    said = "none" if default is None else str(default)
    bare = DEFAULT_STUDY.get(key)
    if bare is not None and bare != default:
        listed = ",".join(map(str, bare)) if isinstance(bare, list) else str(bare)
        said += f"; a bare `dlscale run`: {listed}"
    grid = "; A..B: the powers of 2 from A to B" if key == "workers" else ""
    return f"{fields_doc()[key]} (default: {said}; comma-separated values make a grid{grid})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "study",
        nargs="?",
        type=Path,
        help="study file (TOML); without one (or --preset), the quick default study runs",
    )
    parser.add_argument(
        "--preset",
        metavar="NAME",
        help="run a study shipped with dlscale (dlscale ls presets lists them), e.g. mahon2020",
    )
    for flag, key in FLAGS.items():
        parser.add_argument(flag, dest=key, metavar=key.upper(), help=_flag_help(key))
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
        "--keep-stale",
        action="store_true",
        help="keep stored points made by other code (another dlscale version or engine code) "
        "instead of running them again",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the study would do (a summary, then each point's commands); launch "
        "nothing",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="with --dry-run: each command's environment and the files a launcher writes",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per finished run, then one per point (and per claim), "
        "instead of the tables",
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
    preset = getattr(args, "preset", None)
    if args.study is not None and preset is not None:
        raise UserError(
            f"give a study file ({excerpt(str(args.study))}) or --preset NAME, not both"
        )
    if (args.study is not None or preset is not None) and getattr(args, "script", None):
        raise UserError(
            "give a study file (or --preset) or --script FILE.py, not both (a study runs a "
            'script with model = "FILE.py", backend = "torch-script", dataset = "own")'
        )
    if getattr(args, "script", None):
        settings = apply_scale(script_study(args), chosen, origin="--script")
        name, description = "script", f"your training script {args.script}"
    elif args.study is not None or preset is not None:
        if preset is not None:
            settings, origin, stem = load_preset(preset)
        else:
            settings, origin, stem = _study_file(args.study), str(args.study), args.study.stem
        name = str(settings.pop("name", stem))
        description = str(settings.pop("description", ""))
        settings = apply_scale(settings, chosen, origin=origin)
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
            if key == "workers" and ".." in text:  # 1..8: the powers of 2, as predict takes
                from dlscale.config.worker_counts import worker_range

                text = ",".join(str(n) for n in worker_range(text))
            values = [coerce(key, part) for part in text.split(",")]
            settings[key] = values if len(values) > 1 else values[0]
            from_study.discard(key)
    for flag, key, _ in STUDY_FLAGS:
        text = getattr(args, key)
        if text is not None:
            settings[key] = coerce_study(key, text, origin=flag)
    settings.update(overrides)
    return without_unused_options(settings, from_study - set(overrides)), name, description


def _study_file(path: Path) -> dict[str, Any]:
    """The study file at ``path``; one that is not there but is a preset's name (the
    repository's ``studies/NAME.toml`` of older instructions) says how to run the preset."""
    try:
        return load_study_file(path)
    except UserError:
        if path.suffix == ".toml" and not path.exists() and path.stem in preset_names():
            raise UserError(
                f"study file {path} does not exist; dlscale ships that study: "
                f"dlscale run --preset {path.stem}"
            ) from None
        raise


def script_study(args: argparse.Namespace) -> dict[str, Any]:
    """The study of ``--script FILE.py [-- ARGS]``: the script at 1 and 2 workers (the flags
    change it), its arguments passed on as given."""
    import shlex

    script = str(args.script)
    if not script.endswith(".py"):
        raise UserError(f"--script takes a Python file (FILE.py), got {excerpt(script)}")
    passed_on = getattr(args, "passed_on", [])
    batch = script_batch_size(passed_on)
    overrides = getattr(args, "overrides", None) or []
    given = args.batch_size is not None or any(
        o.partition("=")[0].strip() == "batch_size" for o in overrides
    )  # dlscale's own --batch-size or --set batch_size, applied after this
    backend = script_backend(Path(script))
    by_input = batch is None and not given
    if by_input and backend == "tf-script":
        raise UserError(
            f"cannot tell how many images one process of {script} trains per step: give "
            "dlscale --batch-size N (whatever the script's own flag is called), or pass the "
            "script its --batch-size N after --"
        )
    if backend == "horovod-script" and _on_keras2(Path(script)):
        print(
            f"dlscale: note: {visible(script)} uses Horovod's TensorFlow API, which needs "
            "Keras 2: its processes run with TF_USE_LEGACY_KERAS=1 (tf-keras), as horovod-tf's",
            file=sys.stderr,
        )
    if by_input:
        print(
            f"dlscale: note: the images one process of {visible(script)} trains a step are read "
            "from what it feeds its model (no --batch-size given; the table's batch/w says "
            "what was read)",
            file=sys.stderr,
        )
    return {
        "backend": backend,
        "model": script,
        "dataset": "own",
        "workers": [1, 2],
        "batch_size": batch or 1,
        "script_args": shlex.join(passed_on),
        **({"batch_from": "input"} if by_input else {}),
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


def _on_keras2(path: Path) -> bool:
    """Whether a script imports Horovod's TensorFlow API, which horovod-script runs on Keras
    2 (the plan's ``TF_USE_LEGACY_KERAS=1``: frameworks/horovod/declare.horovod_script_env)."""
    from dlscale.contract.user_models import imported_names

    apis = ("horovod.tensorflow", "horovod.keras")
    return any(n == a or n.startswith(f"{a}.") for n in imported_names([path]) for a in apis)


def study_from(args: argparse.Namespace) -> Study:
    """The study to run, its description kept only while the flags and ``--set`` leave the
    grid it was written for as it was (a torch-ring study is not "plain PyTorch against
    DDP"); otherwise it says what the points run."""
    settings, name, description = settings_from(args)
    written_for = settings  # a script's study is described as the script, whatever the flags
    if not getattr(args, "script", None):
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
    from dlscale.runner import absent_data_dirs, check_inputs

    study = study_from(args)
    # a dry run plans for nodes whose file systems may differ from this machine's
    absent = absent_data_dirs(study.points) if args.dry_run else ()
    for path in absent:
        print(
            f"dlscale: warning: data_dir {visible(path)} does not exist on this machine; not "
            "checked by this dry run (each training rank checks it on its node before it trains)",
            file=sys.stderr,
        )
    for note in check_inputs(study.points, unchecked=absent):
        print(f"dlscale: note: {visible(note)}", file=sys.stderr)
    from dlscale.preflight import check_points

    for note in check_points(study.points, Path(args.results), create=not args.dry_run):
        print(f"dlscale: note: {visible(note)}", file=sys.stderr)
    command = ["dlscale", "run", *sys.argv[2:]] if sys.argv[1:2] == ["run"] else ["dlscale", "run"]
    for note in study.skipped:
        print(f"dlscale: note: skipped {visible(note)}", file=sys.stderr)
    from dlscale.cli.study_job import study_job

    one_job = study_job(study.points)
    if args.dry_run:
        from dlscale.cli.dry_run import dry_run

        job = (one_job, study.name) if one_job else None
        return dry_run(study, Path(args.results), verbose=args.verbose, one_job=job)
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
        keep_stale=args.keep_stale,
    )


def _print_keys() -> None:
    from dlscale.cli.keys import key_lines
    from dlscale.cli.tables import console, table_width

    print("\n".join(key_lines(table_width(console()), DEFAULT_STUDY)))
