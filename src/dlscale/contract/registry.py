"""One generic registry, used once per plug-in axis (backends, models, datasets, launchers).

Entries are light descriptors: looking a name up never imports a deep-learning framework. The
first lookup in any registry imports the plug-ins (:func:`dlscale.contract.plugins.load_plugins`):
the built-in frameworks' entries come through that door too, so every lookup sees them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from dlscale.contract.errors import UserError
from dlscale.contract.text import did_you_mean, excerpt

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind; a failed lookup lists the names that exist."""

    def __init__(self, kind: str, *, resolve: str | None = None, own: str = "") -> None:
        self.kind = kind
        self._own = own
        """How a name of the user's own is written (said when a name is unknown)."""
        self._entries: dict[str, T] = {}
        self._resolve = resolve
        """``module:function(name) -> entry | None``: an entry for a name nobody registered
        (a model of the user's own, ``dlscale.contract.user_models``); imported when asked."""
        self._resolved: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        _plugins_loaded()
        try:
            return self._entries[name]
        except KeyError:
            if self._resolve is not None:
                if name not in self._resolved:
                    entry = load_object(self._resolve)(name)
                    if entry is not None:
                        self._resolved[name] = entry
                if name in self._resolved:
                    return self._resolved[name]
            if not self._entries:
                raise self._none_registered(f", so {excerpt(name)} cannot be found") from None
            own = f", or your own ({self._own})" if self._own else ""
            if hint := did_you_mean(str(name), self.names()):
                raise UserError(f"unknown {self.kind} {excerpt(name)};{hint}") from None
            raise UserError(
                f"unknown {self.kind} {excerpt(name)}; choose one of: "
                f"{', '.join(self.names())}{own}"
            ) from None

    def canonical(self, name: str) -> str:
        """``name`` as registered where it differs only in case from exactly one entry
        (``ResNet44`` is ``resnet44``), else ``name`` as given."""
        _plugins_loaded()
        if not isinstance(name, str) or name in self._entries:
            return name
        same = [entry for entry in self._entries if entry.casefold() == name.casefold()]
        return same[0] if len(same) == 1 else name

    def names(self) -> list[str]:
        _plugins_loaded()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        _plugins_loaded()
        return name in self._entries

    def __iter__(self) -> Iterator[tuple[str, T]]:
        _plugins_loaded()
        return iter(sorted(self._entries.items()))

    def listed(self) -> list[tuple[str, T]]:
        """Every entry, for a listing (``dlscale ls``): none at all is an install without its
        entry points, said as :meth:`get` says it, not an empty table."""
        entries = list(self)
        if not entries:
            raise self._none_registered("")
        return entries

    def _none_registered(self, what: str) -> UserError:
        return UserError(
            f"no {self.kind} is registered{what}: dlscale's entry points are missing (a copy "
            "not installed, or installed before they were added); reinstall it with make or "
            "pip install -e ."
        )


def _plugins_loaded() -> None:
    from dlscale.contract.plugins import load_plugins_once  # lazy: a plug-in imports the registries

    load_plugins_once()


def load_object(reference: str) -> Any:
    """The object a ``module:name`` reference names, imported only now (frameworks lazily)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)
