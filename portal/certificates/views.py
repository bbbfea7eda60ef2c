"""Campaign and certificate pages. Thin: they adapt HTTP to selectors and services."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from portal import uploads
from portal.catalog.models import TestPlan
from portal.certificates import export, keys, public, selectors, services, verification
from portal.certificates.models import Campaign, Certificate
from portal.certificates.seal import NOT_A_CERTIFICATE, REVOKED, TAMPERED, UNKNOWN_KEY, VALID
from portal.inventory.models import Cluster, Node
from portal.roles import APPROVER, OPERATOR, VIEWER, has_role, role_required
from portal.runs.estimates import choices, plan_estimates
from portal.runs.models import STATUS_COLOURS, Run
from portal.runs.triage import Line, campaign_triage
from portal.runs.triage_export import csv_text, rma_text

OPEN_PAGE = 50
AUDIT_PAGE = 50
# Issuing 1,250 nodes took ~40 s in bench/bench_certificate.py; after 10 minutes the task was lost.
ISSUE_STALL = timedelta(minutes=10)


class CampaignForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Empty: named after the plan and cluster.")
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), to_field_name="name", empty_label=None)
    plan = forms.ModelChoiceField(queryset=TestPlan.objects.all(), to_field_name="slug", empty_label=None)

    def __init__(self, *args: Any, cluster: Cluster | None = None, **kwargs: Any) -> None:
        """`cluster`: the one preselected; the plans are listed and estimated for it, and its
        acceptance plan is the default (a campaign certifies the cluster against that plan)."""
        super().__init__(*args, **kwargs)
        plan = self.fields["plan"]
        assert isinstance(plan, forms.ModelChoiceField)
        found = plan_estimates(cluster=cluster if cluster is not None else Cluster(name="-"))
        plan.choices = choices(found)  # the cluster's acceptance plan first, with durations
        if cluster is not None:
            self.initial.setdefault("cluster", cluster.name)
            if cluster.acceptance_plan is not None:
                self.initial.setdefault("plan", cluster.acceptance_plan.slug)


class RunStartForm(forms.Form):
    node_set = forms.CharField(required=False, label="Nodes", widget=forms.TextInput(attrs={"size": 40}))


class RunAddForm(forms.Form):
    run = forms.IntegerField(label="Run #", min_value=1)


class ScopeForm(forms.Form):
    hostname = forms.CharField(max_length=253)
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2, "cols": 50}))


class WaiverForm(forms.Form):
    hostname = forms.CharField(max_length=253, widget=forms.HiddenInput)
    item_key = forms.CharField(max_length=64, widget=forms.HiddenInput)
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 2, "cols": 50}))


class RevokeForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2, "cols": 50}))


class VerifyForm(forms.Form):
    pdf = forms.FileField(label="Certificate PDF")


@role_required(VIEWER)
def campaign_list(request: HttpRequest) -> HttpResponse:
    # The cluster the form is for: ?cluster=NAME (the cluster page links it), else the first listed.
    clusters = Cluster.objects.select_related("acceptance_plan")
    cluster = clusters.filter(name=request.GET.get("cluster", "")).first() or clusters.first()
    form = CampaignForm(request.POST or None, cluster=cluster)
    if request.method == "POST":
        if not has_role(request.user, OPERATOR):
            return HttpResponse("opening a campaign needs the operator role", status=403)
        if form.is_valid():
            try:
                campaign = services.campaign_create(
                    cluster=form.cleaned_data["cluster"],
                    plan=form.cleaned_data["plan"],
                    name=form.cleaned_data["name"],
                    user=request.user,
                )
            except services.CampaignError as exc:
                form.add_error(None, str(exc))
            else:
                return redirect("certificates:campaign_detail", campaign_id=campaign.pk)
    page = Paginator(selectors.campaign_list(), 50).get_page(request.GET.get("page"))
    return render(
        request,
        "certificates/campaign_list.html",
        {"page": page, "form": form, "can_operate": has_role(request.user, OPERATOR)},
    )


@role_required(VIEWER)
def campaign_detail(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster", "plan", "created_by"), pk=campaign_id)
    state = selectors.campaign_state(campaign=campaign)
    open_page = Paginator(state.open_cells, OPEN_PAGE).get_page(request.GET.get("open"))
    audit_page = Paginator(selectors.campaign_audit(campaign=campaign), AUDIT_PAGE).get_page(request.GET.get("audit"))
    side = selectors.signer_side(user=request.user)
    certificates = list(selectors.campaign_certificates(campaign=campaign))
    closed = bool(certificates)  # issuing closes a campaign: nothing in it can change any more
    return render(
        request,
        "certificates/campaign_detail.html",
        {
            "campaign": campaign,
            "state": state,
            "state_rows_html": campaign_rows_html(state),
            "waivers": [cell for cell in state.cells if cell.waiver is not None],
            "open_page": open_page,
            "audit_page": audit_page,
            "runs": [
                (run, STATUS_COLOURS.get(run.status, "grey")) for run in selectors.campaign_runs(campaign=campaign)[:50]
            ],
            "pending": selectors.pending_signatures(campaign=campaign),
            "certificates": certificates,
            "first_certificate": certificates[-1] if certificates else None,
            "run_form": RunStartForm(initial={"node_set": selectors.open_node_set(state=state)}),
            "can_operate": has_role(request.user, OPERATOR) and not closed,
            "can_approve": has_role(request.user, APPROVER) and not closed,
            "can_revoke": has_role(request.user, APPROVER),
            "side": side,
            **{k: v for k, v in _issue_context(request, campaign).items() if k.startswith("issue_")},
        },
    )


def campaign_rows_html(state: selectors.CampaignState) -> list[SafeString]:
    """The state grid's rows, every value escaped. Built here, not in the template: at 1,250 nodes ×
    8 checks Django's template engine took ~0.6 s on the 10,000 cells (as portal.runs.views.grid_rows_html).
    Node names link to the node's page, cells to their result."""
    prefix, _, suffix = reverse("runs:result_detail", args=[0]).rpartition("/0/")
    prefix, suffix = escape(prefix), escape(suffix)
    cluster = state.campaign.cluster.name
    node_prefix, _, node_suffix = reverse("history:node_detail", args=[cluster, "0"]).rpartition("/0/")
    cells_seen: dict[tuple[str, str, int | None, str], str] = {}
    rows = []
    for node, cells in state.rows:
        node_url = escape(f"{node_prefix}/{quote(node.hostname, safe='')}/{node_suffix}")
        parts = [f'<tr><td><a href="{node_url}">{escape(node.hostname)}</a></td>']
        for cell in cells:
            if not cell.result_id:
                parts.append('<td><span class="cstate grey">missing</span></td>')
                continue
            key = (cell.colour, cell.state, cell.run_id, cell.reason)
            around = cells_seen.get(key)
            if around is None:
                title = escape(f"run #{cell.run_id}: {cell.reason}")
                around = cells_seen[key] = (
                    f'<td><a class="cstate {escape(cell.colour)}" href="{prefix}/{{}}/{suffix}" title="{title}">'
                    f"{escape(cell.state)}</a></td>"
                )
            parts.append(around.replace("{}", str(cell.result_id), 1))
        parts.append("</tr>")
        rows.append(mark_safe("".join(parts)))  # every value above is escaped
    return rows


