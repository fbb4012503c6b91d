"""Figures drawn with matplotlib for papers: PNG and PDF, no browser needed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from dlscale.contract.files import write_atomic
from dlscale.report.interactive import PALETTE
from dlscale.report.series import Figure, x_ticks

FORMATS = ("png", "pdf")


def _t(text: str) -> str:
    """Text for matplotlib, shown literally: a ``$`` would start mathtext (and an unbalanced
    one would fail the figure)."""
    return text.replace("$", r"\$")


def save_static(figure: Figure, stem: Path) -> list[Path]:
    """Draw ``figure`` into ``stem.png`` and ``stem.pdf``. The stem is used whole: a dot in it
    is no suffix to replace. Each file is drawn in memory, then written whole or not at all,
    never through a symbolic link (`write_atomic`)."""
    drawn = render_static(figure)
    paths = [stem.with_name(f"{stem.name}.{suffix}") for suffix in FORMATS]
    for path, suffix in zip(paths, FORMATS, strict=True):
        write_atomic(path, drawn[suffix])
    return paths


def render_static(figure: Figure) -> dict[str, bytes]:
    """``figure`` drawn as the bytes of each of ``FORMATS``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), constrained_layout=True)
    try:
        _draw(figure, ax)
        drawn = {}
        for suffix in FORMATS:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=suffix, dpi=150)
            drawn[suffix] = buffer.getvalue()
    finally:
        plt.close(fig)
    return drawn


def _draw(figure: Figure, ax: Any) -> None:
    from matplotlib.ticker import PercentFormatter

    colours: dict[str, str] = {}
    bars = [s for s in figure.series if s.kind == "bar"]
    if bars:
        labels = list(dict.fromkeys(x for s in bars for x in s.x))
        width = 0.8 if figure.stacked else 0.8 / len(bars)
        bottom = [0.0] * len(labels)
        for i, series in enumerate(bars):
            values = dict(zip(series.x, series.y, strict=True))
            heights = [values.get(label) or 0.0 for label in labels]
            offsets = [
                j + (0 if figure.stacked else (i - (len(bars) - 1) / 2) * width)
                for j in range(len(labels))
            ]
            ax.bar(
                offsets,
                heights,
                width,
                bottom=bottom if figure.stacked else None,
                label=_t(series.name),
                color=PALETTE[i % len(PALETTE)],
            )
            if figure.stacked:
                bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_xticks(
            range(len(labels)), [_t(str(x)) for x in labels], rotation=20, ha="right", fontsize=8
        )
    for series in (s for s in figure.series if s.kind != "bar"):
        group = series.group or series.name
        colour = colours.setdefault(group, PALETTE[len(colours) % len(PALETTE)])
        if series.dashed and series.group is None:
            colour = "#555555"
        pts = [(x, y) for x, y in zip(series.x, series.y, strict=True) if y is not None]
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="" if series.dashed else "o",
            linestyle="--" if series.dashed else "-",
            color=colour,
            label=_t(series.name),
        )
        if series.low is not None and series.high is not None:
            band = [
                (x, lo, hi)
                for x, lo, hi in zip(series.x, series.low, series.high, strict=True)
                if lo is not None and hi is not None
            ]
            if band:
                ax.fill_between(
                    [b[0] for b in band],
                    [b[1] for b in band],
                    [b[2] for b in band],
                    color=colour,
                    alpha=0.2,
                    linewidth=0,
                )
    if figure.x_log:
        ax.set_xscale("log", base=2)
    elif not bars:
        ax.set_xticks(x_ticks(figure))
    ax.set_title(_t(figure.title), fontsize=10)
    ax.set_xlabel(_t(figure.x_label))
    ax.set_ylabel(_t(figure.y_label))
    if figure.y_log:
        ax.set_yscale("log")
    elif all(y is None or y >= 0 for series in figure.series for y in series.y):
        ax.set_ylim(bottom=0)
    else:
        ax.axhline(0, color="#555555", linewidth=0.8)
    if figure.y_percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
