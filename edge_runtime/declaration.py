"""Settings declared once: each key's name, kind, default, bounds, unit, roles and doc.

A `Key` is one setting; a tuple of them is a table. Everything else is derived from a table:
the fields, defaults and ``Parameters`` docstring of a frozen dataclass (`declared`), the
checks of a value's kind (`Key.check_kind`) and range (`Key.check_value`) with one-line
messages (``"<where>: <key> must be <requirement>, got <value>"``), the Markdown reference
of the keys (`markdown_table`) and command-line flags (`Key.flag`, `Key.flag_help`). Adding
a setting is adding one `Key` to its table.

Construction validates first and then builds (`validated`): a dataclass's ``__init__`` runs
its validation on the given values and only then the dataclass's own ``__init__`` with the
normalised values, so a frozen instance is never changed after it is built.

The tables: `edge_runtime.topology.keys.TOPOLOGY_KEYS` (the keys of a topology file,
`NodeConfig`, `FedPowerConfig`) and `edge_runtime.settings.AGENT_SETTINGS_KEYS`
(`AgentSettings`). Stdlib only: the bottom of the layers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "KIND_NAMES",
    "REQUIRED",
    "Bound",
    "Key",
    "declared",
    "describe_default",
    "markdown_table",
    "type_name",
    "unknown_key_message",
    "validated",
    "value_text",
]

T = TypeVar("T")


class _Required:
    """The default of a key that has none (it must be given)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""`Key.default` of a key that must be given."""

KIND_NAMES: dict[str, str] = {
    "int": "an integer",
    "float": "a number",
    "number": "a number",
    "bool": "a boolean",
    "str": "a string",
    "path": "a path",
    "bounds": "an array of two numbers [lower, upper]",
    "range": (
        "two numbers [lo, hi] or two arrays of as many numbers [[lo1, lo2, ...], [hi1, hi2, ...]]"
    ),
    "table": "a table",
}
"""Each kind as an error message names it. "float" accepts an integer (and returns a float),
"number" an integer or a float as given; a boolean is never a number."""

_TYPE_NAMES: dict[str, str] = {
    "int": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "str": "string",
    "path": "path",
    "bounds": "array of 2 numbers",
    "range": "array",
    "table": "table",
}
"""Each kind as the reference's Type column names it."""

