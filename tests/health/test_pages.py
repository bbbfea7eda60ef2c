"""Health pages: login and roles on each, and what the dashboard shows."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.health.models import ClusterHealthSettings
from tests.health.helpers import finish
from tests.portal.helpers import add_measurement

pytestmark = pytest.mark.django_db

VIEWER_PAGES = [
    ("health:overview", []),
    ("health:schedules", []),
    ("health:cluster", ["c1"]),
    ("health:deliveries", ["c1"]),
]
OPERATOR_PAGES = [("health:schedule_create", []), ("health:settings", ["c1"]), ("health:schedule_edit", [1])]


@pytest.mark.parametrize(("name", "args"), VIEWER_PAGES + OPERATOR_PAGES)
def test_it_redirects_anonymous_users_to_login(client, cluster, name, args) -> None:
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize(("name", "args"), VIEWER_PAGES + OPERATOR_PAGES)
def test_it_refuses_users_without_a_role(client, cluster, make_user, name, args) -> None:
    client.force_login(make_user("nobody"))
    assert client.get(reverse(name, args=args)).status_code == 403


@pytest.mark.parametrize(("name", "args"), OPERATOR_PAGES)
def test_it_refuses_viewers_the_operator_pages(client, cluster, make_user, name, args) -> None:
    client.force_login(make_user("v", "viewer"))
    assert client.get(reverse(name, args=args)).status_code == 403


def test_it_refuses_viewers_schedule_changes(client, cluster, make_user, quick_plan) -> None:
    from portal.health.services import schedule_create

    schedule = schedule_create(name="s", cluster=cluster, plan=quick_plan, crontab="0 * * * *")
    client.force_login(make_user("v", "viewer"))
    assert client.post(reverse("health:schedule_delete", args=[schedule.pk])).status_code == 403
    assert client.post(reverse("health:schedule_toggle", args=[schedule.pk]), {"enabled": "0"}).status_code == 403
    assert client.get(reverse("health:schedule_delete", args=[schedule.pk])).status_code in (403, 405)


def test_it_shows_counts_failing_nodes_and_transitions(
    client, cluster, make_user, make_run, django_capture_on_commit_callbacks
) -> None:
    for value in (1, 4, 8):
        run = make_run(cluster)
        add_measurement(
            run.results.get(node__hostname="n03", item_key="ecc-health"), "ecc_aggregate_corrected", value=value, gpu=1
        )
        finish(run, {"n02": ("fail", "GPU 3: <b>uncorrectable</b> ECC")}, django_capture_on_commit_callbacks)
    client.force_login(make_user("v", "viewer"))
    page = client.get(reverse("health:cluster", args=["c1"])).content.decode()
    assert "1 failed" in page and "3 healthy" in page
    assert "GPU 3: &lt;b&gt;uncorrectable&lt;/b&gt; ECC" in page and "<b>uncorrectable" not in page
    assert "n02: unknown → failed" in page
    assert "n03</b>: correctable ECC climbing on GPU 1: 1 → 4 → 8 errors" in page
    assert "last 5 results of that check that passed or warned" in page  # the rule, not where it is coded
    overview = client.get(reverse("health:overview")).content.decode()
    assert 'href="/health/clusters/c1/"' in overview
    assert "(1 failed or unreachable)" in overview and " out)" not in overview  # "(1 out)" said nothing


def test_a_node_page_shows_its_health_transitions_and_scheduler_actions(
    client, cluster, make_user, make_run, django_capture_on_commit_callbacks
) -> None:
    cluster.scheduler = "slurm"
    cluster.save()
    ClusterHealthSettings.objects.create(cluster=cluster, hook_mode="dry_run")
    client.force_login(make_user("v", "viewer"))
    url = reverse("history:node_detail", args=["c1", "n02"])
    assert "Not judged yet" in client.get(url).content.decode()
    capture = django_capture_on_commit_callbacks
    failed = finish(make_run(cluster), {"n02": ("fail", "GPU 3: uncorrectable ECC")}, capture)
    recovered = finish(make_run(cluster), capture=capture)
    page = client.get(url).content.decode()
    assert '<span class="badge green">healthy</span>' in page
    table = page[page.index('id="health-transitions"') :]
    assert table.index(f"run #{recovered.pk}") < table.index(f"run #{failed.pk}"), "newest first"
    assert "GPU 3: uncorrectable ECC" in table
    assert "scontrol update nodename=n02 state=drain" in page and "dry run" in page
    other = client.get(reverse("history:node_detail", args=["c1", "n01"])).content.decode()
    assert "uncorrectable" not in other and "scontrol" not in other


def test_it_saves_the_cluster_settings(client, cluster, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    data = {
        "alert_emails": "a@example.org",
        "webhook_url": "https://hooks.example.org/x",
        "webhook_format": "slack",
        "hook_mode": "dry_run",
        "controller_host": "slurmctl",
        "controller_port": 22,
        "controller_user": "root",
    }
    assert client.post(reverse("health:settings", args=["c1"]), data).status_code == 302
    cfg = ClusterHealthSettings.objects.get(cluster=cluster)
    assert (cfg.webhook_format, cfg.hook_mode, cfg.email_list) == ("slack", "dry_run", ["a@example.org"])


def test_its_dashboard_query_count_does_not_grow_with_nodes(
    client, cluster, make_user, make_run, django_assert_max_num_queries
) -> None:
    from portal.health.services import health_evaluate_run
    from portal.inventory.models import Node

    client.force_login(make_user("v", "viewer"))
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"x{i:03d}") for i in range(40))
    run = finish(make_run(cluster))
    run.results.filter(node__hostname__startswith="x").update(status="fail", reason="bad")
    health_evaluate_run(run_id=run.pk)
    with django_assert_max_num_queries(25):
        assert client.get(reverse("health:cluster", args=["c1"])).status_code == 200
