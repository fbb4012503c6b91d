"""The tasks the torch loop has (:mod:`dlscale.frameworks.torch.tasks` writes them), named for
the plug-in declaration without importing torch."""

TASKS = ("classification", "next-token")