_ANNOTATIONS: dict[str, str] = {
    "int": "int",
    "float": "float",
    "number": "int | float",
    "bool": "bool",
    "str": "str",
    "path": "Path",
    "bounds": "tuple[float, float]",
    "range": "tuple[float, float] | tuple[tuple[float, ...], tuple[float, ...]]",
    "table": "Any",
}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def value_text(value: object) -> str:
    """A value as a TOML file writes it (booleans lower case, arrays in brackets)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(value_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {value_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else str(value)


@dataclass(frozen=True)
class Bound:
    """The interval a number must lie in: ``low``/``high`` (None: unbounded on that side),
    each open or closed; NaN lies in none, and an infinite value only where the interval
    reaches infinity without ``finite``.

    Parameters
    ----------
    low, high : float or None
        The ends; None for no end.
    low_open, high_open : bool, default False
        Whether the end itself is excluded.
    finite : bool, default True
        Whether the value must be finite (a one-sided interval otherwise admits infinity).
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    finite: bool = True

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the interval."""
        if math.isnan(value) or (self.finite and not math.isfinite(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    @property
    def text(self) -> str:
        """``"> 0"``, ``">= 1"``, ``"in (0, 1]"``, ``"<= 2"``."""
        if self.low is not None and self.high is not None:
            left = "(" if self.low_open else "["
            right = ")" if self.high_open else "]"
            return f"in {left}{_number_text(self.low)}, {_number_text(self.high)}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_number_text(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_number_text(self.high)}"
        return "any number"


@dataclass(frozen=True)
class Key:
    """One setting: everything the checks, the dataclass, the reference and the flags need.

    Parameters
    ----------
    name : str
        The key as written (TOML key, keyword argument).
    kind : str
        One of `KIND_NAMES`: what `check_kind` accepts.
    default : object, default REQUIRED
        The built-in value; `REQUIRED` when it must be given, None when unset means "not
        used" or "derived" (`default_doc` says which).
    doc : str, default ""
        What it means, in Markdown (the reference's Meaning column, the docstring's text).
    bound : Bound or None, default None
        The interval a number must lie in (`check_value`).
    choices : tuple of str or None, default None
        The strings it may take (`check_value`).
    unit : str, default ""
        Unit of a number (``"seconds"``, ``"radians"``, ...), for the reference and messages.
    roles : str, default "any"
        Which nodes it applies to: ``"leaf"``, ``"aggregator"``, ``"any"`` or ``"document"``.
    scope : str, default ""
        Where it may be set, for the table that declares it (e.g. ``"defaults"``,
        ``"node"``, ``"document"``, ``"data"``, ``"admit"``).
    group : str, default ""
        The keys that share rules (``"privacy"``, ``"score"``, ``"sensor"``, ...).
    attr : str or None, default None
        The dataclass attribute, when it differs from ``name``.
    field : bool, default True
        Whether it is a field of the table's dataclass (False: structure of the file only).
    requirement : str or None, default None
        What a message says the value must be, when not derived from the kind and bound.
    type_doc, default_doc : str or None, default None
        The reference's Type and Default cells, when not derived.
    flag, flag_help : str or None, default None
        The command-line flag that mirrors the key, and its help text.
    type_hint : str or None, default None
        The attribute's Python type, when not derived from the kind.
    optional : bool, default False
        Whether None is a valid value besides the kind (implied by a default of None).
    """

    name: str
    kind: str
    default: Any = REQUIRED
    doc: str = ""
    bound: Bound | None = None
    choices: tuple[str, ...] | None = None
    unit: str = ""
    roles: str = "any"
    scope: str = ""
    group: str = ""
    attr: str | None = None
    field: bool = True
    requirement: str | None = None
    type_doc: str | None = None
    default_doc: str | None = None
    flag: str | None = None
    flag_help: str | None = None
    type_hint: str | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KIND_NAMES:
            raise ValueError(f"key {self.name!r}: unknown kind {self.kind!r}")

    @property
    def attribute(self) -> str:
        """The dataclass attribute holding the key's value."""
        return self.attr or self.name

    @property
    def nullable(self) -> bool:
        """Whether None is a valid value (`optional`, or a default of None)."""
        return self.optional or self.default is None

    @property
    def required(self) -> bool:
        """Whether the key has no default."""
        return self.default is REQUIRED

    @property
    def annotation(self) -> str:
        """The Python type of the attribute (``"float | None"`` for a key defaulting to None)."""
        if self.type_hint is not None:
            return self.type_hint
        base = _ANNOTATIONS[self.kind]
        return f"{base} | None" if self.nullable else base

    @property
    def must_be(self) -> str:
        """What a value must be, as an error message says it (``"a finite number > 0"``)."""
        if self.requirement is not None:
            return self.requirement
        if self.choices is not None:
            return "one of " + ", ".join(map(repr, self.choices))
        if self.bound is None:
            return KIND_NAMES[self.kind]
        text = self.bound.text
        both = self.bound.low is not None and self.bound.high is not None
        if self.kind in ("float", "number") and not both:
            text = f"a finite number {text}" if self.bound.finite else f"a number {text}"
        return f"{text} {self.unit}" if self.unit and not both else text

    @property
    def type_text(self) -> str:
        """The reference's Type cell: kind, bound or choices, unit."""
        if self.type_doc is not None:
            return self.type_doc
        if self.choices is not None:
            names = [f'`"{c}"`' for c in self.choices]
            return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        text = _TYPE_NAMES[self.kind]
        if self.bound is not None:
            text += f" {self.bound.text}"
        if self.unit:
            text += f" ({self.unit})"
        return text

    def check_kind(self, where: str, value: object, error: type[Exception] = ValueError) -> Any:
        """Check ``value``'s type against `kind` and return it normalised.

        Returns
        -------
        object
            ``value``; a "float" as float, "bounds" as a tuple of two floats, "range" as
            ``(lo, hi)`` floats or ``((lo_1, ...), (hi_1, ...))`` tuples of floats, "path"
            as `pathlib.Path`.

        Raises
        ------
        error
            ``"<where>: <name> must be <kind>, got <type> <value>"``.
        """
        kind = self.kind
        ok = (
            (kind == "int" and isinstance(value, int) and not isinstance(value, bool))
            or (kind in ("float", "number") and _is_number(value))
            or (kind == "bool" and isinstance(value, bool))
            or (kind == "str" and isinstance(value, str))
            or (kind == "path" and _is_path(value))
            or (kind == "bounds" and _is_bounds(value))
            or (kind == "range" and _is_range(value))
            or kind == "table"
        )
        if not ok:
            raise error(
                f"{where}: {self.name} must be {KIND_NAMES[kind]}, got {type_name(value)} "
                f"{value_text(value)}"
            )
        if kind == "float":
            return float(value)  # type: ignore[arg-type]
        if kind == "path":
            from pathlib import Path

            return Path(value)  # type: ignore[arg-type]
        if kind == "bounds":
            return (float(value[0]), float(value[1]))  # type: ignore[index]
        if kind == "range":
            lo, hi = value  # type: ignore[misc]
            if _is_number(lo):
                return (float(lo), float(hi))
            return (tuple(float(x) for x in lo), tuple(float(x) for x in hi))
        return value

    def check_value(self, where: str, value: Any, error: type[Exception] = ValueError) -> None:
        """Check a value of the right kind against `bound` and `choices`.

        Raises
        ------
        error
            ``"<where>: <name> must be <must_be>, got <value>"``.
        """
        if self.choices is not None and value not in self.choices:
            raise error(f"{where}: {self.name} must be {self.must_be}, got {value!r}")
        if self.bound is not None and not self.bound.contains(value):
            raise error(f"{where}: {self.name} must be {self.must_be}, got {value}")

    def check(self, where: str, value: object, error: type[Exception] = ValueError) -> Any:
        """`check_kind` then `check_value` (None passes for a `nullable` key)."""
        if value is None and self.nullable:
            return None
        value = self.check_kind(where, value, error)
        self.check_value(where, value, error)
        return value


