"""dlscale's version, as every result records it (``dlscale.__version__``)."""

__version__ = "0.1.0"
