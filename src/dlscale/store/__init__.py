"""The result store: one directory per run, atomic writes, safe for concurrent writers."""

from dlscale.contract.files import read_json, write_json_atomic
from dlscale.store.results import RunStore

__all__ = ["RunStore", "read_json", "write_json_atomic"]
