from __future__ import annotations

from django.urls import path

from portal.certificates import views

app_name = "certificates"

urlpatterns = [
    path("campaigns/", views.campaign_list, name="campaign_list"),
    path("campaigns/<int:campaign_id>/", views.campaign_detail, name="campaign_detail"),
    path("campaigns/<int:campaign_id>/run/", views.campaign_run_start, name="campaign_run_start"),
    path("campaigns/<int:campaign_id>/add-run/", views.campaign_run_add, name="campaign_run_add"),
    path("campaigns/<int:campaign_id>/scope/", views.campaign_scope, name="campaign_scope"),
    path("campaigns/<int:campaign_id>/waive/", views.campaign_waive, name="campaign_waive"),
    path(
        "campaigns/<int:campaign_id>/waivers/<int:waiver_id>/withdraw/",
        views.campaign_waiver_withdraw,
        name="campaign_waiver_withdraw",
    ),
    path("campaigns/<int:campaign_id>/scope/restore/", views.campaign_scope_restore, name="campaign_scope_restore"),
    path("campaigns/<int:campaign_id>/triage.csv", views.campaign_triage_csv, name="campaign_triage_csv"),
    path("campaigns/<int:campaign_id>/rma.txt", views.campaign_triage_rma, name="campaign_triage_rma"),
    path("campaigns/<int:campaign_id>/sign/", views.campaign_sign, name="campaign_sign"),
    path("campaigns/<int:campaign_id>/issue/", views.campaign_issue_status, name="campaign_issue_status"),
    path("campaigns/<int:campaign_id>/issue/retry/", views.campaign_issue_retry, name="campaign_issue_retry"),
    path("certificates/verify/", views.certificate_verify, name="certificate_verify"),
    # The one page without a login (portal/api/admission.py bounds it): anyone verifies a certificate.
    path("verify/", views.public_verify, name="public_verify"),
    path("certificates/site-keys.pem", views.certificate_site_ca, name="certificate_site_keys"),
    path("certificates/<int:certificate_id>.pdf", views.certificate_pdf, name="certificate_pdf"),
    path("certificates/<int:certificate_id>.json", views.certificate_json, name="certificate_json"),
    path("certificates/<int:certificate_id>.evidence.jsonl", views.certificate_evidence, name="certificate_evidence"),
    path("certificates/<int:certificate_id>/revoke/", views.certificate_revoke, name="certificate_revoke"),
]
