"""Query filters of the list endpoints (django-filter): `?status=fail&node=gpu001&check=ecc`."""

from __future__ import annotations

import django_filters as filters

from portal.certificates.models import Campaign, Certificate, CertificateVerdict
from portal.health.models import HealthState, HealthTransition, NodeHealth, Schedule
from portal.inventory.models import Cluster, Node
from portal.runs.models import CheckResult, Run, Series, Status

# Ids are 64-bit (BigAutoField): a larger number names nothing and is refused with a 400.
MAX_ID = 2**63 - 1


def _id(field: str, **kwargs: object) -> filters.NumberFilter:
    return filters.NumberFilter(field_name=field, min_value=1, max_value=MAX_ID, **kwargs)  # type: ignore[arg-type]


class ClusterFilter(filters.FilterSet):
    name = filters.CharFilter(lookup_expr="exact")
    customer = filters.CharFilter(lookup_expr="icontains")
    site = filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Cluster
        fields = ["name", "customer", "site", "profile", "scheduler"]


class NodeFilter(filters.FilterSet):
    cluster = _id("cluster_id")
    cluster_name = filters.CharFilter(field_name="cluster__name")
    hostname = filters.CharFilter()
    rack = filters.CharFilter()
    group = filters.CharFilter()

    class Meta:
        model = Node
        fields = ["cluster", "cluster_name", "hostname", "rack", "group"]


class RunFilter(filters.FilterSet):
    cluster = _id("cluster_id")
    plan = filters.CharFilter(field_name="plan__slug")
    status = filters.ChoiceFilter(choices=Status.choices)

    class Meta:
        model = Run
        fields = ["cluster", "plan", "status"]


class ResultFilter(filters.FilterSet):
    run = _id("run_id")
    node = filters.CharFilter(field_name="node__hostname", help_text="The node's hostname.")
    check = filters.CharFilter(field_name="item_key", help_text="The plan item's key, e.g. ecc.")
    kind = filters.CharFilter()
    status = filters.ChoiceFilter(choices=Status.choices)

    class Meta:
        model = CheckResult
        fields = ["run", "node", "check", "kind", "status"]


class SeriesFilter(filters.FilterSet):
    result = _id("result_id")
    name = filters.CharFilter()

    class Meta:
        model = Series
        fields = ["result", "name"]


class CampaignFilter(filters.FilterSet):
    cluster = _id("cluster_id")

    class Meta:
        model = Campaign
        fields = ["cluster"]


class CertificateFilter(filters.FilterSet):
    campaign = _id("campaign_id")
    verdict = filters.ChoiceFilter(choices=CertificateVerdict.choices)

    class Meta:
        model = Certificate
        fields = ["campaign", "verdict", "number"]


class NodeHealthFilter(filters.FilterSet):
    cluster = _id("node__cluster_id")
    node = filters.CharFilter(field_name="node__hostname")
    state = filters.ChoiceFilter(choices=HealthState.choices)

    class Meta:
        model = NodeHealth
        fields = ["cluster", "node", "state"]


class HealthTransitionFilter(filters.FilterSet):
    cluster = _id("node__cluster_id")
    node = filters.CharFilter(field_name="node__hostname")
    to_state = filters.ChoiceFilter(choices=HealthState.choices)

    class Meta:
        model = HealthTransition
        fields = ["cluster", "node", "to_state"]


class ScheduleFilter(filters.FilterSet):
    cluster = _id("cluster_id")

    class Meta:
        model = Schedule
        fields = ["cluster", "enabled"]
