"""The triage partial (runs/_triage.html) on the campaign page, its exports routed here."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from portal.runs.triage import campaign_triage

register = template.Library()


@register.inclusion_tag("runs/_triage.html")
def campaign_triage_view(state: Any) -> dict[str, Any]:
    pk = state.campaign.pk
    return {
        "lines": campaign_triage(state=state),
        "csv_url": reverse("certificates:campaign_triage_csv", args=[pk]),
        "rma_url": reverse("certificates:campaign_triage_rma", args=[pk]),
    }
