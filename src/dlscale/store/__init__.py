"""The result store: one directory per run, atomic writes, safe for concurrent writers."""

from dlscale.store.files import read_json, write_json_atomic
from dlscale.store.results import RunStore, load_results

__all__ = ["RunStore", "load_results", "read_json", "write_json_atomic"]
