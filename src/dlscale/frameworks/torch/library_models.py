"""torchvision's and timm's models in dlscale's PyTorch loop (``torchvision:NAME``,
``timm:NAME``): built untrained for the run's classes, as ``get_model(NAME, weights=None,
num_classes=N)`` and ``create_model(NAME, pretrained=False, num_classes=N)`` build them.

Both need a torchvision built for the installed torch. PyPI's x86-64 torchvision wheels are
built against CUDA builds of torch and do not import beside the CPU build dlscale pins
(``operator torchvision::nms does not exist``): these models run where torch came with its
torchvision, as on a CUDA machine (docs/own-training.md, "Models from torchvision and
timm").
"""

from __future__ import annotations

import difflib
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.model_libraries import MODEL_LIBRARIES, ModelLibrary

INSTALL = (
    "pip install 'dlscale[vision]' beside a torch that has a matching torchvision "
    "(docs/own-training.md, 'Models from torchvision and timm')"
)


def torchvision_model(name: str, num_classes: int) -> Any:
    import torchvision.models

    _check(name, _classifiers(), "torchvision")
    try:  # inception_v3 and googlenet: no auxiliary heads, whose outputs train nothing here
        return torchvision.models.get_model(
            name, weights=None, num_classes=num_classes, aux_logits=False
        )
    except TypeError as error:
        if "aux_logits" not in str(error):
            raise
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


def _classifiers() -> list[str]:
    """torchvision's image classifiers (its detection, segmentation, video and optical-flow
    models give no row of class scores per image, and some fetch a backbone's weights)."""
    import torchvision.models

    return list(torchvision.models.list_models(module=torchvision.models))


def timm_model(name: str, num_classes: int) -> Any:
    import timm

    _check(name.partition(".")[0], timm.list_models(), "timm")
    return timm.create_model(name, pretrained=False, num_classes=num_classes)


def torchvision_unknown(model: str) -> str:
    """Why ``torchvision:NAME`` cannot be built here (``""``: it can): the preflight probe."""
    return _unknown(model.partition(":")[2], _classifiers(), "torchvision")


def timm_unknown(model: str) -> str:
    import timm

    name = model.partition(":")[2].partition(".")[0]  # a pretrained tag: resnet50.a1_in1k
    return _unknown(name, timm.list_models(), "timm")


def _unknown(name: str, names: list[str], library: str) -> str:
    if name in names:
        return ""
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (
        f"{library} has no classification model {name!r}; {hint}"
        f'python -c "import {library}; print({_lister(library)})" lists them'
    )


def _lister(library: str) -> str:
    if library == "torchvision":
        return "torchvision.models.list_models(torchvision.models)"
    return "timm.list_models()"


def _check(name: str, names: list[str], library: str) -> None:
    why = _unknown(name, names, library)
    if why:
        raise UserError(why)


def register() -> None:
    """PyTorch's model libraries (from the torch plug-in)."""
    for name, builder, probe, requires in (
        ("torchvision", "torchvision_model", "torchvision_unknown", ("torchvision",)),
        ("timm", "timm_model", "timm_unknown", ("timm", "torchvision")),
    ):
        MODEL_LIBRARIES.register(
            name,
            ModelLibrary(
                name=name,
                framework="torch",
                builder=f"{__name__}:{builder}",
                probe=f"{__name__}:{probe}",
                requires=requires,
                install=INSTALL,
            ),
        )
