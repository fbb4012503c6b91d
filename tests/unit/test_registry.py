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


def test_a_model_twin_is_registered_per_framework(monkeypatch):
    from dlscale.models import MODELS, ModelSpec, register_builder

    spec = ModelSpec(
        name="twin-test",
        description="",
        builders={"torch": "dlscale.frameworks.torch.models.tiny:tiny"},
        input_size=32,
        default_classes=10,
        has_batchnorm=False,
    )
    monkeypatch.setitem(MODELS._entries, "twin-test", spec)  # gone after the test
    register_builder("twin-test", "numpy", "builtins:range")
    assert list(spec.builders) == ["torch", "numpy"]
    assert spec.build(3, "numpy") == range(3)
    with pytest.raises(ValueError, match="already has a numpy builder"):
        register_builder("twin-test", "numpy", "builtins:range")
    with pytest.raises(KeyError, match="no tensorflow builder"):
        spec.build(10, "tensorflow")
