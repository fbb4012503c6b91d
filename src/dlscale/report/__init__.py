"""The scaling report: figures defined once as data (figures.py), drawn interactively in one
self-contained HTML file (html.py, plotly) and as paper figures (static.py, matplotlib).
Reads only from the result store."""
