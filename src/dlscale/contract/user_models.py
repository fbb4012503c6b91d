"""Models that are the user's own: a function in their module, or a whole training script.

A ``model`` value that is not a registered name may be

* ``MODULE:FUNCTION`` (``mymodels:build``, ``pkg.nets:resnet``): a module importable from the
  working directory or the import path;
* ``FILE.py:FUNCTION`` (``models/net.py:build``): a file, loaded from its path;
* ``FILE.py`` (``train.py``): a whole training script, run by a script backend
  (``dlscale run --script``), which measures it from its optimizer steps.

The function is called with ``num_classes`` where it takes a parameter (the data set's
classes, or 10 with synthetic data), else with nothing; what it returns must be the
framework's model (torch: a ``torch.nn.Module``). Its module is never imported here (the
parent imports no framework): it is located, read and hashed, and the function is looked for
in its source, so a misspelt name is refused before anything starts. The working directory is
searched *after* the import path, never before it: a user's ``random.py`` cannot shadow the
standard library's, and a module of that name is refused with the file it would have been.
The source's SHA-256 is part of the run id: an edited model or script is a new point.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.files import read_bounded
from dlscale.contract.frameworks import frameworks_imported
from dlscale.contract.model_libraries import library_model_or_none
from dlscale.contract.models import ModelSpec
from dlscale.contract.text import excerpt

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE = re.compile(rf"^(?P<module>{_IDENT}(\.{_IDENT})*):(?P<function>{_IDENT})\Z")
_FILE = re.compile(rf"^(?P<path>[^:\x00-\x1f]+\.py):(?P<function>{_IDENT})\Z")
_SCRIPT = re.compile(r"^(?P<path>[^:\x00-\x1f]+\.py)\Z")
_OWN: dict[str, Any] = {
    "input_size": 32,  # images of 3 x 32 x 32 unless image_size says otherwise
    "default_classes": 10,  # synthetic data's; the model's output says its own
    "has_batchnorm": False,
    "builtin": False,
}


def is_user_model(name: str) -> bool:
    return bool(_MODULE.match(name) or _FILE.match(name) or _SCRIPT.match(name))


def resolve_or_none(name: str) -> ModelSpec | None:
    """A library's model (``torchvision:NAME``: :mod:`.model_libraries`), else :func:`resolve`
    for a name of the user's kind; ``None`` for any other (the registry then lists the
    registered models)."""
    library_model = library_model_or_none(name)
    if library_model is not None:
        return library_model
    return resolve(name) if is_user_model(name) else None


def resolve(name: str) -> ModelSpec:
    """The spec of a user's model or script named ``name`` (see the module docstring);
    a :class:`UserError` naming what is missing and how to name it otherwise."""
    if match := _SCRIPT.match(name):
        path = _existing_file(match["path"], "training script")
        return ScriptModelSpec(
            name=name,
            description=f"training script {path}",
            path=str(path),
            source_sha256=source_digest([path]),
            **_OWN,
        )
    if match := _FILE.match(name):
        path = _existing_file(match["path"], "model file")
        module, files = None, [path]
    elif match := _MODULE.match(name):
        module = match["module"]
        path, files = _locate(module)
    else:
        raise UserError(
            f"unknown model {excerpt(name)}; name a registered model (dlscale ls models), "
            "MODULE:FUNCTION, FILE.py:FUNCTION, or a training script with --script FILE.py"
        )
    function = match["function"]
    if path.suffix == ".py" and not _defines(path, function):
        raise UserError(
            f"model {excerpt(name)}: {path} defines no top-level {function!r}; "
            "name a function that returns the model"
        )
    frameworks = frameworks_imported(imported_modules(files))
    return UserModelSpec(
        name=name,
        description=f"{function} from {path} ({', '.join(frameworks)})",
        builders=dict.fromkeys(frameworks, name),
        module=module,
        path=str(path),
        function=function,
        source_sha256=source_digest(files),
        **_OWN,
    )


@dataclass(frozen=True, kw_only=True)
class UserModelSpec(ModelSpec):
    """A function of the user's that builds a model: ``builders`` names it for each framework
    its source imports (every framework when it imports none: its engine then checks what the
    function returns)."""

    module: str | None
    """The dotted module, or ``None`` for a file loaded from ``path``."""
    path: str
    function: str
    source_sha256: str

    def build(
        self,
        num_classes: int,
        framework: str = "torch",
        dropout: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Any:
        if framework not in self.builders:
            raise KeyError(f"model {self.name} has no {framework} builder")
        build = getattr(self._import(), self.function, None)
        if not callable(build):
            raise UserError(f"model {self.name}: {self.path} has no function {self.function!r}")
        try:
            model = build(num_classes) if _takes_an_argument(build) else build()
        except Exception as error:
            raise UserError(
                f"model {self.name}: {self.function}() raised {type(error).__name__}: {error}"
            ) from error
        return model

    def _import(self) -> Any:
        import importlib.util

        try:
            if self.module is not None:
                with _working_directory_last():
                    return importlib.import_module(self.module)
            name = "dlscale_user_model_" + re.sub(r"\W", "_", Path(self.path).stem)
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, self.path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]  # not half a module for the next lookup
                raise
            return module
        except UserError:
            raise
        except Exception as error:
            raise UserError(
                f"model {self.name}: importing {self.path} failed: {type(error).__name__}: {error}"
            ) from error


@dataclass(frozen=True, kw_only=True)
class ScriptModelSpec(ModelSpec):
    """A training script: its own model, data and loop; only a script backend runs it."""

    path: str
    source_sha256: str


def _existing_file(text: str, what: str) -> Path:
    path = Path(text)
    if not path.is_absolute():
        path = Path.cwd() / path
    if not path.is_file():
        raise UserError(f"{what} {text} not found (from {Path.cwd()}); give its path")
    return path.resolve()


def _locate(module: str) -> tuple[Path, list[Path]]:
    """Where ``module``'s top-level package or module is, found as the workers will find it:
    the import path first, then the working directory; and its source files."""
    top = module.partition(".")[0]
    found = importlib.machinery.PathFinder.find_spec(top, [*sys.path, os.getcwd()])
    if found is None or found.origin in (None, "built-in", "frozen"):
        if top in sys.builtin_module_names:
            raise UserError(f"module {top} is built into Python; rename your module")
        raise UserError(
            f"module {top} not found in {os.getcwd()} or on the import path; run from the "
            "directory that holds it, or name its file: --model path/to/file.py:FUNCTION"
        )
    origin = Path(found.origin)
    if top in sys.stdlib_module_names:
        raise UserError(
            f"module {top} is Python's own ({origin}); give your module another name, or name "
            "its file: --model path/to/file.py:FUNCTION"
        )
    mine = Path(f"{top}.py").exists() or Path(top).is_dir()  # in the working directory
    if "site-packages" in origin.parts and mine:
        raise UserError(
            f"your module {top} has the name of {origin}, which Python imports first; "
            "rename it, or name its file: --model path/to/file.py:FUNCTION"
        )
    if origin.name == "__init__.py":
        package = origin.parent
        files = sorted(package.rglob("*.py"))
        rest = module.split(".")[1:]
        target = package.joinpath(*rest[:-1], f"{rest[-1]}.py") if rest else origin
        if rest and not target.is_file():
            target = package.joinpath(*rest, "__init__.py")
        return target, files
    if "." in module:
        raise UserError(f"module {top} ({origin}) is not a package, so {module} cannot exist")
    return origin, [origin]


def _defines(path: Path, function: str) -> bool:
    """Whether the source binds ``function`` at its top level (def, assignment or import);
    a file that does not parse is left to the import to report."""
    tree = parsed(path)
    if tree is None:
        return True
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == function:
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name.split(".")[0]) == function for a in node.names):
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == function for t in targets):
                return True
        elif isinstance(node, ast.If | ast.Try):
            return True  # conditional definitions: left to the import
    return False


def refused_input(model: str, size: int, error: BaseException) -> UserError:
    """The line for a model not of dlscale's that cannot take the run's images: the last line
    of the framework's error (MXNet's carries its own C++ traceback before it)."""
    said = [line.strip() for line in str(error).splitlines() if line.strip()]
    return UserError(
        f"model {model} cannot take a batch of 3x{size}x{size} images "
        f"({type(error).__name__}: {said[-1] if said else ''}); set image_size to its input size"
    )


def classes_from_output(model: str, shape: Any, dataset: str, dataset_classes: int | None) -> int:
    """The classes a model not of dlscale's predicts, from the ``shape`` of its output for
    two images (each framework runs it): ``(2, classes)``, as many as the data set has
    (synthetic data takes the model's)."""
    dims = tuple(shape) if isinstance(shape, tuple | list) else shape
    if not isinstance(dims, tuple) or len(dims) != 2 or dims[0] != 2:
        raise UserError(f"model {model} gives {dims} for 2 images; a classifier gives (2, classes)")
    classes = int(dims[1])
    if classes < 2:
        raise UserError(
            f"model {model} predicts {classes} class{'es' if classes != 1 else ''} for each image; "
            "a classifier predicts 2 or more (its last layer's outputs)"
        )
    if dataset_classes is not None and dataset_classes != classes:
        raise UserError(
            f"model {model} predicts {classes} classes; data set {dataset} has {dataset_classes}"
        )
    return classes


SOURCE_LIMIT = 16 * 2**20
"""The most bytes of a user's Python file read to look into it (what it defines, imports)."""


def parsed(path: Path) -> ast.Module | None:
    """The syntax tree of a user's Python file; ``None`` where it cannot be read (a FIFO, a
    device, larger than :data:`SOURCE_LIMIT`) or parsed (nested too deeply included): the
    import then says what is wrong, in the worker."""
    try:
        return ast.parse(read_bounded(path, SOURCE_LIMIT).decode("utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def imported_modules(files: list[Path]) -> set[str]:
    """The top-level modules ``files`` import anywhere (absolute imports only); a file that
    cannot be read or parsed adds none."""
    return {name.partition(".")[0] for name in imported_names(files)}


def imported_names(files: list[Path]) -> set[str]:
    """The dotted names ``files`` import anywhere (absolute imports only): ``import a.b`` and
    ``from a import b`` both give ``a.b`` (and ``from a import b`` gives ``a``); a file that
    cannot be read or parsed adds none."""
    imported: set[str] = set()
    for path in files:
        tree = parsed(path)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    return imported


def source_digest(files: list[Path]) -> str:
    """sha256 over the files' names and bytes, in the order given (an edited file is a new
    digest); ``UserError`` naming a file that cannot be read."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError as error:
            raise UserError(f"cannot read {path}: {error.strerror}") from None
    return digest.hexdigest()


def _takes_an_argument(function: Any) -> bool:
    import inspect

    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters
    )


class _working_directory_last:
    """The working directory at the end of the import path while the user's module is
    imported (a worker runs with ``-P``), so it never shadows an installed module."""

    def __enter__(self) -> None:
        self.added = os.getcwd() not in sys.path
        if self.added:
            sys.path.append(os.getcwd())

    def __exit__(self, *exc: object) -> None:
        if self.added and os.getcwd() in sys.path:
            sys.path.remove(os.getcwd())
