"""Template filters for showing measurements."""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from typing import Any

from django import template
from django.utils import formats, timezone
from django.utils.dateparse import parse_datetime

from portal import formatting

register = template.Library()


@register.filter
def num(value: float | None) -> str:
    """Whole numbers without '.0'; others with up to 3 significant decimals."""
    if value is None:
        return ""
    if not math.isfinite(value):
        return formatting.INVALID
    if float(value).is_integer():
        return str(int(value))
    text = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.6g}"
    return formatting.number(value) if "e" in text else text  # never e-notation: people read 12000, not 1.2e+04


@register.filter
def quantity(value: Any, unit: str = "") -> str:
    """A value with its unit for people (portal/formatting.py): 6e9|quantity:"B/s" -> '6.0 GB/s'."""
    return formatting.quantity(value, unit)


@register.filter
def limit(text: Any, unit: str = "") -> str:
    """A threshold written like the values it judges: '>= 6e+09'|limit:"B/s" -> '≥ 6.0 GB/s'."""
    return formatting.threshold(text, unit)


@register.filter
def settings_shown(values: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A plan item's parameters or thresholds as (name, value for people) pairs, in order."""
    return [(name, formatting.setting(name, value)) for name, value in (values or {}).items()]


@register.filter
def iso_utc(when: Any) -> str:
    """A timestamp as ISO 8601 UTC to the second (the certificate's dates): '2026-12-03T15:44:27Z'."""
    return formatting.iso_utc(when)


@register.filter
def when(value: Any, precision: str = "") -> str:
    """A date and time as every page shows it: ISO 8601 in the server's zone, with the zone's name
    ('2026-12-01 12:56 UTC'; `when:"s"` adds the seconds). Accepts an ISO string (a certificate
    payload's); '' for no value, so `|when|default:"never"` works."""
    if isinstance(value, str) and value:
        value = parse_datetime(value) or value
    if isinstance(value, date) and not isinstance(value, datetime):
        return formats.date_format(value, "DATE_FORMAT")
    if not isinstance(value, datetime):
        return value if isinstance(value, str) else ""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return formats.date_format(value, "DATETIME_FORMAT" if precision == "s" else "SHORT_DATETIME_FORMAT")


@register.filter
def pretty_json(text: str) -> str:
    """Indent raw output that is one JSON document (the probe's); anything else is shown as is."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return text
    try:
        return json.dumps(json.loads(stripped), indent=2)
    except ValueError:
        return text


@register.filter
def kw(watts: Any) -> str:
    """12345.6 (W) -> '12.35 kW'; '' for no value (None, or a missing variable's '')."""
    return f"{watts / 1000:.2f} kW" if _is_number(watts) else ""


@register.filter
def pct(fraction: Any) -> str:
    """0.553 -> '55%'; '' for no value."""
    return f"{fraction * 100:.0f}%" if _is_number(fraction) else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
