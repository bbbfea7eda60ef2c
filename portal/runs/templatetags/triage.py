"""The triage partial (runs/_triage.html) for the run page: an inclusion tag, so the page's view
and templates change by one line each (the campaign page's is the certificates app's)."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from portal.runs.cells import RunCounts, run_counts
from portal.runs.triage import Line, failing_nodes, run_triage

register = template.Library()


@register.inclusion_tag("runs/_triage.html")
def run_triage_view(
    run: Any, counts: RunCounts | None = None, oob: bool = False, lines: list[Line] | None = None
) -> dict[str, Any]:
    """`counts`: the run's RunCounts when the caller has them (the run page's grid); `oob`: the
    live poll swaps the box out of band, so it fills in as checks fail, without a reload; `lines`:
    the run's triage lines when the caller read them already."""
    found = lines if lines is not None else run_triage(run_id=run.pk)
    here = reverse("runs:run_detail", args=[run.pk])
    return {
        "lines": found,
        "failing": failing_nodes(found),
        "problems_url": f"{here}?problems=1",
        "counts": counts if counts is not None else run_counts(run=run),
        "active": run.is_active,
        "oob": oob,
        "csv_url": reverse("runs:run_triage_csv", args=[run.pk]),
        "rma_url": reverse("runs:run_triage_rma", args=[run.pk]),
    }
