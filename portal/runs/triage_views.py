"""The run triage exports (the lines themselves are shown on the run page; the campaign ones are
the certificates app's)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404

from portal.roles import VIEWER, role_required
from portal.runs.models import Run
from portal.runs.triage import Line, run_triage
from portal.runs.triage_export import csv_text, rma_text


def _download(text: str, *, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _run_lines(run_id: int) -> list[Line]:
    run = get_object_or_404(Run, pk=run_id)
    return run_triage(run_id=run.pk)


@role_required(VIEWER)
def run_triage_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    return _download(csv_text(_run_lines(run_id)), content_type="text/csv", filename=f"run-{run_id}-triage.csv")


@role_required(VIEWER)
def run_triage_rma(request: HttpRequest, run_id: int) -> HttpResponse:
    """All failing nodes' RMA text, or one node's with ?node=HOSTNAME."""
    text = rma_text(_run_lines(run_id), hostname=request.GET.get("node", ""))
    return _download(text, content_type="text/plain; charset=utf-8", filename=f"run-{run_id}-rma.txt")
