"""Plug-in options: the settings a backend, launcher or data set declares for itself.

The core keeps the keys every run has (``RunConfig``); a plug-in's own settings are
:class:`Option` declarations, validated here and carried in ``RunConfig.options``. A study sets
them as top-level keys like any other (``bucket_mb = 10``); the plug-ins of the point decide
which keys are valid.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.text import did_you_mean, excerpt

_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def parse_value(value: Any, kind: type, label: str, *, optional: bool = False) -> Any:
    """A TOML or command-line value as ``kind`` (int, float, bool or str), or one
    :class:`UserError` naming ``label``: the one parser of core keys, study settings and
    plug-in options. Text is read as the type (``"yes"``/``"off"`` as a bool; digits in ASCII,
    no ``_``); an int is taken for a float, never a bool for a number; ``optional``:
    ``none``/``null``/empty is ``None``."""
    if value is None and optional:
        return None
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if optional and text in ("none", "null", ""):
            return None
        if kind is bool and text in _TRUE + _FALSE:
            return text in _TRUE
        try:  # ASCII only: int() and float() read "٣" as 3 and "1_0" as 10
            if kind is not bool and text.isascii() and "_" not in text:
                return kind(text)
        except ValueError:  # also an int of more than 4300 digits
            pass
        raise UserError(f"{label} must be {kind.__name__}, got {excerpt(value)}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise UserError(f"{label} must be {kind.__name__}, got {excerpt(value)}")
    return value


@dataclass(frozen=True, kw_only=True)
class Option:
    """One setting of one plug-in: name, type, default, allowed values, one line of help."""

    name: str
    type: str
    """``int``, ``float``, ``bool`` or ``str``."""
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    """Smallest allowed value (numbers); ``None``: no bound."""
    exclusive_minimum: bool = False
    """``True``: the value must be strictly greater than ``minimum``."""
    validate: Callable[[Any], None] | None = None
    """Raises :class:`UserError` for a value of the right type in the wrong form (a string
    with its own grammar); ``None``: any value of the type."""
    applies: tuple[str, Any] | None = None
    """``(option, value)``: this option changes the run only where the plug-in's other option
    has that value (``async_update`` only where ``ps_mode = "async"``); elsewhere it is left
    out of the run id. ``None``: always."""
    earlier: tuple[Any, ...] = ()
    """``(value,)``: what every run stored before the option existed did. The run id leaves the
    option out at that value, so those points keep their ids (and are not run again), and a
    stored result without the option reads as having it (``store/migrate.py``)."""
    whole: bool = False
    """The value holds commas of its own (a host list ``a:2,b:2``): ``--set`` takes it whole
    rather than as a grid of values (a study file's grid is a TOML array)."""
    identity: bool = True
    """``False``: a fact the plan is made from, never part of the run id; what it changes is
    a key of its own (``cpus_per_node`` sets ``threads_per_worker``, which is in the id)."""
    scale: bool = False
    """``True``: the option says how a point's workers are spread over machines and linked
    between them, as ``workers`` says how many there are (torchrun's ``nnodes`` and
    ``network``), which a single worker has no use for: a study's 1-worker points (its
    baselines, the whole-machine reference) take its default (one machine, no emulated link),
    and a point is matched to its 1-worker baseline, and drawn on one line with it, whatever
    its value."""

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"option {self.name}: type must be one of {', '.join(_TYPES)}")

    def parse(self, value: Any) -> Any:
        """A TOML or command-line value as this option's type, or :class:`UserError`."""
        return parse_value(value, _TYPES[self.type], self.name)

    def check(self, value: Any, owner: str) -> Any:
        """Parse and validate ``value`` for the plug-in ``owner``; returns the typed value.

        An impossible value (wrong type, NaN, out of range) is a :class:`UserError`; a value
        that is valid for the option's type but not among this plug-in's choices is
        :class:`UnsupportedPoint`, so a grid over plug-ins skips it.
        """
        value = self.parse(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{self.name} must be a finite number, got {excerpt(value)}")
        if self.minimum is not None and isinstance(value, int | float):
            low = value <= self.minimum if self.exclusive_minimum else value < self.minimum
            if low:
                sign = ">" if self.exclusive_minimum else ">="
                raise UserError(
                    f"{self.name} must be {sign} {self.minimum:g}, got {excerpt(value)}"
                )
        if self.validate is not None:
            self.validate(value)
        if self.choices is not None and value not in self.choices:
            raise UnsupportedPoint(
                f"{owner} accepts {self.name} = {', '.join(map(str, self.choices))}; "
                f"got {excerpt(value)}"
            )
        return value

    def matters(self, values: Mapping[str, Any]) -> bool:
        """Whether this option changes a run whose resolved options are ``values``."""
        return self.applies is None or values.get(self.applies[0]) == self.applies[1]

    def in_identity(self, values: Mapping[str, Any]) -> bool:
        """Whether the option's value is part of the run id (:attr:`applies`, :attr:`earlier`)."""
        if not self.identity:
            return False
        return self.matters(values) and (values.get(self.name),) != self.earlier

    def stored_value(self, values: Mapping[str, Any]) -> Any:
        """The value a stored run without this option had: :attr:`earlier` where the option
        changes the run, else the default (it changed nothing)."""
        return self.earlier[0] if self.earlier and self.matters(values) else self.default

    def describe(self) -> str:
        allowed = f"; one of {', '.join(map(str, self.choices))}" if self.choices else ""
        return f"{self.help} ({self.type}, default {self.default!r}{allowed})"


def resolve(
    declared: dict[str, tuple[str, tuple[Option, ...]]], given: dict[str, Any]
) -> dict[str, Any]:
    """Every declared option with its value (given or default), validated.

    ``declared`` maps a plug-in kind (``backend``...) to ``(plug-in name, its options)``. A
    given key that none of them declares is :class:`UnsupportedPoint` naming the valid ones
    (the key may belong to another backend of the same grid).
    """
    out: dict[str, Any] = {}
    owners: dict[str, str] = {}
    for kind, (name, options) in declared.items():
        for option in options:
            owner = f"{kind} {name}"
            if option.name in out:
                raise ValueError(
                    f"option {option.name} is declared by {owners[option.name]} and {owner}"
                )
            owners[option.name] = owner
            value = given.get(option.name, option.default)
            out[option.name] = value if value is None else option.check(value, owner)
    unknown = sorted(set(given) - set(out))
    if unknown:
        plugins = ", ".join(f"{kind} {name}" for kind, (name, _) in declared.items())
        hint = did_you_mean(unknown[0], out) or " dlscale run --keys lists every option"
        raise UnsupportedPoint(f"{', '.join(unknown)}: not an option of {plugins};{hint}")
    return out


T = TypeVar("T")


def setting(
    default: Any,
    help: str,
    *,
    choices: tuple[Any, ...] | None = None,
    minimum: float | None = None,
    exclusive_minimum: bool = False,
    validate: Callable[[Any], None] | None = None,
    applies: tuple[str, Any] | None = None,
    earlier: tuple[Any, ...] = (),
    whole: bool = False,
    identity: bool = True,
    scale: bool = False,
) -> Any:
    """One field of a plug-in's options dataclass: its default and what its :class:`Option`
    says (the name and type come from the field). A plug-in declares its options once, as a
    frozen dataclass of such fields; :func:`declared` derives the Options the core validates,
    and :func:`typed` gives its code the resolved values as that dataclass."""
    spec = {
        "help": help,
        "choices": choices,
        "minimum": minimum,
        "exclusive_minimum": exclusive_minimum,
        "validate": validate,
        "applies": applies,
        "earlier": earlier,
        "whole": whole,
        "identity": identity,
        "scale": scale,
    }
    return dataclasses.field(default=default, metadata={"option": spec})


def declared(options: type) -> tuple[Option, ...]:
    """The :class:`Option` of every field of an options dataclass, in field order."""
    hints = typing.get_type_hints(options)
    return tuple(
        Option(name=f.name, type=hints[f.name].__name__, default=f.default, **f.metadata["option"])
        for f in dataclasses.fields(options)
    )


def typed(options: type[T], values: Mapping[str, Any]) -> T:
    """An options dataclass filled from resolved values (a run's ``RunConfig.options``)."""
    fields = dataclasses.fields(options)  # type: ignore[arg-type]
    return options(**{f.name: values[f.name] for f in fields})
