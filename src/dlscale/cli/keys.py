"""``dlscale run --keys``: every key a study, a study file or ``--set`` takes, each once, grouped
(the core keys, the study's own, then each plug-in option with the plug-ins that take it),
wrapped at words to the terminal, one default each; and what a bare ``dlscale run`` (the
default study) sets otherwise, so that no default printed differs from what the command does."""

from __future__ import annotations

import re
import textwrap
from typing import Any

from dlscale.config.repeats import Repeats
from dlscale.contract.text import visible

STUDY_KEY_DOCS = {
    "repeats": "independent runs of every point, in interleaved rounds",
    "target_ci": "stopping rule: add runs until the interval is within this % of the mean",
    "max_repeats": "the stopping rule's limit of runs per point",
    "time_budget_s": "the stopping rule's limit of seconds for the study",
    "order": "abba (study order, then reversed, ...) or random",
    "order_seed": "seed of the random order",
    "machine_reference": "add the reference backend at 1 worker with every core",
}
NAME_WIDTH = 24
_DEFAULT_SAID = re.compile(r"\(default[: ]", re.IGNORECASE)


def key_lines(width: int, default_study: dict[str, Any]) -> list[str]:
    """The listing, each line at most ``width`` columns (a key's text wrapped under itself)."""
    from dlscale.contract.declared_options import declared_options
    from dlscale.contract.run_config import config_defaults, fields_doc

    defaults = config_defaults()
    lines = ["core keys (every run):"]
    for key, doc in fields_doc().items():
        lines += _entry(key, _with_default(doc, defaults[key]), width)
    lines.append("study keys (the runs of every point; a study file, --set, or their flags):")
    for name, field in Repeats.__dataclass_fields__.items():
        lines += _entry(name, _with_default(STUDY_KEY_DOCS.get(name, ""), field.default), width)
    lines += _entry(
        "scale",
        "a study file's [scales.NAME] table of overrides (paper presets: scale = local runs a "
        "reduced study here) (default: none)",
        width,
    )
    lines.append("plug-in options (each with the plug-ins that take it):")
    for name, declarations in sorted(declared_options().items()):
        by_text: dict[str, list[str]] = {}  # plug-ins declaring it alike share one text
        for owner, option in declarations:
            by_text.setdefault(option.describe(), []).append(owner)
        texts = [f"{text}; for {_owners(owners)}" for text, owners in by_text.items()]
        lines += _entry(name, " | ".join(texts), width)
    bare = ", ".join(
        f"{key}={value!r}" for key, value in default_study.items()
        if key not in ("name", "description")
    )  # fmt: skip
    lines += textwrap.wrap(
        f"A bare `dlscale run` runs the default study, which sets {bare}.", width=width
    )
    return [visible(line) for line in lines]  # plug-ins' text shown literally


def _owners(owners: list[str]) -> str:
    """``backend a, backend b, dataset c`` as ``backends a, b; dataset c``."""
    kinds: dict[str, list[str]] = {}
    for owner in owners:
        kind, _, name = owner.partition(" ")
        kinds.setdefault(kind, []).append(name)
    return "; ".join(
        f"{kind}{'s' if len(names) > 1 else ''} {', '.join(names)}" for kind, names in kinds.items()
    )


def _with_default(doc: str, default: Any) -> str:
    """``doc`` with its default said once (a doc that says its own default keeps only that)."""
    return doc if _DEFAULT_SAID.search(doc) else f"{doc} (default: {default!r})"


def _entry(key: str, text: str, width: int) -> list[str]:
    """``  key   text...`` wrapped at words, the text's lines under one another."""
    lead = f"  {key:{NAME_WIDTH}} "
    return textwrap.wrap(
        text,
        width=max(width, len(lead) + 20),
        initial_indent=lead,
        subsequent_indent=" " * len(lead),
        break_on_hyphens=False,
    ) or [lead.rstrip()]