def _done(request: HttpRequest, campaign: Campaign, error: Exception | None, ok: str) -> HttpResponse:
    if error is not None:
        messages.error(request, str(error))
    else:
        messages.success(request, ok)
    return redirect("certificates:campaign_detail", campaign_id=campaign.pk)


@role_required(OPERATOR)
@require_POST
def campaign_run_start(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster", "plan"), pk=campaign_id)
    form = RunStartForm(request.POST)
    form.is_valid()
    try:
        run = services.campaign_run_start(
            campaign=campaign, node_set=form.cleaned_data.get("node_set", ""), user=request.user
        )
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, f"Run #{run.pk} started on {run.node_set}.")


@role_required(OPERATOR)
@require_POST
def campaign_run_add(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster"), pk=campaign_id)
    form = RunAddForm(request.POST)
    if not form.is_valid():
        return _done(request, campaign, ValueError("give a run number"), "")
    run = Run.objects.filter(pk=form.cleaned_data["run"]).first()
    if run is None:
        return _done(request, campaign, ValueError(f"no run #{form.cleaned_data['run']}"), "")
    try:
        services.campaign_run_add(campaign=campaign, run=run, user=request.user)
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, f"Run #{run.pk} added.")


@role_required(OPERATOR)
@require_POST
def campaign_scope(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster"), pk=campaign_id)
    form = ScopeForm(request.POST)
    if not form.is_valid():
        return _done(request, campaign, ValueError("give the node and the reason"), "")
    node = Node.objects.filter(cluster=campaign.cluster, hostname=form.cleaned_data["hostname"]).first()
    if node is None:
        return _done(request, campaign, ValueError(f"no node {form.cleaned_data['hostname']} in this cluster"), "")
    try:
        services.node_scope_remove(campaign=campaign, node=node, reason=form.cleaned_data["reason"], user=request.user)
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, f"{node.hostname} is out of scope.")


@role_required(APPROVER)
@require_POST
def campaign_waive(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster"), pk=campaign_id)
    form = WaiverForm(request.POST)
    if not form.is_valid():
        return _done(request, campaign, ValueError("a waiver needs a written justification"), "")
    data = form.cleaned_data
    try:
        services.waiver_grant(
            campaign=campaign,
            hostname=data["hostname"],
            item_key=data["item_key"],
            justification=data["justification"],
            user=request.user,
        )
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, f"Waived {data['hostname']} × {data['item_key']}.")


