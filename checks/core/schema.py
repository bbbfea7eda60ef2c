"""A check's Params and Thresholds dataclasses built from what a form or a stored plan gives
(strings, JSON numbers): coerced to the annotated field types, anything else a ParamsError."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class ParamsError(ValueError):
    """Params or thresholds given to a check do not match its schema."""


def build(schema: type, values: dict[str, Any], *, what: str) -> Any:
    """An instance of `schema` (a check's Params or Thresholds) from form or JSON values: strings
    coerced to the field types, unknown names and bad values a ParamsError naming them."""
    known = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ParamsError(f"unknown {what}(s): {', '.join(unknown)}; expected one of: {', '.join(sorted(known))}")
    hints = _field_types(schema)
    defaults = schema()
    coerced: dict[str, Any] = {}
    for name, raw in values.items():
        default = getattr(defaults, name)
        coerced[name] = _coerce(raw, default, name=name, what=what, target=hints.get(name))
    return schema(**coerced)


def _field_types(schema: type) -> dict[str, type]:
    """Field name -> the plain type to coerce to, from annotations.

    `int | None` gives int: a field whose default is None (e.g. "don't
    judge") still rejects a badly typed value instead of storing it raw."""
    try:
        hints = typing.get_type_hints(schema)
    except Exception:  # unresolvable annotation: fall back to the default's type
        return {}
    plain: dict[str, type] = {}
    for name, hint in hints.items():
        is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        args = typing.get_args(hint) if is_union else ()
        if args:
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1 and rest[0] in (bool, int, float, str):
                plain[name] = rest[0]
        elif hint in (bool, int, float, str):
            plain[name] = hint
    return plain


def _coerce(raw: Any, default: Any, *, name: str, what: str, target: type | None = None) -> Any:
    if raw is None:
        return raw
    if target is None:
        if default is None:
            return raw
        target = type(default)
    try:
        if target is bool:
            if isinstance(raw, str):
                if raw.lower() in ("1", "true", "yes", "on"):
                    return True
                if raw.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(raw)
            return bool(raw)
        if target in (int, float):
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = target(raw)
            if target is int and float(raw) != value:
                raise ValueError(raw)
            return value
        if target is str:
            if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
                raise ValueError(raw)
            return str(raw)
    except (TypeError, ValueError):
        raise ParamsError(f"{what} {name!r}: expected {target.__name__}, got {raw!r}") from None
    return raw
