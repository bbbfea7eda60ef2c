"""Template filters of the charts app: which chart section shows a result."""

from __future__ import annotations

from typing import Any

from django import template

from portal.charts.families import family_of

register = template.Library()


@register.filter
def chart_section(result: Any) -> Any:
    """How the result page shows a result's charts: its kind's declared chart family
    (portal/charts/families.py), None for none."""
    return family_of(result)
