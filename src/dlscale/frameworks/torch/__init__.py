"""PyTorch: the reference engine, DDP, a ring all-reduce and a parameter server."""
