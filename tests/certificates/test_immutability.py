"""Evidence cited by an issued certificate cannot change, by any path: the ORM, bulk writes, raw SQL
and the admin all meet the same database triggers (portal/certificates/immutability.py).

Each refused write runs in its own atomic block: a refused statement aborts the enclosing
transaction on PostgreSQL, and the test goes on in the outer one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError

from portal.certificates import immutability, services
from portal.certificates.models import (
    AuditEvent,
    Campaign,
    CampaignRun,
    Certificate,
    CertifiedResult,
    Revocation,
    ScopeExclusion,
    Signature,
)
from portal.inventory.models import Cluster, Node
from portal.runs.models import CheckResult, Measurement, Run, Series


@pytest.fixture
def certified(issued) -> CheckResult:
    return CheckResult.objects.get(
        pk=CertifiedResult.objects.filter(
            certificate=issued, result__node__hostname="n02", result__item_key="ecc-health"
        ).values("result")[:1]
    )


@contextmanager
def refused(match: str = "kiln: ") -> Iterator[None]:
    """The write inside is refused by a trigger (in a savepoint, so the test goes on)."""
    with pytest.raises(IntegrityError, match=match), transaction.atomic():
        yield


def test_it_installs_every_trigger(db):
    assert immutability.installed(connection) == immutability.expected()


def test_it_refuses_to_edit_or_delete_a_certified_result(certified):
    certified.status = "pass"
    with refused("this result is evidence of an issued certificate"):
        certified.save()
    with refused():
        CheckResult.objects.filter(pk=certified.pk).update(status="pass")
    with refused():
        CheckResult.objects.bulk_update([certified], ["status"])
    with pytest.raises(ProtectedError):  # the ORM's own PROTECT; raw SQL meets the trigger (below)
        CheckResult.objects.filter(pk=certified.pk).delete()
    certified.refresh_from_db()
    assert certified.status == "fail"


def test_it_refuses_measurements_and_series_added_changed_or_deleted(certified):
    with refused("cannot be added"):
        Measurement.objects.bulk_create([Measurement(result=certified, name="late", value=1.0)])
    with refused():
        Measurement.objects.filter(result=certified).update(value=0)
    with refused("cannot be deleted"):
        Measurement.objects.filter(result=certified).delete()
    with refused("cannot be added"):
        Series.objects.create(result=certified, name="late", x=[0], y=[1])
    assert certified.measurements.get().value == 2.0


def test_it_refuses_moving_a_measurement_into_a_certified_result(certified, cluster, make_run):
    other = make_run(cluster).results.first()
    loose = Measurement.objects.create(result=other, name="loose", value=1.0)
    with refused():
        Measurement.objects.filter(pk=loose.pk).update(result=certified)


def test_it_refuses_raw_sql_too(certified, issued):
    for sql, args in [
        ("UPDATE runs_checkresult SET status = 'pass' WHERE id = %s", [certified.pk]),
        ("DELETE FROM runs_measurement WHERE result_id = %s", [certified.pk]),
        ("UPDATE certificates_certificate SET verdict = 'PASS' WHERE id = %s", [issued.pk]),
        ("DELETE FROM certificates_certifiedresult WHERE certificate_id = %s", [issued.pk]),
        ("DELETE FROM certificates_certificate WHERE id = %s", [issued.pk]),
        ("DELETE FROM runs_checkresult WHERE id = %s", [certified.pk]),
        ("DELETE FROM runs_run WHERE id = %s", [certified.run_id]),
        ("DELETE FROM inventory_node WHERE id = %s", [certified.node_id]),
        ("UPDATE inventory_node SET hostname = 'x' WHERE id = %s", [certified.node_id]),
        ("DELETE FROM certificates_auditevent", []),
    ]:
        with refused(), connection.cursor() as cursor:
            cursor.execute(sql, args)


def test_it_refuses_edits_of_a_certified_run(certified):
    run = Run.objects.get(pk=certified.run_id)
    for field, value in [("status", "cancelled"), ("plan_snapshot", {"items": []}), ("node_set", "n01")]:
        with refused("a run of a certified campaign"):
            Run.objects.filter(pk=run.pk).update(**{field: value})
    other_cluster = Cluster.objects.create(name="elsewhere")
    with refused():
        Run.objects.filter(pk=run.pk).update(cluster=other_cluster)
    with pytest.raises((ProtectedError, IntegrityError)), transaction.atomic():
        Run.objects.filter(pk=run.pk).delete()
    run.save()  # an UPDATE that changes nothing (a redelivered idempotent task) is let through


def test_it_refuses_to_rename_or_delete_a_cited_node_or_cluster(certified, cluster):
    node = Node.objects.get(pk=certified.node_id)
    with refused("cannot be renamed"):
        Node.objects.filter(pk=node.pk).update(hostname="renamed")
    with pytest.raises((ProtectedError, IntegrityError)), transaction.atomic():
        Node.objects.filter(pk=node.pk).delete()
    Node.objects.filter(pk=node.pk).update(rack="R9")  # other facts of a node may change after handover
    with refused("cluster with a certificate cannot be renamed"):
        Cluster.objects.filter(pk=cluster.pk).update(name="renamed")
    Cluster.objects.filter(pk=cluster.pk).update(site="Hall 8")
    fresh = Node.objects.create(cluster=cluster, hostname="n99")
    Node.objects.filter(pk=fresh.pk).update(hostname="n98")  # never cited: free to rename
    assert Node.objects.get(pk=node.pk).hostname == "n02"


def test_it_never_edits_or_deletes_a_certificate_or_its_citations(issued):
    with refused("append-only"):
        Certificate.objects.filter(pk=issued.pk).update(verdict="PASS")
    issued.charts_note = "edited"
    with refused():
        issued.save()
    with pytest.raises((ProtectedError, IntegrityError)), transaction.atomic():
        Certificate.objects.filter(pk=issued.pk).delete()
    with refused():
        CertifiedResult.objects.filter(certificate=issued).delete()
    assert Certificate.objects.get(pk=issued.pk).verdict == "PASS WITH WAIVERS"
    assert CertifiedResult.objects.filter(certificate=issued).count() == 8


def test_a_revocation_cannot_be_undone(issued, users):
    services.certificate_revoke(certificate=issued, reason="superseded", user=users["customer"])
    with refused():
        Revocation.objects.filter(certificate=issued).delete()
    with refused():
        Revocation.objects.filter(certificate=issued).update(reason="never mind")
    with pytest.raises(IntegrityError), transaction.atomic():
        Revocation.objects.create(certificate=issued, revoked_at=issued.issued_at, username="x", reason="again")
    assert Certificate.objects.select_related("revocation").get(pk=issued.pk).revoked


def test_it_keeps_evidence_of_a_revoked_certificate_frozen(issued, certified, users):
    services.certificate_revoke(certificate=issued, reason="superseded", user=users["customer"])
    with refused():
        CheckResult.objects.filter(pk=certified.pk).update(reason="edited")


def test_it_closes_the_campaign_of_a_certificate(issued, campaign, users, cluster, make_run):
    with pytest.raises(services.CampaignError, match="closed"):
        services.certificate_sign(campaign=campaign, user=users["vendor"])
    with pytest.raises(services.CampaignError, match="closed"):
        services.campaign_run_start(campaign=campaign, node_set="n01", user=users["operator"], enqueue=False)
    node = cluster.nodes.get(hostname="n03")
    with pytest.raises(services.CampaignError, match="closed"):
        services.node_scope_remove(campaign=campaign, node=node, reason="RMA", user=users["operator"])
    # Below the services, the database refuses the same.
    with refused("closed campaign"):
        ScopeExclusion.objects.create(campaign=campaign, node=node, reason="RMA")
    with refused("closed campaign"):
        CampaignRun.objects.create(campaign=campaign, run=make_run(cluster))
    with refused():
        Signature.objects.create(campaign=campaign, side="vendor", user=users["vendor"], name="x", body_sha256="0")
    with refused():
        Signature.objects.filter(campaign=campaign).update(withdrawn=True)
    with refused("campaign with a certificate"):
        Campaign.objects.filter(pk=campaign.pk).update(plan_snapshot={"items": []})
    assert Certificate.objects.count() == 1


def test_it_keeps_the_audit_log_append_only(issued):
    event = AuditEvent.objects.first()
    event.detail = "rewritten"
    with refused("append-only"):
        event.save()
    with refused():
        AuditEvent.objects.filter(pk=event.pk).delete()


def test_it_still_allows_edits_of_results_no_certificate_cites(issued, cluster, make_run):
    other = make_run(cluster)
    result = other.results.first()
    result.status = "pass"
    result.save()
    Measurement.objects.create(result=result, name="fine", value=1.0)
    assert Measurement.objects.filter(result=result).delete()[0] == 1
    Run.objects.filter(pk=other.pk).update(status="pass")


def test_it_answers_403_to_admin_edits_and_deletes_of_certified_evidence(certified, client, make_user):
    root = make_user("root", superuser=True)
    root.is_staff = True
    root.save()
    client.force_login(root)
    measurement = certified.measurements.get()
    response = client.post(f"/admin/runs/measurement/{measurement.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403 and b"cannot be deleted" in response.content
    run = Run.objects.get(pk=certified.run_id)
    response = client.post(f"/admin/runs/run/{run.pk}/change/", {"status": "pass", "node_set": "n01"})
    assert response.status_code in (200, 403) and Run.objects.get(pk=run.pk).status == run.status
    for url in (f"/admin/runs/run/{run.pk}/delete/", f"/admin/runs/checkresult/{certified.pk}/delete/"):
        response = client.post(url, {"post": "yes"})  # the admin's own PROTECT page, or the trigger's 403
        assert response.status_code == 403 or b"<title>Cannot delete" in response.content
    assert CheckResult.objects.filter(pk=certified.pk).exists() and Run.objects.filter(pk=run.pk).exists()
    assert Measurement.objects.get(pk=measurement.pk).value == 2.0
