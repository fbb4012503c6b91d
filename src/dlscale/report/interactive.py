"""Figures drawn with plotly (interactive, for the HTML report).

plotly.js reads its text (titles, legend names, category labels, hover text) as a subset of
HTML, so every text is entity-escaped here and shown literally: ``<b>`` in a setting's value is
neither markup nor dropped. (The JSON plotly writes into the page escapes ``<``, ``>`` and
``/`` itself, so no text can end its script.)"""

from __future__ import annotations

import html
from typing import Any

from dlscale.report.series import Figure, x_ticks

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def _t(value: Any) -> Any:
    """Text for plotly, shown literally; numbers and None unchanged."""
    return html.escape(value, quote=False) if isinstance(value, str) else value


def to_plotly(figure: Figure) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    colours: dict[str, str] = {}
    for series in figure.series:
        group = _t(series.group or series.name)
        name, x = _t(series.name), [_t(v) for v in series.x]
        colour = colours.setdefault(group, PALETTE[len(colours) % len(PALETTE)])
        if series.dashed and series.group is None:
            colour = "#555555"
        if series.kind == "bar":
            error = None
            if series.high is not None and series.low is not None:
                error = dict(
                    type="data",
                    symmetric=False,
                    array=[
                        None if h is None or y is None else h - y
                        for h, y in zip(series.high, series.y, strict=True)
                    ],
                    arrayminus=[
                        None if lo is None or y is None else y - lo
                        for lo, y in zip(series.low, series.y, strict=True)
                    ],
                )
            fig.add_bar(name=name, x=x, y=series.y, marker_color=colour, error_y=error)
            continue
        if (
            series.low is not None
            and series.high is not None
            and any(v is not None for v in series.high)
        ):
            fig.add_scatter(
                x=x + x[::-1],
                y=list(series.high) + list(series.low)[::-1],
                fill="toself",
                fillcolor=colour,
                opacity=0.2,
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
                legendgroup=group,
            )
        fig.add_scatter(
            name=name,
            x=x,
            y=series.y,
            mode="lines+markers",
            line=dict(color=colour, dash="dash" if series.dashed else "solid"),
            legendgroup=group,
        )
    fig.update_layout(
        title=dict(text=_t(figure.title)),
        template="plotly_white",
        height=420,
        margin=dict(l=60, r=20, t=60, b=60),
        barmode="stack" if figure.stacked else "group",
        legend=dict(orientation="h", y=-0.2),
    )
    if figure.x_categorical:
        fig.update_xaxes(title_text=_t(figure.x_label), type="category")
    elif figure.x_log:
        fig.update_xaxes(title_text=_t(figure.x_label), type="log")
    else:
        fig.update_xaxes(title_text=_t(figure.x_label), tickmode="array", tickvals=x_ticks(figure))
    fig.update_yaxes(
        title_text=_t(figure.y_label),
        tickformat=".0%" if figure.y_percent else None,
        type="log" if figure.y_log else None,
        rangemode=None if figure.y_log else "tozero",
    )
    return fig
