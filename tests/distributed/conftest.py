"""The references of tests/distributed/references.py as fixtures, each run once a session."""

import pytest

from dlscale.store import RunStore
from tests.distributed.references import Reference, torch_reference


@pytest.fixture(scope="session")
def reference(shared_store: RunStore) -> Reference:
    """torch-single at batch 16, and the start it moved from."""
    return torch_reference(shared_store)
