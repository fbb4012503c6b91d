"""Events written by workers, their aggregation into metrics, and the statistics behind them.

Every metric is defined once, in docs/metrics.md; the code here is that definition.
"""
