"""What the API reads of campaigns, certificates, health and schedules, and the few campaign writes."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.catalog.models import TestPlan
from portal.certificates import selectors as cert_selectors
from portal.certificates.models import Campaign, Certificate
from portal.health.models import HealthTransition, NodeHealth, Schedule
from portal.inventory.models import Cluster

MAX_REASON = 4000  # what the evidence tables keep of a reason elsewhere (portal/runs/services.py)


class CampaignSerializer(serializers.ModelSerializer[Campaign]):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Campaign
        fields = ["id", "name", "cluster", "cluster_name", "plan", "created_at", "issue_requested_at", "issue_error"]
        read_only_fields = fields


class CellSerializer(serializers.Serializer[Any]):
    hostname = serializers.CharField()
    item_key = serializers.CharField()
    state = serializers.CharField()
    result_id = serializers.IntegerField(allow_null=True)
    run_id = serializers.IntegerField(allow_null=True)
    result_status = serializers.CharField()
    reason = serializers.CharField()


class CampaignStateSerializer(serializers.Serializer[Any]):
    counts = serializers.DictField(child=serializers.IntegerField())
    ready = serializers.BooleanField()
    blockers = serializers.ListField(child=serializers.CharField())
    active_runs = serializers.ListField(child=serializers.IntegerField())
    excluded = serializers.ListField(child=serializers.DictField(child=serializers.CharField()))
    open = CellSerializer(many=True)


class CampaignDetailSerializer(CampaignSerializer):
    runs = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField(help_text="Per node × check: settled or open, and what blocks issue.")

    class Meta(CampaignSerializer.Meta):
        fields = [*CampaignSerializer.Meta.fields, "runs", "state"]
        read_only_fields = fields

    def get_runs(self, campaign: Campaign) -> list[int]:
        return [run.pk for run in cert_selectors.campaign_runs(campaign=campaign)]

    @extend_schema_field(CampaignStateSerializer)
    def get_state(self, campaign: Campaign) -> dict[str, Any]:
        state = cert_selectors.campaign_state(campaign=campaign)
        return {
            "counts": state.counts,
            "ready": state.ready,
            "blockers": state.blockers,
            "active_runs": state.active_runs,
            "excluded": [{"hostname": e.node.hostname, "reason": e.reason} for e in state.excluded],
            "open": CellSerializer(state.open_cells, many=True).data,
        }


class CampaignCreateSerializer(serializers.Serializer[Any]):
    """Open a campaign: the plan is snapshotted now (later plan edits do not move the goal)."""

    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all())
    plan = serializers.SlugRelatedField(slug_field="slug", queryset=TestPlan.objects.all())
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")  # Campaign.name


class CampaignRunAddSerializer(serializers.Serializer[Any]):
    run = serializers.IntegerField(min_value=1, max_value=2**63 - 1)


class ScopeSerializer(serializers.Serializer[Any]):
    hostname = serializers.CharField(max_length=253)
    reason = serializers.CharField(max_length=MAX_REASON)


class WaiverSerializer(serializers.Serializer[Any]):
    hostname = serializers.CharField(max_length=253)
    item_key = serializers.CharField(max_length=64)
    justification = serializers.CharField(max_length=MAX_REASON)


class DoneSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()


class SignatorySerializer(serializers.Serializer[Any]):
    side = serializers.CharField(help_text="vendor or customer")
    name = serializers.CharField(help_text="The signer's full name as the certificate shows it (else the username).")
    organisation = serializers.CharField(help_text="The signer's organisation when they signed ('' if none was set).")
    signed_at = serializers.DateTimeField()


class CertificateSerializer(serializers.ModelSerializer[Certificate]):
    revoked = serializers.BooleanField(read_only=True)
    signatures = SignatorySerializer(many=True, read_only=True, help_text="Who signed, for which side, and when.")

    class Meta:
        model = Certificate
        fields = [
            "id",
            "number",
            "campaign",
            "issued_at",
            "verdict",
            "sha256",
            "key_fingerprint",
            "revoked",
            "signatures",
        ]
        read_only_fields = fields


class VerifyRequestSerializer(serializers.Serializer[Any]):
    pdf = serializers.FileField(help_text="The certificate PDF to verify.")


class VerifyHardwareRequestSerializer(VerifyRequestSerializer):
    cluster = serializers.CharField(help_text="The cluster whose nodes are read again over SSH.")


class VerdictSerializer(serializers.Serializer[Any]):
    status = serializers.CharField(help_text="valid, tampered, unknown key, not a certificate or revoked.")
    detail = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True, help_text="What `kiln verify` would exit with.")
    fingerprint = serializers.CharField()
    notes = serializers.ListField(child=serializers.CharField())
    payload = serializers.DictField(allow_null=True, help_text="The sealed payload, when one was found.")
    time = serializers.DictField(
        child=serializers.CharField(allow_blank=True),
        help_text="When the PDF was signed: `time` (ISO 8601), `source` (`timestamp authority`: an RFC 3161 "
        "timestamp this site trusts, by `tsa`; or `portal clock`), `note`. Empty when the signature was not read.",
    )


class HardwareVerdictSerializer(VerdictSerializer):
    hardware = serializers.DictField(
        help_text="The sealed parts against the live nodes (as `kiln verify --against --json`): differences "
        "(swapped, changed, missing, extra), could_not_tell, notes, nodes_compared, parts_compared."
    )


class NodeHealthSerializer(serializers.ModelSerializer[NodeHealth]):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    cluster = serializers.IntegerField(source="node.cluster_id", read_only=True)

    class Meta:
        model = NodeHealth
        fields = ["id", "node", "hostname", "cluster", "state", "reason", "since", "last_run", "checked_at"]
        read_only_fields = fields


class HealthTransitionSerializer(serializers.ModelSerializer[HealthTransition]):
    hostname = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = HealthTransition
        fields = ["id", "node", "hostname", "run", "from_state", "to_state", "reason", "sweep", "created_at"]
        read_only_fields = fields


class ScheduleSerializer(serializers.ModelSerializer[Schedule]):
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    last_fire = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = Schedule
        fields = ["id", "name", "cluster", "plan", "node_set", "crontab", "enabled", "created_at", "last_fire"]
        read_only_fields = fields