def _is_path(value: object) -> bool:
    import os

    return isinstance(value, str | os.PathLike)


def _is_bounds(value: object) -> bool:
    return (
        isinstance(value, list | tuple) and len(value) == 2 and all(_is_number(v) for v in value)
    )


def _is_range(value: object) -> bool:
    """Two numbers, or two non-empty arrays of numbers of one length (``valid_range``)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return False
    if all(_is_number(v) for v in value):
        return True
    return (
        all(isinstance(v, list | tuple) and v for v in value)
        and len(value[0]) == len(value[1])
        and all(_is_number(x) for v in value for x in v)
    )


def type_name(value: object) -> str:
    """The TOML name of a value's type (``"integer"``, ``"array"``, ...; a date or time by
    its Python class, ``"datetime"``, ``"date"``, ``"time"``), for messages."""
    names = ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"))
    for kind, name in names:
        if isinstance(value, kind):
            return name
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def unknown_key_message(where: str, key: str, allowed: Iterable[str]) -> str:
    """``"<where>: unknown key ..."`` listing ``allowed`` sorted, with the closest as a hint."""
    import difflib  # here, on the error path: valid settings do not load it

    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: unknown key {key!r} (expected one of: {', '.join(allowed)}){hint}"


def describe_default(key: Key) -> str:
    """The reference's Default cell: `Key.default_doc`, or the default as TOML in backticks."""
    if key.default_doc is not None:
        return key.default_doc
    if key.required:
        return "required"
    if key.default is None:
        return "none"
    if isinstance(key.default, str):
        return f'`"{key.default}"`'
    return f"`{value_text(key.default)}`"


