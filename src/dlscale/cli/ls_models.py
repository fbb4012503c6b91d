"""``dlscale ls models [NAME]``: one row per registered model that fits the terminal (the name
one types never cut; its size, cost, input and classes; the description cut to what is left),
then the libraries ``--model LIBRARY:NAME`` takes; ``NAME``: one model in full (its twins, the
framework that counted it, BatchNorm, dropout).

The list imports no framework: a model's size is declared as data in its registration
(``ModelSpec.params``, ``forward_flops_per_sample``); one without shows ``-`` there, and
``ls models NAME`` counts it on an installed twin."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from rich.table import Table

from dlscale.cli.listing import one_in_full, one_row_each
from dlscale.cli.tables import cell, markup
from dlscale.contract.registry import load_object

if TYPE_CHECKING:
    from dlscale.contract.models import ModelSpec


def models(name: str | None, width: int) -> list[Table]:
    """The list at ``width`` columns, from what each model declares (no framework is
    imported), or model ``name`` in full (counted on a framework where it declares no size)."""
    from dlscale.contract.models import MODELS

    if name is not None:
        canonical = MODELS.canonical(name)
        return [_one(canonical, MODELS.get(canonical), width)]
    rows = []
    for model, spec in MODELS:
        sizes = _declared(spec) or {}
        rows.append((
            model,
            sizes.get("params", "-"),
            sizes.get("gflops", "-"),
            _input(spec),
            str(spec.default_classes),
            spec.description,
        ))  # fmt: skip
    frameworks = sorted({f for _, spec in MODELS for f in spec.builders})
    title = (
        "models (dlscale ls models NAME: one in full; parameters and forward FLOPs per sample, "
        f"an image at the native size or a sequence; twins in {', '.join(frameworks)})"
    )
    headers = ("name", "params (M)", "GFLOPs/sample", "input", "classes", "description")
    return [one_row_each(title, headers, rows, width), _libraries()]


def _input(spec: ModelSpec) -> str:
    if spec.sample == "tokens":
        return f"{spec.input_size} tokens"
    return f"3x{spec.input_size}x{spec.input_size}"


def _sizes(params: int, flops: int) -> dict[str, str]:
    return {"params": f"{params / 1e6:.2f}", "gflops": f"{flops / 1e9:.3f}"}


def _declared(spec: ModelSpec) -> dict[str, str] | None:
    """The size a model declares as data (``None`` where it declares none)."""
    if spec.params is None or spec.forward_flops_per_sample is None:
        return None
    return {**_sizes(spec.params, spec.forward_flops_per_sample), "counted on": "declared"}


def _counted(model: str, spec: ModelSpec) -> dict[str, str] | None:
    """The model's size counted on the first of its twins whose framework is installed and
    counts (``None`` where none is): this imports that framework."""
    from dlscale.contract.frameworks import profiler_for

    counter = profiler_for(spec.builders)
    if counter is None or counter.profile is None:
        return None
    profile: Any = load_object(counter.profile)(model)
    return {
        **_sizes(profile.params, profile.forward_flops_per_sample),
        "input": "x".join(map(str, profile.input_shape)),
        "classes": str(profile.num_classes),
        "counted on": counter.name,
    }


def _one(model: str, spec: ModelSpec, width: int) -> Table:
    if spec.sample == "tokens":
        return one_in_full(f"model {model}", _token_model(spec), width)
    sizes = _declared(spec) or _counted(model, spec) or {}
    fields = [
        ("description", spec.description),
        ("twins", ", ".join(spec.builders)),
        ("parameters", f"{sizes['params']} M" if sizes else "not counted: no framework here"),
        ("forward FLOPs", f"{sizes['gflops']} G per image" if sizes else "-"),
        ("input", sizes.get("input", _input(spec))),
        ("classes", sizes.get("classes", str(spec.default_classes))),
        ("counted on", sizes.get("counted on", "-")),
        ("BatchNorm", "yes" if spec.has_batchnorm else "no"),
        ("dropout", "none" if spec.dropout is None else f"{spec.dropout} (--set dropout=P)"),
    ]
    return one_in_full(f"model {model}", fields, width)


def _token_model(spec: ModelSpec) -> list[tuple[str, str]]:
    """A token model's fields: its sizes with and without embeddings, per sequence and per
    token, and the options that set its dimensions."""
    params, embeddings, flops = spec.sized({})
    block, vocab = spec.input_shape()
    size = f"{(params or 0) / 1e6:.2f} M"
    if embeddings is not None and params is not None:
        size += f" ({(params - embeddings) / 1e6:.2f} M without the token and position embeddings)"
    cost = "-"
    if flops is not None:
        per_token = f"{flops / block / 1e6:.2f} M per token"
        cost = f"{flops / 1e9:.3f} G per sequence of {block} tokens ({per_token})"
    options = ", ".join(f"{o.name} {o.default}" for o in spec.options)
    return [
        ("description", spec.description),
        ("twins", ", ".join(spec.builders)),
        ("parameters", size),
        ("forward FLOPs", cost),
        ("input", f"{block} tokens (block_size)"),
        ("vocabulary", f"{vocab} (vocab_size; python-source: its 256 bytes)"),
        ("counted on", "declared: dlscale.contract.gpt"),
        ("dimensions", f"{options} (--set NAME=VALUE)"),
        ("dropout", f"{spec.dropout} (--set dropout=P)"),
    ]


def _libraries() -> Table:
    """The libraries a model may come from (``LIBRARY:NAME``), and whether this interpreter
    has what they need."""
    from dlscale.contract.model_libraries import MODEL_LIBRARIES

    table = Table(title="model libraries (--model LIBRARY:NAME, untrained, at 224x224 unless "
                  "image_size says otherwise)")  # fmt: skip
    for column in ("library", "framework", "installed", "example"):
        table.add_column(column)
    fixes = set()
    for name, library in MODEL_LIBRARIES:
        missing = [m for m in library.requires if importlib.util.find_spec(m) is None]
        if missing:
            fixes.add(library.install)
        installed = f"no: needs {', '.join(missing)}" if missing else "yes"
        table.add_row(*map(cell, (name, library.framework, installed, f"--model {name}:resnet18")))
    if fixes:
        table.caption = markup("to install: " + "; ".join(sorted(fixes)))
    return table
