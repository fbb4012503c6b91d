import pytest

from dlscale.errors import UserError
from dlscale.registry import Registry


def test_lookup_and_listing():
    registry: Registry[int] = Registry("widget")
    registry.register("b", 2)
    registry.register("a", 1)
    assert registry.get("a") == 1
    assert registry.names() == ["a", "b"]
    assert "a" in registry and "c" not in registry
    assert list(registry) == [("a", 1), ("b", 2)]
    with pytest.raises(UserError, match="unknown widget 'c'; choose one of: a, b"):
        registry.get("c")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("a", 3)
