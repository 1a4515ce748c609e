"""The value checks of the command line's options (argparse ``type=`` functions).

Each takes the option's text and returns its value, or raises
``argparse.ArgumentTypeError`` with the one-line reason argparse prints after
``argument --NAME:``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge_runtime.declaration import KIND_NAMES, Key

__all__ = ["broker_url", "declared_value", "port", "positive_float", "positive_int"]


def broker_url(text: str) -> str:
    """``--broker``: a non-empty URL (checked in full by `parse_broker_url` later).

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is empty or only white space.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got {text!r}"
        )
    return text


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, samples per second).

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is not a number, or not finite and > 0.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1 (counts).

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is not a whole number, or < 1.
    """
    value = _int(text, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port number, 0 to 65535 (0: any free port).

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is not a whole number in that range.
    """
    value = _int(text, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {text!r}")
    return value


def _int(text: str, what: str) -> int:
    """``int(text)``, or one line saying ``expected WHAT, got 'TEXT'``."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def declared_value(key: Key) -> Callable[[str], Any]:
    """The ``type=`` of the flag that mirrors ``key`` (`Key.flag`): the option's text parsed
    as the key's kind ("int", "float", "path" or "str"; a "bool" key is a ``store_true``
    flag, not this) and checked against its bounds and choices, as the settings check it.

    Raises
    ------
    ValueError
        If the key's kind has no text form here.
    """
    parse: Callable[[str], Any] = {"int": int, "float": float, "path": Path, "str": str}.get(
        key.kind, _no_text_form
    )
    if parse is _no_text_form:
        raise ValueError(f"key {key.name!r} of kind {key.kind!r} has no flag value type")

    def value(text: str) -> Any:
        try:
            parsed = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {KIND_NAMES[key.kind]}, got {text!r}"
            ) from None
        try:
            key.check_value("", parsed)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {key.must_be}, got {text!r}") from None
        return parsed

    value.__name__ = key.name  # argparse names the type in some messages
    return value


def _no_text_form(text: str) -> Any:
    raise ValueError(text)
