"""Campaigns, certificates, health and schedules. Campaign writes go through the certificates
services, which enforce their own rules (open campaign, approver for waivers). There is no signing
endpoint: sign-off stays a human action in the browser."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db.models import Prefetch
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from portal import uploads
from portal.api import filters
from portal.api import serializers_evidence as api
from portal.certificates import hardware, services, verification
from portal.certificates.models import Campaign, Certificate, Signature
from portal.health import selectors as health_selectors
from portal.health.models import HealthTransition, NodeHealth, Schedule
from portal.inventory.models import Cluster, Node
from portal.roles import APPROVER, OPERATOR, VIEWER
from portal.runs.models import Run


class PDFRenderer(BaseRenderer):
    """Lets a client ask for `Accept: application/pdf`; an error is still written as JSON."""

    media_type = "application/pdf"
    format = "pdf"
    charset = None

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return data if isinstance(data, bytes) else json.dumps(data).encode()


class CampaignViewSet(viewsets.ReadOnlyModelViewSet[Campaign]):
    """Acceptance campaigns. Operators open them, add runs and take nodes out of scope; approvers
    waive. Signing stays in the browser."""

    queryset = Campaign.objects.select_related("cluster", "plan").order_by("-created_at", "-id")
    filterset_class = filters.CampaignFilter
    ordering_fields = ["created_at", "name", "id"]
    action_roles = {"waive": APPROVER}

    def get_serializer_class(self) -> Any:
        return api.CampaignDetailSerializer if self.action == "retrieve" else api.CampaignSerializer

    def _done(self, text: str) -> Response:
        return Response({"detail": text})

    @extend_schema(
        request=api.CampaignCreateSerializer, responses={201: api.CampaignDetailSerializer}, summary="Open a campaign"
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        form = api.CampaignCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        campaign = services.campaign_create(
            cluster=data["cluster"], plan=data["plan"], name=data["name"], user=request.user
        )
        return Response(api.CampaignDetailSerializer(campaign).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=api.CampaignRunAddSerializer, responses={200: api.DoneSerializer}, summary="Count a run")
    @action(detail=True, methods=["post"], url_path="add-run")
    def add_run(self, request: Request, pk: str | None = None) -> Response:
        campaign = self.get_object()
        form = api.CampaignRunAddSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        run = get_object_or_404(Run, pk=form.validated_data["run"])
        services.campaign_run_add(campaign=campaign, run=run, user=request.user)
        return self._done(f"Run #{run.pk} added.")

    @extend_schema(request=api.ScopeSerializer, responses={200: api.DoneSerializer}, summary="Take a node out of scope")
    @action(detail=True, methods=["post"])
    def scope(self, request: Request, pk: str | None = None) -> Response:
        campaign = self.get_object()
        form = api.ScopeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        node = get_object_or_404(Node, cluster=campaign.cluster, hostname=form.validated_data["hostname"])
        services.node_scope_remove(
            campaign=campaign, node=node, reason=form.validated_data["reason"], user=request.user
        )
        return self._done(f"{node.hostname} is out of scope.")

    @extend_schema(request=api.WaiverSerializer, responses={200: api.DoneSerializer}, summary="Waive a failed item")
    @action(detail=True, methods=["post"])
    def waive(self, request: Request, pk: str | None = None) -> Response:
        campaign = self.get_object()
        form = api.WaiverSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        services.waiver_grant(
            campaign=campaign,
            hostname=data["hostname"],
            item_key=data["item_key"],
            justification=data["justification"],
            user=request.user,
        )
        return self._done(f"Waived {data['hostname']} × {data['item_key']}.")


class CertificateViewSet(viewsets.ReadOnlyModelViewSet[Certificate]):
    """Issued certificates: list, download the PDF, verify an uploaded PDF."""

    queryset = (
        Certificate.objects.select_related("revocation")
        .prefetch_related(Prefetch("signatures", queryset=Signature.objects.order_by("id")))
        .defer("pdf", "payload")
        .order_by("-issued_at", "-id")
    )
    serializer_class = api.CertificateSerializer
    filterset_class = filters.CertificateFilter
    ordering_fields = ["issued_at", "number", "id"]
    # Reading a cluster's nodes again runs the inventory checks on them: an operator's act.
    action_roles = {"verify": VIEWER, "verify_hardware": OPERATOR}

    @extend_schema(
        responses={(200, "application/pdf"): OpenApiResponse(OpenApiTypes.BINARY, description="The sealed PDF.")}
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, PDFRenderer])
    def pdf(self, request: Request, pk: str | None = None) -> HttpResponse:
        certificate = get_object_or_404(Certificate.objects.only("number", "pdf"), pk=self.get_object().pk)
        response = HttpResponse(bytes(certificate.pdf), content_type="application/pdf")
        response["Content-Disposition"] = f'attachment; filename="{certificate.number}.pdf"'
        return response

    @extend_schema(
        request={"multipart/form-data": api.VerifyRequestSerializer},
        responses={
            200: api.VerdictSerializer,
            413: OpenApiResponse(description="The upload is larger than KILN_MAX_UPLOAD_MB."),
            429: OpenApiResponse(description="Too many verifications at once (yours or the site's): see Retry-After."),
        },
        summary="Verify a certificate PDF",
        description="The checks of the verify page and `kiln verify`: PDF signature, sealed payload, "
        "this site's keys, the first page against the evidence, revocations.",
    )
    @action(detail=False, methods=["post"], parser_classes=[MultiPartParser], filter_backends=[], pagination_class=None)
    def verify(self, request: Request) -> Response:
        form = api.VerifyRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        upload = form.validated_data["pdf"]
        if (refused := _too_large(upload)) is not None:
            return refused
        verdict = verification.certificate_verify(data=upload.read())  # within its slots (middleware)
        return Response(
            {
                "status": verdict.status,
                "detail": verdict.detail,
                "exit_code": verification.EXIT_CODES.get(verdict.status),
                "fingerprint": verdict.fingerprint,
                "notes": list(verdict.notes),
                "payload": verdict.payload,
                "time": verdict.time,
            }
        )

    @extend_schema(
        request={"multipart/form-data": api.VerifyHardwareRequestSerializer},
        responses={
            200: api.HardwareVerdictSerializer,
            400: OpenApiResponse(description="No such cluster, or the file is larger than KILN_MAX_UPLOAD_MB."),
            429: OpenApiResponse(description="Too many verifications at once (yours or the site's): see Retry-After."),
        },
        summary="Verify a certificate against the live nodes' hardware",
        description="`kiln verify FILE --against CLUSTER`: the certificate as `verify` checks it, then the "
        "serials, UUIDs, GUIDs and firmware it seals against what the cluster's nodes report now, read over "
        "SSH. `exit_code` 6: a part differs; 7: something could not be read.",
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="verify-hardware",
        parser_classes=[MultiPartParser],
        filter_backends=[],
        pagination_class=None,
    )
    def verify_hardware(self, request: Request) -> Response:
        form = api.VerifyHardwareRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        cluster = Cluster.objects.filter(name=form.validated_data["cluster"]).first()
        if cluster is None:
            return Response({"cluster": ["No cluster of that name."]}, status=status.HTTP_400_BAD_REQUEST)
        upload = form.validated_data["pdf"]
        if (refused := _too_large(upload)) is not None:
            return refused
        verdict = verification.certificate_verify(data=upload.read(), hardware=True)
        found = hardware.certificate_hardware_verify(verdict=verdict, cluster=cluster)
        code = verification.EXIT_CODES.get(verdict.status)
        payload = {k: v for k, v in (verdict.payload or {}).items() if k != "hardware"} if verdict.payload else None
        return Response(
            {
                "status": verdict.status,
                "detail": verdict.detail,
                "exit_code": found.exit_code if code == 0 else code,
                "fingerprint": verdict.fingerprint,
                "notes": list(verdict.notes),
                "payload": payload,
                "hardware": found.as_json(),
            }
        )


def _too_large(upload: Any) -> Response | None:
    """400 for a file over the upload limit (the upload handler answers 413 first; kept as a guard)."""
    if upload.size > uploads.file_limit():
        return Response(
            {"detail": f"The file is larger than {settings.KILN_MAX_UPLOAD_MB} MiB."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return None


class NodeHealthViewSet(viewsets.ReadOnlyModelViewSet[NodeHealth]):
    """Each node's current health state, with why and since when."""

    queryset = NodeHealth.objects.select_related("node").order_by("node__cluster_id", "node__hostname")
    serializer_class = api.NodeHealthSerializer
    filterset_class = filters.NodeHealthFilter
    ordering_fields = ["state", "since", "checked_at", "id"]


class HealthTransitionViewSet(viewsets.ReadOnlyModelViewSet[HealthTransition]):
    """Every change of a node's health state, newest first."""

    queryset = HealthTransition.objects.select_related("node").order_by("-created_at", "-id")
    serializer_class = api.HealthTransitionSerializer
    filterset_class = filters.HealthTransitionFilter
    ordering_fields = ["created_at", "id"]


class ScheduleViewSet(viewsets.ReadOnlyModelViewSet[Schedule]):
    """Scheduled health sweeps (read; they are edited on the health pages)."""

    serializer_class = api.ScheduleSerializer
    filterset_class = filters.ScheduleFilter
    ordering_fields = ["name", "created_at", "id"]

    def get_queryset(self) -> Any:
        return health_selectors.schedules()
