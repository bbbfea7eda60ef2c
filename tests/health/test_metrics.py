"""/metrics: bearer token, Prometheus exposition parsed by prometheus_client's own parser."""

from __future__ import annotations

import pytest
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from tests.health.helpers import finish
from tests.portal.helpers import add_measurement

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(settings) -> str:
    settings.KILN_METRICS_TOKEN = "s3cret-token"
    return "s3cret-token"


def test_it_needs_a_bearer_token_and_never_redirects_to_login(client, token) -> None:
    response = client.get(reverse("health:metrics"))
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert client.get(reverse("health:metrics"), HTTP_AUTHORIZATION="Bearer wrong").status_code == 403


def test_it_is_off_without_a_configured_token(client, settings) -> None:
    settings.KILN_METRICS_TOKEN = ""
    assert client.get(reverse("health:metrics"), HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_it_exports_health_and_latest_measurements(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    old = make_run(cluster)
    add_measurement(
        old.results.get(node__hostname="n01", item_key="ecc-health"), "ecc_aggregate_corrected", value=1, gpu=2
    )
    finish(old, capture=django_capture_on_commit_callbacks)
    run = make_run(cluster)
    ecc = run.results.get(node__hostname="n01", item_key="ecc-health")
    add_measurement(ecc, "ecc_aggregate_corrected", value=7, gpu=2)
    add_measurement(ecc, "ecc_volatile_uncorrected", value=0, gpu=2)
    finish(run, {"n02": ("fail", "GPU 3 ECC")}, django_capture_on_commit_callbacks)
    response = client.get(reverse("health:metrics"), HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    state = {(s.labels["node"], s.labels["state"]): s.value for s in families["kiln_node_health_state"].samples}
    assert state[("n02", "failed")] == 1.0 and state[("n02", "healthy")] == 0.0 and state[("n01", "healthy")] == 1.0
    ecc_samples = {
        (s.labels["node"], s.labels["gpu"], s.labels["counter"]): s.value
        for s in families["kiln_gpu_ecc_errors"].samples
    }
    assert ecc_samples == {("n01", "2", "aggregate_corrected"): 7.0, ("n01", "2", "volatile_uncorrected"): 0.0}
    assert all(s.labels["cluster"] == "c1" for s in families["kiln_gpu_ecc_errors"].samples)
    assert "kiln_node_health_checked_timestamp_seconds" in families


def test_its_query_count_does_not_grow_with_nodes(
    client, token, cluster, make_run, django_assert_max_num_queries
) -> None:
    from portal.inventory.models import Node

    finish(make_run(cluster))
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"x{i:03d}") for i in range(50))
    with django_assert_max_num_queries(8):
        assert client.get(reverse("health:metrics"), HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
