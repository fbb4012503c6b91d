"""Models from a library of models: ``torchvision:NAME``, ``timm:NAME``.

A framework's plug-in registers each library it can build from (PyTorch's: torchvision and
timm, :mod:`dlscale.frameworks.torch.library_models`); a model named ``LIBRARY:NAME`` is then
built by that library, untrained (no weights are downloaded: none could be here), for the run's
classes. The parent imports neither the library nor its framework: what the workers'
interpreter must import is the spec's ``requires``, which preflight checks, and whether the
library has a model of that name is asked of that interpreter before anything starts
(``probe``). Images are 224 x 224 unless ``image_size`` says otherwise (a model that takes
another size is refused with one line naming ``image_size``); the classes are the data set's
(1000 with synthetic data).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.models import ModelSpec
from dlscale.contract.registry import Registry, load_object

_NAME = re.compile(r"^(?P<library>[a-z][a-z0-9_]*):(?P<model>[A-Za-z0-9_][A-Za-z0-9_.]*)\Z")


@dataclass(frozen=True, kw_only=True)
class ModelLibrary:
    """A library of models a framework builds from."""

    name: str
    framework: str
    """The framework whose engines train its models (``BackendSpec.framework``)."""
    builder: str
    """``module:function(model_name, num_classes)`` returning the framework's model."""
    probe: str
    """``module:function(model)`` (the whole ``LIBRARY:NAME``) returning ``""``, or why the
    library has no such model: run under the workers' interpreter before launch."""
    requires: tuple[str, ...]
    """The modules the workers must import (all of them installed for one extra)."""
    install: str
    """How to install them, said when one is missing."""
    input_size: int = 224
    default_classes: int = 1000


MODEL_LIBRARIES: Registry[ModelLibrary] = Registry("model library")


def library_model_or_none(name: str) -> ModelSpec | None:
    """The spec of ``LIBRARY:NAME`` for a registered library, else ``None``."""
    match = _NAME.match(name)
    if match is None or match["library"] not in MODEL_LIBRARIES.names():
        return None
    library = MODEL_LIBRARIES.get(match["library"])
    return LibraryModelSpec(
        name=name,
        description=f"{match['model']} from {library.name}, untrained",
        builders={library.framework: library.builder},
        input_size=library.input_size,
        default_classes=library.default_classes,
        has_batchnorm=False,  # not known without building it; only the built-ins' is used
        builtin=False,
        requires=library.requires,
        install=library.install,
        probe=library.probe,
        library=library,
        model_name=match["model"],
    )


@dataclass(frozen=True, kw_only=True)
class LibraryModelSpec(ModelSpec):
    """``LIBRARY:NAME``: built by the library, its classes read from its output as a user's
    model's are."""

    library: ModelLibrary
    model_name: str

    def build(
        self,
        num_classes: int,
        framework: str = "torch",
        dropout: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Any:
        if framework != self.library.framework:
            raise KeyError(f"model {self.name} has no {framework} builder")
        try:
            return load_object(self.library.builder)(self.model_name, num_classes)
        except UserError:
            raise
        except ModuleNotFoundError as error:
            raise UserError(
                f"model {self.name} needs {error.name}, which this interpreter cannot import: "
                f"{self.library.install}"
            ) from None
        except Exception as error:  # the library's own failure, e.g. a download it tried
            said = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise UserError(
                f"model {self.name}: {self.library.name} could not build it "
                f"({type(error).__name__}: {said[-1] if said else ''})"
            ) from None
