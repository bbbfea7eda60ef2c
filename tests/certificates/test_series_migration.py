"""Migration runs 0006 packs the jsonb points of every series and unpacks them again, the series of
an issued certificate included: their points and digests come through unchanged both ways, and the
triggers that freeze certified evidence are back on afterwards."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from portal.certificates import immutability, services
from portal.certificates.models import CertifiedResult
from portal.runs.models import Series, points_digest

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = ("runs", "0007_run_metric")  # the migration before packed series
POINTS = {
    ("temp_gpu", 0): ([0.0, 1.006, 2.012], [60.0, None, 61.0]),
    ("busbw", None): ([1024, 1 << 20], [1.5, 480.25]),
}


@pytest.fixture
def flushable(transactional_db):
    """SQLite empties the tables after the test with DELETE, which the triggers refuse once a
    certificate exists: they go first (the flush's post_migrate installs them again)."""
    yield
    if connection.vendor == "sqlite":
        immutability.uninstall(connection)


def test_certified_series_keep_their_points_and_digests_both_ways(flushable, campaign, campaign_run, users) -> None:
    run = campaign_run()
    result = run.results.get(node__hostname="n01", item_key="ecc-health")
    for (name, gpu), (x, y) in POINTS.items():
        Series(result=result, name=name, gpu=gpu, x=x, y=y).save()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    services.certificate_issue(campaign_id=campaign.pk)
    assert CertifiedResult.objects.filter(result=result).exists()
    digests = {(s.name, s.gpu): s.points_sha256 for s in Series.objects.all()}
    assert digests == {key: points_digest(x, y) for key, (x, y) in POINTS.items()}

    try:
        call_command("migrate", *BEFORE, verbosity=0)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps.get_model("runs", "Series")
        back = {(s.name, s.gpu): (s.x, s.y, s.points_sha256) for s in old.objects.all()}
        assert {k: (json.dumps(x), json.dumps(y)) for k, (x, y, _) in back.items()} == {
            k: (json.dumps(x), json.dumps(y)) for k, (x, y) in POINTS.items()
        }
        assert {k: digest for k, (_, _, digest) in back.items()} == digests
    finally:
        call_command("migrate", verbosity=0)

    for s in Series.objects.all():
        x, y = POINTS[s.name, s.gpu]
        assert (json.dumps(s.x), json.dumps(s.y), s.count) == (json.dumps(x), json.dumps(y), len(y))
        assert s.points_sha256 == digests[s.name, s.gpu] == points_digest(s.x, s.y)
    with pytest.raises(IntegrityError, match="a series of a certified result"), transaction.atomic():
        Series.objects.filter(result=result).update(labels={"edited": "after the migration"})