@role_required(APPROVER)
@require_POST
def campaign_waiver_withdraw(request: HttpRequest, campaign_id: int, waiver_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign, pk=campaign_id)
    try:
        services.waiver_withdraw(
            campaign=campaign, waiver_id=waiver_id, reason=request.POST.get("reason", ""), user=request.user
        )
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, f"Waiver #{waiver_id} withdrawn: the item is open again.")


@role_required(OPERATOR)
@require_POST
def campaign_scope_restore(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster"), pk=campaign_id)
    node = Node.objects.filter(cluster=campaign.cluster, hostname=request.POST.get("hostname", "")).first()
    if node is None:
        return _done(request, campaign, ValueError("no such node in this cluster"), "")
    try:
        services.node_scope_restore(campaign=campaign, node=node, user=request.user)
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, f"{node.hostname} is back in scope.")


@role_required(APPROVER)
@require_POST
def campaign_sign(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster"), pk=campaign_id)
    try:
        signature = services.certificate_sign(campaign=campaign, user=request.user)
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    signature.refresh_from_db(fields=["certificate"])
    campaign.refresh_from_db(fields=["issue_requested_at"])
    if campaign.issue_requested_at or signature.certificate_id:  # queued, or issued already
        return _done(
            request,
            campaign,
            None,
            f"Signed for the {signature.side} side. Both sides have signed: the certificate is being issued.",
        )
    return _done(request, campaign, None, f"Signed for the {signature.side} side; the other side signs next.")


def _issue_context(request: HttpRequest, campaign: Campaign) -> dict[str, Any]:
    stalled = campaign.issue_requested_at is not None and timezone.now() - campaign.issue_requested_at > ISSUE_STALL
    return {
        "campaign": campaign,
        "can_approve": has_role(request.user, APPROVER),
        "issue_stalled": stalled,
        "issue_stall_minutes": int(ISSUE_STALL.total_seconds() // 60),
    }


@role_required(VIEWER)
def campaign_issue_status(request: HttpRequest, campaign_id: int) -> HttpResponse:
    """The issuing banner (htmx polls it). Once the certificate is in (or issuing stopped), the page reloads."""
    campaign = get_object_or_404(Campaign, pk=campaign_id)
    response = render(request, "certificates/_issue_status.html", _issue_context(request, campaign))
    if request.headers.get("HX-Request") and (campaign.issue_requested_at is None or campaign.issue_error):
        response["HX-Refresh"] = "true"
    return response


@role_required(APPROVER)
@require_POST
def campaign_issue_retry(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign, pk=campaign_id)
    try:
        services.certificate_issue_retry(campaign=campaign, user=request.user)
    except services.CampaignError as exc:
        return _done(request, campaign, exc, "")
    return _done(request, campaign, None, "Issuing the certificate again.")


@role_required(VIEWER)
def certificate_pdf(request: HttpRequest, certificate_id: int) -> HttpResponse:
    certificate = get_object_or_404(Certificate.objects.only("number", "pdf"), pk=certificate_id)
    response = HttpResponse(bytes(certificate.pdf), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{certificate.number}.pdf"'
    return response


@role_required(VIEWER)
def certificate_json(request: HttpRequest, certificate_id: int) -> HttpResponse:
    """The exact sealed payload bytes (what the digest covers), plus the seal in a header-free sibling
    download would be redundant: the seal is in the PDF and on the campaign page."""
    certificate = get_object_or_404(Certificate.objects.only("number", "payload"), pk=certificate_id)
    response = HttpResponse(certificate.payload.encode("utf-8"), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{certificate.number}.json"'
    return response


@role_required(VIEWER)
def certificate_evidence(request: HttpRequest, certificate_id: int) -> HttpResponse | StreamingHttpResponse:
    """The detailed evidence of a format-3 certificate, streamed as JSON lines (export.py): each
    node's line hashes to the digest its sealed payload carries."""
    certificate = get_object_or_404(Certificate.objects.only("number", "payload", "sha256"), pk=certificate_id)
    lines = export.evidence_lines(payload=json.loads(certificate.payload), payload_sha256=certificate.sha256)
    try:
        first = next(lines)
    except export.NoEvidence as exc:
        return HttpResponse(f"{exc}: download the JSON instead.\n", status=404, content_type="text/plain")
    response = StreamingHttpResponse(itertools.chain([first], lines), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{certificate.number}.evidence.jsonl"'
    return response


@role_required(APPROVER)
@require_POST
def certificate_revoke(request: HttpRequest, certificate_id: int) -> HttpResponse:
    certificate = get_object_or_404(Certificate.objects.select_related("campaign").defer("pdf"), pk=certificate_id)
    form = RevokeForm(request.POST)
    if not form.is_valid():
        return _done(request, certificate.campaign, ValueError("say why the certificate is revoked"), "")
    try:
        services.certificate_revoke(certificate=certificate, reason=form.cleaned_data["reason"], user=request.user)
    except services.CampaignError as exc:
        return _done(request, certificate.campaign, exc, "")
    return _done(request, certificate.campaign, None, f"{certificate.number} revoked.")


VERDICT_COLOURS = {VALID: "green", TAMPERED: "red", UNKNOWN_KEY: "orange", NOT_A_CERTIFICATE: "grey", REVOKED: "red"}


@role_required(VIEWER)
def certificate_verify(request: HttpRequest) -> HttpResponse:
    form = VerifyForm(request.POST or None, request.FILES or None)
    verdict = None
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["pdf"]
        if upload.size > uploads.file_limit():  # the upload handler stops it first; kept as a guard
            form.add_error("pdf", f"larger than {settings.KILN_MAX_UPLOAD_MB} MiB")
        else:  # within its slots (portal/api/admission.py)
            verdict = verification.certificate_verify(data=upload.read())
    try:
        store, key_error = keys.trust_store_load(), ""
    except keys.KeyringError as exc:
        store, key_error = None, str(exc)
    return render(
        request,
        "certificates/verify.html",
        {
            "form": form,
            "verdict": verdict,
            "exit_code": verification.EXIT_CODES.get(verdict.status) if verdict else None,
            "colour": VERDICT_COLOURS.get(verdict.status, "grey") if verdict else "",
            "keys": store.keys if store else [],
            "key_error": key_error,
        },
    )


# No login: a customer without an account verifies here. csrf_exempt because the page changes
# nothing (it reads the upload and answers; the only write is the per-address count that a forged
# cross-site post would spend on the victim's own address) and reads no session or user: a forged
# post gains its sender nothing, and its answer is not readable cross-site. A form token would only
# keep scripts (curl -F pdf=@FILE) from using it. Size, rate and slots: portal/api/admission.py.
@login_not_required
@csrf_exempt
@require_http_methods(["GET", "POST"])
def public_verify(request: HttpRequest) -> HttpResponse:
    if int(settings.KILN_VERIFY_PUBLIC_CONCURRENCY) <= 0:
        raise Http404("the public verify page is off on this site")
    answer, error = None, ""
    if request.method == "POST":
        form = VerifyForm(request.POST, request.FILES)
        if not form.is_valid():
            error = "Choose a certificate PDF to upload (the form field 'pdf')."
        elif form.cleaned_data["pdf"].size > uploads.file_limit():  # the upload handler stops it first
            error = f"The file is larger than {settings.KILN_MAX_UPLOAD_MB} MiB."
        else:
            answer = public.public_answer(verification.certificate_verify(data=form.cleaned_data["pdf"].read()))
        if public.wants_json(request):
            if answer is None:
                return JsonResponse({"detail": error}, status=400)
            return JsonResponse(answer.as_json())
    context = {
        "answer": answer,
        "error": error,
        "colour": VERDICT_COLOURS.get(answer.status, "grey") if answer else "",
        "ca_fingerprint": public.site_ca_fingerprint(),
    }
    return render(request, "certificates/public_verify.html", context, status=400 if error else 200)


@role_required(VIEWER)
def certificate_site_ca(request: HttpRequest) -> HttpResponse:
    """The site's public keys and CA certificates (PEM), for verifiers and PDF readers elsewhere."""
    response = HttpResponse(keys.public_export(), content_type="application/x-pem-file")
    response["Content-Disposition"] = 'attachment; filename="kiln-site-keys.pem"'
    return response


def _attachment(text: str, *, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _campaign_lines(campaign_id: int) -> list[Line]:
    campaign = get_object_or_404(Campaign.objects.select_related("cluster"), pk=campaign_id)
    return campaign_triage(state=selectors.campaign_state(campaign=campaign))


@role_required(VIEWER)
def campaign_triage_csv(request: HttpRequest, campaign_id: int) -> HttpResponse:
    """The campaign's triage lines (shown on its page) as CSV."""
    text = csv_text(_campaign_lines(campaign_id))
    return _attachment(text, content_type="text/csv", filename=f"campaign-{campaign_id}-triage.csv")


@role_required(VIEWER)
def campaign_triage_rma(request: HttpRequest, campaign_id: int) -> HttpResponse:
    """All failing nodes' RMA text, or one node's with ?node=HOSTNAME."""
    text = rma_text(_campaign_lines(campaign_id), hostname=request.GET.get("node", ""))
    return _attachment(text, content_type="text/plain; charset=utf-8", filename=f"campaign-{campaign_id}-rma.txt")
