"""The columns of what training reached on held-out data: accuracy, loss, and the time to a
target of either (shown where a row has them; the same for images and tokens)."""

from __future__ import annotations

from dlscale.report import cells
from dlscale.report.column import Column


def _held_out(
    name: str, label: str, human: str, machine: str, definition: str, **more: str
) -> Column:
    """A figure of the held-out evaluation: a metric of the row, shown where some row has it."""
    return Column(
        name,
        label,
        cells.metric(name),
        cells.percent(1) if human == "%" else cells.fixed(human),
        machine,
        numeric=True,
        show="present",
        definition=definition,
        keep=7,
        **more,
    )


OUTCOMES: tuple[Column, ...] = (
    _held_out("eval_accuracy", "acc.", "%", ".4f", "evaluation accuracy"),
    _held_out(
        "eval_loss",
        "loss",
        ".3f",
        ".4f",
        "held-out loss after the last evaluation, per image or per token (perplexity: exp of it)",
        short="held-out loss (per token for token runs)",
    ),
    _held_out(
        "time_to_loss_s",
        "TTL s",
        ".1f",
        ".1f",
        "seconds to the target held-out loss",
        term="TTL",
        short="seconds to the target loss",
    ),
    _held_out(
        "time_to_accuracy_s",
        "TTA s",
        ".1f",
        ".1f",
        "seconds to the target accuracy",
        term="TTA",
        short="seconds to the target accuracy",
    ),
)
