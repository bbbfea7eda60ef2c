"""Clusters and nodes. Thin: validate, then the inventory services write."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api import filters, serializers
from portal.inventory import services
from portal.inventory.models import Cluster, Node
from portal.runs import selectors as run_selectors


class ClusterViewSet(viewsets.ModelViewSet[Cluster]):
    """Clusters. Operators create, change and delete them; `transport` and `ssh_key_path` choose what
    runs on a Kiln host and are read-only except for superusers (portal/roles.py SUPERUSER_FIELDS)."""

    serializer_class = serializers.ClusterSerializer
    filterset_class = filters.ClusterFilter
    ordering_fields = ["name", "created_at", "customer", "site"]
    ordering = ["name"]

    def get_queryset(self) -> Any:
        return run_selectors.cluster_list().order_by("name")

    def perform_create(self, serializer: BaseSerializer[Cluster]) -> None:
        cluster = services.cluster_save(cluster=Cluster(), fields=dict(serializer.validated_data))
        serializer.instance = self.get_queryset().get(pk=cluster.pk)  # with its node count

    def perform_update(self, serializer: BaseSerializer[Cluster]) -> None:
        assert serializer.instance is not None
        cluster = services.cluster_save(cluster=serializer.instance, fields=dict(serializer.validated_data))
        serializer.instance = self.get_queryset().get(pk=cluster.pk)


class NodeViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet[Node]
):
    """Nodes: list and filter them; add or update many at once by node set (POST)."""

    queryset = Node.objects.select_related("cluster").order_by("cluster__name", "hostname")
    serializer_class = serializers.NodeSerializer
    filterset_class = filters.NodeFilter
    ordering_fields = ["hostname", "created_at", "rack", "group"]

    @extend_schema(
        request=serializers.NodesAddSerializer,
        responses={201: serializers.NodesAddedSerializer},
        summary="Add or update nodes by node set",
        description='e.g. `{"cluster": 1, "nodes": "gpu[001-064]", "address": "10.0.0.[1-64]"}`. Nodes that '
        "exist are updated, never duplicated; all or nothing.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        form = serializers.NodesAddSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        cluster, hostnames, addresses = data.pop("cluster"), data.pop("nodes"), data.pop("address", "")
        report = services.nodes_add(cluster=cluster, hostnames=hostnames, addresses=addresses, fields=data)
        return Response({"created": report.created, "updated": report.updated}, status=status.HTTP_201_CREATED)
