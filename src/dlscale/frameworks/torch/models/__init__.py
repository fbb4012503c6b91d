"""The PyTorch models (the twins in the other frameworks follow these, layer by layer)."""
