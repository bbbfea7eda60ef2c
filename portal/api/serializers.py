"""What the API reads and writes. Writes are validated here, then done by the apps' services."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.models import ApiToken
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory import nodesets
from portal.inventory.models import Cluster, Node
from portal.roles import SUPERUSER_FIELDS
from portal.runs import cells as run_cells
from portal.runs import selectors as run_selectors
from portal.runs.models import CheckResult, Measurement, Run, Series

# Node sets and other free text a request names: the same bound as the pages' forms; nodesets.py
# refuses sets over KILN_MAX_NODESET nodes before expanding them.
MAX_TEXT = nodesets.MAX_TEXT
# The most GPUs one node may be expected to hold: 8 on an HGX board, 72 in an NVL72 rack seen as a node.
MAX_GPUS = 1024


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    node_count = serializers.IntegerField(read_only=True)
    acceptance_plan = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=TestPlan.objects.all(),
        required=False,
        allow_null=True,
        help_text="Slug of the plan the cluster is accepted with (first and preselected in the plan pickers).",
    )

    class Meta:
        model = Cluster
        fields = [
            "id", "name", "customer", "site", "profile", "transport", "ssh_user", "ssh_port", "ssh_key_path",
            "jump_host", "known_hosts", "scheduler", "queue", "threshold_overrides", "check_settings",
            "acceptance_plan", "check_overhead_s", "created_at", "node_count",
        ]  # fmt: skip
        read_only_fields = ["created_at"]

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is None or not request.user.is_superuser:
            for name in SUPERUSER_FIELDS["inventory.cluster"]:
                fields[name].read_only = True  # chooses what runs on a Kiln host: superusers only
        return fields


class NodeSerializer(serializers.ModelSerializer[Node]):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Node
        fields = [
            "id", "cluster", "cluster_name", "hostname", "address", "ssh_port", "rack", "position", "group",
            "serial", "expected_gpus", "host_key_fingerprint", "created_at",
        ]  # fmt: skip
        read_only_fields = fields


class NodesAddSerializer(serializers.Serializer[Any]):
    """Add or update nodes by node set; every node named gets the same optional fields."""

    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all())
    nodes = serializers.CharField(max_length=MAX_TEXT, help_text="A node set, e.g. gpu[001-064].")
    address = serializers.CharField(
        max_length=MAX_TEXT, required=False, allow_blank=True, help_text="One address, or a set as long as `nodes`."
    )
    ssh_port = serializers.IntegerField(min_value=1, max_value=65535, required=False, allow_null=True)
    rack = serializers.CharField(max_length=64, required=False, allow_blank=True)
    position = serializers.CharField(max_length=16, required=False, allow_blank=True)
    group = serializers.CharField(max_length=64, required=False, allow_blank=True)
    serial = serializers.CharField(max_length=128, required=False, allow_blank=True)
    expected_gpus = serializers.IntegerField(min_value=0, max_value=MAX_GPUS, required=False, allow_null=True)


class NodesAddedSerializer(serializers.Serializer[Any]):
    created = serializers.ListField(child=serializers.CharField())
    updated = serializers.ListField(child=serializers.CharField())


class CheckDefinitionSerializer(serializers.ModelSerializer[CheckDefinition]):
    class Meta:
        model = CheckDefinition
        fields = ["id", "slug", "name", "kind", "description", "params", "thresholds", "builtin"]
        read_only_fields = fields


class PlanItemSerializer(serializers.ModelSerializer[TestPlanItem]):
    check_slug = serializers.CharField(source="check_definition.slug", read_only=True)
    kind = serializers.CharField(source="check_definition.kind", read_only=True)

    class Meta:
        model = TestPlanItem
        fields = ["order", "check_slug", "kind", "param_overrides", "threshold_overrides"]
        read_only_fields = fields


class PlanSerializer(serializers.ModelSerializer[TestPlan]):
    items = PlanItemSerializer(many=True, read_only=True)

    class Meta:
        model = TestPlan
        fields = ["id", "slug", "name", "description", "builtin", "items"]
        read_only_fields = fields


class ProgressSerializer(serializers.Serializer[Any]):
    counts = serializers.DictField(child=serializers.IntegerField())
    total = serializers.IntegerField()
    done = serializers.IntegerField()
    percent = serializers.IntegerField()
    eta_s = serializers.FloatField(allow_null=True)


class RunSerializer(serializers.ModelSerializer[Run]):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, allow_null=True)

    class Meta:
        model = Run
        fields = [
            "id", "cluster", "cluster_name", "plan", "node_set", "status", "reason", "requested_by", "parent",
            "created_at", "started_at", "finished_at",
        ]  # fmt: skip
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    progress = serializers.SerializerMethodField(
        help_text="Checks by status, done/total, ETA (seconds): one per node × check, a multi-node result "
        "counted in each node it spans (as the run page shows them)."
    )

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "progress"]
        read_only_fields = fields

    @extend_schema_field(ProgressSerializer)
    def get_progress(self, run: Run) -> dict[str, Any]:
        # Counted as the run page, its triage and the runs list count (portal/runs/cells.py
        # RunCounts): per node × check, a multi-node result once in each node it spans.
        counts = run_cells.run_counts(run=run)
        return {
            "counts": counts.by_status,
            "total": counts.total,
            "done": counts.done,
            "percent": counts.percent,
            "eta_s": run_selectors.run_progress(run=run).eta_s if run.is_active else None,
        }


class RunStartSerializer(serializers.Serializer[Any]):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all())
    plan = serializers.SlugRelatedField(slug_field="slug", queryset=TestPlan.objects.all())
    nodes = serializers.CharField(
        max_length=MAX_TEXT, required=False, allow_blank=True, default="", help_text="A node set; empty: every node."
    )


class MeasurementSerializer(serializers.ModelSerializer[Measurement]):
    class Meta:
        model = Measurement
        fields = ["name", "value", "text", "unit", "gpu", "threshold", "ok", "labels"]
        read_only_fields = fields


class ResultSerializer(serializers.ModelSerializer[CheckResult]):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    check = serializers.CharField(source="item_key", read_only=True)
    measurements = MeasurementSerializer(many=True, read_only=True)

    class Meta:
        model = CheckResult
        fields = [
            "id", "run", "hostname", "scope", "node_set", "check", "kind", "status", "reason", "attribution",
            "attempt", "command", "exit_code", "started_at", "finished_at", "duration_s", "measurements",
        ]  # fmt: skip
        read_only_fields = fields


class SeriesSerializer(serializers.ModelSerializer[Series]):
    class Meta:
        model = Series
        fields = ["id", "result", "name", "unit", "x_unit", "gpu", "labels", "count", "points_sha256", "thinned_at"]
        read_only_fields = fields


class SeriesPointsSerializer(SeriesSerializer):
    x = serializers.ListField(child=serializers.JSONField(), read_only=True)
    y = serializers.ListField(child=serializers.FloatField(allow_null=True), read_only=True)

    class Meta(SeriesSerializer.Meta):
        fields = [*SeriesSerializer.Meta.fields, "x", "y"]
        read_only_fields = fields


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]


class TokenCreatedSerializer(TokenSerializer):
    secret = serializers.CharField(read_only=True, help_text="Shown this once; Kiln keeps only its hash.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "secret"]
