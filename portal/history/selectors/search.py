"""Result search: results matching validated filters, and the check names the form suggests."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet
from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce

from portal.history.selectors.metrics import group_result_ids
from portal.inventory.models import Cluster
from portal.runs.models import CheckResult, Run, Scope


def check_names() -> list[str]:
    """Check keys and kinds, for the search form's suggestions."""
    from portal.catalog.models import CheckDefinition

    pairs = CheckDefinition.objects.values_list("slug", "kind")
    return sorted({name for pair in pairs for name in pair})


@dataclass
class ResultFilter:
    """Validated search filters (see views.ResultSearchForm); empty fields do not filter."""

    cluster: Cluster | None = None
    nodes: NodeSet | None = None
    check: str = ""
    status: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    run: Run | None = None


def results_search(*, filters: ResultFilter) -> QuerySet[CheckResult]:
    """Results matching the filters, newest first. `at` is when the result finished (its start, or its
    run's creation, while it has not). A node set also finds the group results spanning those nodes."""
    qs = CheckResult.objects.annotate(at=Coalesce("finished_at", "started_at", "run__created_at"))
    if filters.run is not None:
        qs = qs.filter(run=filters.run)
    if filters.cluster is not None:
        qs = qs.filter(run__cluster=filters.cluster)
    if filters.check:
        qs = qs.filter(Q(item_key=filters.check) | Q(kind=filters.check))
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.since:
        qs = qs.filter(at__gte=filters.since)
    if filters.until:
        qs = qs.filter(at__lt=filters.until)
    if filters.nodes is not None:
        hostnames = list(filters.nodes)
        group_ids = group_result_ids(hostnames=hostnames, groups=qs)
        qs = qs.filter(Q(node__hostname__in=hostnames, scope=Scope.NODE) | Q(id__in=group_ids))
    return qs.select_related("run", "run__cluster", "node").order_by("-at", "-id")
