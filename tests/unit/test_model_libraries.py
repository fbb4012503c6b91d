"""``--model LIBRARY:NAME`` (torchvision, timm): how the name is read and refused without
importing either library (the parent imports no framework). Their models are built and trained
on a machine that has them: tests/gpu/test_model_libraries.py; the library axis as a plug-in,
run end to end: tests/e2e/test_plugins.py."""

import pytest

from dlscale.contract.errors import UnsupportedPoint
from dlscale.contract.model_libraries import MODEL_LIBRARIES, LibraryModelSpec
from dlscale.contract.models import MODELS
from dlscale.contract.run_config import RunConfig
from dlscale.frameworks.torch.library_models import _unknown


@pytest.mark.parametrize(
    ("name", "library", "model"),
    [
        ("torchvision:resnet50", "torchvision", "resnet50"),
        ("timm:resnet50.a1_in1k", "timm", "resnet50.a1_in1k"),  # a pretrained tag
        ("timm:vit_base_patch16_224", "timm", "vit_base_patch16_224"),
    ],
)
def test_a_library_model_is_resolved_without_importing_the_library(
    name: str, library: str, model: str
):
    spec = MODELS.get(name)
    assert isinstance(spec, LibraryModelSpec)
    assert spec.library is MODEL_LIBRARIES.get(library) and spec.model_name == model
    assert spec.builders == {"torch": MODEL_LIBRARIES.get(library).builder}
    assert (spec.input_size, spec.default_classes, spec.builtin) == (224, 1000, False)
    assert "torchvision" in spec.requires and spec.probe is not None
    assert spec.install.startswith("pip install 'dlscale[vision]'")


def test_a_library_model_runs_on_its_framework_only():
    config = RunConfig.make(model="torchvision:resnet18", backend="torch-ddp", workers=2)
    assert config.model == "torchvision:resnet18"
    assert config.run_id() != RunConfig.make(model="timm:resnet18", backend="torch-ddp",
                                             workers=2).run_id()  # fmt: skip
    with pytest.raises(UnsupportedPoint, match="is a torch model, which tensorflow's backends"):
        RunConfig.make(model="torchvision:resnet18", backend="tf-single")


def test_an_unknown_library_is_not_a_library_model():
    """``mymodule:build`` stays the user's own module, which is looked for and not found."""
    with pytest.raises(Exception, match="module nosuchlib not found"):
        MODELS.get("nosuchlib:resnet18")


def test_a_name_the_library_lacks_is_said_with_the_closest():
    names = ["resnet18", "resnet34", "resnet50", "vgg11"]
    assert _unknown("resnet34", names, "torchvision") == ""
    said = _unknown("resnet35", names, "torchvision")
    assert said.startswith("torchvision has no classification model 'resnet35'; did you mean ")
    assert "resnet34" in said and "vgg11" not in said
    assert "torchvision.models.list_models(torchvision.models)" in said
    assert "did you mean" not in _unknown("qqqqq", names, "timm")
    assert "timm.list_models()" in _unknown("qqqqq", names, "timm")
