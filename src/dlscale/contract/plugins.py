"""Plug-ins: packages that register backends, launchers, models or data sets when imported, with
no edit to dlscale. The built-in frameworks are plug-ins too (each ``dlscale.frameworks.*.plugin``,
named by dlscale's own entry points), so an outside engine is registered exactly as they are.

Two ways to name them, both read by the parent and handed to every worker in spec.json:

* the ``dlscale.plugins`` entry-point group of an installed package
  (``[project.entry-points."dlscale.plugins"] mine = "my_package.dlscale_plugin"``);
* the ``DLSCALE_PLUGINS`` environment variable: module names separated by commas.

A worker running under another interpreter imports the same modules; the launcher puts each
plug-in's top-level package on the worker's path (see :mod:`dlscale.runtime.worker_path`).
"""

from __future__ import annotations

import importlib
import os
from importlib import metadata

from dlscale.contract.errors import UserError

ENV_VAR = "DLSCALE_PLUGINS"
ENTRY_POINT_GROUP = "dlscale.plugins"
_loaded: list[str] = []
_state = {"discovered": False}


def plugin_modules() -> list[str]:
    """Module names of the plug-ins named by entry points and by ``DLSCALE_PLUGINS``."""
    found = [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    # dlscale's own first: a name an outside plug-in registers again is then its error, not ours
    ours = [name for name in found if name.startswith("dlscale.")]
    names = ours + [name for name in found if name not in ours]
    names += [n.strip() for n in os.environ.get(ENV_VAR, "").split(",") if n.strip()]
    return list(dict.fromkeys(names))


def load_plugins(modules: list[str] | None = None) -> list[str]:
    """Import each plug-in module once; returns every module loaded so far."""
    for name in plugin_modules() if modules is None else modules:
        if name in _loaded:
            continue
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise UserError(
                f"plug-in {name!r} cannot be imported ({error}); fix {ENV_VAR} or install it"
            ) from None
        except UserError:
            raise
        except Exception as error:  # an outside module's fault, said in one line
            raise UserError(
                f"plug-in {name!r} failed while registering ({type(error).__name__}: {error}); "
                f"fix it, or leave it out of {ENV_VAR} and its package's entry points"
            ) from None
        _loaded.append(name)
    return list(_loaded)


def load_plugins_once() -> None:
    """The plug-ins named by entry points and ``DLSCALE_PLUGINS``, imported before the first
    registry lookup (later calls return at once, and so does one made while a plug-in is being
    imported: its own lookups see what is registered so far)."""
    if _state["discovered"]:
        return
    _state["discovered"] = True
    load_plugins()
