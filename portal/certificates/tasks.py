"""Celery tasks of the certificates app (discovered by worker/celery.py). Thin: they call services."""

from __future__ import annotations

import logging

from portal.certificates.task_names import CERTIFICATE_ISSUE
from worker.decorators import kiln_task

logger = logging.getLogger(__name__)


# Not re-queued when its worker dies (the default of Kiln tasks): a render that kills its worker
# (out of memory) would kill every worker in turn. The campaign page offers a retry instead.
@kiln_task(name=CERTIFICATE_ISSUE, reject_on_worker_lost=False, soft_time_limit=3600, time_limit=3660)
def certificate_issue_task(self, campaign_id: int) -> str | None:
    """Render, seal and record the certificate both sides signed. A failure is shown on the campaign."""
    from portal.certificates import services
    from portal.certificates.models import Campaign

    requested_at = Campaign.objects.filter(pk=campaign_id).values_list("issue_requested_at", flat=True).first()
    try:
        certificate = services.certificate_issue(campaign_id=campaign_id)
    except Exception as exc:
        logger.exception("issuing the certificate of campaign %s failed", campaign_id)
        error = f"{type(exc).__name__}: {exc}"
        services.certificate_issue_failed(campaign_id=campaign_id, error=error, requested_at=requested_at)
        return None
    return certificate.number if certificate else None
