"""Parsing of string option maps at the boundary.

Spark hands data sources a case-insensitive ``Mapping[str, str]``. These helpers turn one option into a typed
value or raise :class:`~sparkonce.errors.OptionError` naming the option and the bad value. Nothing falls back to a
default silently: a default applies only when the option is absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from sparkonce.errors import OptionError

T = TypeVar("T", bound=str)

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def lookup(options: Mapping[str, str], name: str) -> str | None:
    """Return the raw value of ``name`` (case-insensitive), or None when absent."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def get_str(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = lookup(options, name)
    if value is None:
        return default
    if value.strip() == "":
        raise OptionError(name, value, "must not be empty")
    return value


def require_str(options: Mapping[str, str], name: str) -> str:
    value = get_str(options, name)
    if value is None:
        raise OptionError(name, None, "is required")
    return value


def get_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = lookup(options, name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise OptionError(name, value, "must be true or false")


def get_int(
    options: Mapping[str, str], name: str, default: int | None = None, *, minimum: int | None = None
) -> int | None:
    value = lookup(options, name)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(name, value, "must be an integer") from None
    if minimum is not None and number < minimum:
        raise OptionError(name, value, f"must be >= {minimum}")
    return number


def get_choice(options: Mapping[str, str], name: str, choices: tuple[T, ...], default: T) -> T:
    value = lookup(options, name)
    if value is None:
        return default
    lowered = value.strip().lower()
    for choice in choices:
        if choice.lower() == lowered:
            return choice
    raise OptionError(name, value, f"must be one of {', '.join(choices)}")


def get_json(options: Mapping[str, str], name: str) -> Any | None:
    value = lookup(options, name)
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise OptionError(name, value, f"is not valid JSON ({err.msg} at char {err.pos})") from None


_SIZE_UNITS = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3}


def get_bytes(options: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    """Parse a byte size such as ``1048576``, ``512k`` or ``1g``."""
    value = lookup(options, name)
    if value is None:
        return default
    text = value.strip().lower()
    digits = text.rstrip("bkmg")
    unit = text[len(digits) :] or "b"
    if unit not in _SIZE_UNITS or not digits.isdigit():
        raise OptionError(name, value, "must be a byte size such as 1048576, 512k or 1g")
    size = int(digits) * _SIZE_UNITS[unit]
    if size <= 0:
        raise OptionError(name, value, "must be > 0")
    return size


__all__ = ["get_bool", "get_bytes", "get_choice", "get_int", "get_json", "get_str", "lookup", "require_str"]
