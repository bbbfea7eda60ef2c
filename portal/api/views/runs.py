"""Plans, check definitions, runs, results and their series. Runs start and stop through the runs
services; everything else here is read."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api import filters
from portal.api import serializers as api
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.runs import services
from portal.runs.models import CheckResult, Measurement, Run, Series


class PlanViewSet(viewsets.ReadOnlyModelViewSet[TestPlan]):
    queryset = TestPlan.objects.prefetch_related(
        Prefetch("items", queryset=TestPlanItem.objects.select_related("check_definition").order_by("order", "id"))
    ).order_by("slug")
    serializer_class = api.PlanSerializer
    lookup_field = "slug"
    lookup_value_converter = "slug"
    ordering_fields = ["slug", "name"]


class CheckDefinitionViewSet(viewsets.ReadOnlyModelViewSet[CheckDefinition]):
    queryset = CheckDefinition.objects.order_by("slug")
    serializer_class = api.CheckDefinitionSerializer
    lookup_field = "slug"
    lookup_value_converter = "slug"
    filterset_fields = ["kind", "builtin"]
    ordering_fields = ["slug", "name", "kind"]


class RunViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet[Run]):
    """Runs. POST starts one (operators): a plan on a node set of a cluster. Its detail carries the
    progress; its results are under /results/?run=ID."""

    queryset = Run.objects.select_related("cluster", "plan", "requested_by").order_by("-created_at", "-id")
    filterset_class = filters.RunFilter
    ordering_fields = ["created_at", "status", "id"]

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        return api.RunDetailSerializer if self.action in ("retrieve", "create") else api.RunSerializer

    @extend_schema(request=api.RunStartSerializer, responses={201: api.RunDetailSerializer}, summary="Start a run")
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        form = api.RunStartSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        cluster = form.validated_data["cluster"]
        nodes = services.nodes_select(cluster=cluster, node_set=form.validated_data["nodes"])
        run = services.run_start(
            cluster=cluster, plan=form.validated_data["plan"], nodes=nodes, requested_by=request.user
        )
        return Response(api.RunDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=None,
        responses={200: inline_serializer("RunCancelled", {"cancelled": serializers.IntegerField()})},
        summary="Cancel every unfinished check of a run",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        count = services.run_cancel(run=run, reason=f"cancelled by {request.user.get_username()} (API)")
        return Response({"cancelled": count})


class ResultViewSet(viewsets.ReadOnlyModelViewSet[CheckResult]):
    """Check results with their measurements; filter by `run`, `node`, `check`, `kind`, `status`."""

    queryset = (
        CheckResult.objects.select_related("node")
        .defer("stdout", "stderr", "stdout_raw", "stderr_raw")
        .prefetch_related(Prefetch("measurements", queryset=Measurement.objects.order_by("id")))
        .order_by("run_id", "node__hostname", "position", "id")
    )
    serializer_class = api.ResultSerializer
    filterset_class = filters.ResultFilter
    ordering_fields = ["id", "status", "started_at", "finished_at", "duration_s"]


class SeriesViewSet(viewsets.ReadOnlyModelViewSet[Series]):
    """Telemetry and curves of a result (`?result=ID`); the detail carries every point."""

    queryset = Series.objects.order_by("result_id", "name", "gpu", "id")
    filterset_class = filters.SeriesFilter
    ordering_fields = ["id", "name", "gpu"]

    def get_queryset(self) -> Any:
        queryset = super().get_queryset()
        return queryset if self.action == "retrieve" else queryset.defer("x_packed", "y_packed", "view_packed")

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        return api.SeriesPointsSerializer if self.action == "retrieve" else api.SeriesSerializer
