"""Writes of the certificates app, one module per idea: campaigns (runs, scope, waivers) and issuing
(signatures, the certificate, revocation). Keyword-only, typed. Callers import from here; the names
below are the app's service API."""

from __future__ import annotations

from portal.certificates.services.campaigns import (
    MIN_JUSTIFICATION,
    CampaignError,
    audit_record,
    campaign_create,
    campaign_run_add,
    campaign_run_start,
    node_scope_remove,
    node_scope_restore,
    waiver_grant,
    waiver_withdraw,
)
from portal.certificates.services.issuing import (
    certificate_issue,
    certificate_issue_failed,
    certificate_issue_retry,
    certificate_revoke,
    certificate_sign,
)
from portal.certificates.services.public import public_verify_admit

__all__ = [
    "MIN_JUSTIFICATION",
    "CampaignError",
    "audit_record",
    "campaign_create",
    "campaign_run_add",
    "campaign_run_start",
    "certificate_issue",
    "certificate_issue_failed",
    "certificate_issue_retry",
    "certificate_revoke",
    "certificate_sign",
    "node_scope_remove",
    "node_scope_restore",
    "public_verify_admit",
    "waiver_grant",
    "waiver_withdraw",
]
