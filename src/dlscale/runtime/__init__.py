"""Code that runs inside worker processes (and the framework-free environment capture)."""