_ROLE_NAMES = {"leaf": "leaves", "aggregator": "aggregators", "any": "all"}


def markdown_table(keys: Iterable[Key]) -> str:
    """The keys as a Markdown table, one row each in order: Key, Type, Default, Meaning, and
    Nodes (the roles it applies to) unless every key is the document's own."""
    keys = tuple(keys)
    roles = any(key.roles in _ROLE_NAMES for key in keys)
    head = ["Key", "Type", "Default", *(["Nodes"] if roles else []), "Meaning"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        role = [_ROLE_NAMES.get(key.roles, key.roles)] if roles else []
        doc = " ".join(key.doc.split())
        cells = (f"`{key.name}`", key.type_text, describe_default(key), *role, doc)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def _docstring_parameters(keys: Iterable[Key]) -> str:
    """A numpydoc ``Parameters`` section of the keys."""
    import textwrap

    lines = []
    for key in keys:
        default = "" if key.required else f", default {value_text(key.default)}"
        lines.append(f"    {key.attribute} : {key.type_text.replace('`', '')}{default}")
        text = " ".join(key.doc.split()) or "(undocumented)"
        lines.extend(textwrap.wrap(text, 88, initial_indent=" " * 8, subsequent_indent=" " * 8))
    return "\n".join(lines)


def validated(validate: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[type[T]], type[T]]:
    """Class decorator of a dataclass: ``__init__`` validates, then constructs.

    The new ``__init__`` binds its arguments to the init fields (positional in field order),
    fills in the fields' defaults, passes them to ``validate`` and calls the dataclass's own
    ``__init__`` with what it returns: a check raises before anything is built, and the
    instance holds the normalised values from the start (`dataclasses.replace` goes through
    it too). Missing or unknown arguments raise `TypeError` as usual.
    """

    def decorate(cls: type[T]) -> type[T]:
        construct = cls.__init__
        fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
        names = [f.name for f in fields]

        def init(self: T, *args: Any, **kwargs: Any) -> None:
            if len(args) > len(names):
                construct(self, *args, **kwargs)  # raises the usual TypeError
            values = dict(zip(names, args, strict=False))
            for name, value in kwargs.items():
                if name in values or name not in names:
                    construct(self, *args, **kwargs)  # raises the usual TypeError
                values[name] = value
            for f in fields:
                if f.name in values:
                    continue
                if f.default is not dataclasses.MISSING:
                    values[f.name] = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    values[f.name] = f.default_factory()
                else:
                    construct(self, **values)  # raises the usual TypeError
            construct(self, **validate(values))

        import inspect

        init.__signature__ = inspect.signature(construct)  # type: ignore[attr-defined]
        init.__doc__ = construct.__doc__
        init.__name__ = "__init__"
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        cls.__init__ = init  # type: ignore[assignment]
        return cls

    return decorate


def declared(
    keys: Iterable[Key], validate: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[type[T]], type[T]]:
    """Class decorator: a frozen dataclass whose fields are the keys (`Key.field`) of a table.

    Each key becomes a field, in the table's order, named `Key.attribute`, annotated
    `Key.annotation`, with `Key.default` (required keys must come first); the fields the class
    declares itself follow. A ``{parameters}`` line of the class docstring is replaced by the
    keys' ``Parameters`` entries. ``__init__`` runs ``validate`` first (`validated`).
    """
    keys = tuple(key for key in keys if key.field)

    def decorate(cls: type[T]) -> type[T]:
        import inspect

        own = dict(inspect.get_annotations(cls))
        annotations = {key.attribute: key.annotation for key in keys}
        for key in keys:
            if not key.required:
                setattr(cls, key.attribute, key.default)
        cls.__annotations__ = {**annotations, **own}
        if cls.__doc__ and "{parameters}" in cls.__doc__:
            cls.__doc__ = cls.__doc__.replace("    {parameters}", _docstring_parameters(keys))
        return validated(validate)(dataclass(frozen=True)(cls))

    return decorate
