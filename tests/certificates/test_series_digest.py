"""A certificate cites each series by the digest of its points taken when they were stored, so
building the body never re-reads every point of every burn-in curve."""

from __future__ import annotations

import pytest

from portal.certificates import evidence, export
from portal.certificates.payload import body_build
from portal.certificates.selectors import campaign_state
from portal.runs.models import Series, points_digest

pytestmark = pytest.mark.django_db


def _series_digest_of(campaign, hostname: str, item_key: str) -> str:
    body = body_build(state=campaign_state(campaign=campaign))
    node = next(n for n in body["nodes"] if n["hostname"] == hostname)
    record = next(export.node_records([node]))
    (result,) = [r for r in record["results"] if r["item_key"] == item_key]
    assert record == next(export.node_records([node])) and evidence.digest(record) == node["evidence_sha256"]
    return str(result["series"])


def test_it_digests_the_points_when_a_series_is_stored() -> None:
    assert points_digest([0, 1.5], [70.25, float("nan")]) == points_digest((0, 1.5), (70.25, float("nan")))
    assert points_digest([0, 1], [70, 71]) != points_digest([0, 1], [70, 71.0000001])


def test_the_body_changes_with_the_points_without_loading_them(campaign, campaign_run) -> None:
    run = campaign_run()
    result = run.results.get(node__hostname="n01", item_key="ecc-health")
    series = Series(result=result, name="temp_gpu", unit="C", gpu=0, x=[0, 1, 2], y=[40.0, 41.5, 42.0])
    series.save()
    assert series.points_sha256 == points_digest([0, 1, 2], [40.0, 41.5, 42.0])
    before = _series_digest_of(campaign, "n01", "ecc-health")
    series.y = [40.0, 41.5, 99.0]
    series.save(update_fields=["y"])
    assert Series.objects.get(pk=series.pk).points_sha256 == points_digest([0, 1, 2], [40.0, 41.5, 99.0])
    assert _series_digest_of(campaign, "n01", "ecc-health") != before


def test_it_digests_a_series_stored_without_one(campaign, campaign_run) -> None:
    run = campaign_run()
    result = run.results.get(node__hostname="n01", item_key="ecc-health")
    Series.objects.bulk_create([Series(result=result, name="temp_gpu", gpu=0, x=[0, 1], y=[40.0, 41.0])])
    assert Series.objects.get().points_sha256 == ""  # bulk_create skips save(): an older row, say
    with_blank = _series_digest_of(campaign, "n01", "ecc-health")
    Series.objects.get().save()
    assert _series_digest_of(campaign, "n01", "ecc-health") == with_blank, "computed on the fly, the same digest"
