"""One date format on every page: ISO 8601 with the zone (pages used to mix "Dec. 1, 2026,
12:56 p.m." and ISO)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

import pytest
from django.template import Context, Template
from django.urls import reverse

from portal.runs.models import Status

ENGLISH_DATE = re.compile(r"\b(?:a\.m\.|p\.m\.|noon|midnight|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\.? \d)")
ISO_WITH_ZONE = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? UTC\b")


def render(text: str, **context: object) -> str:
    return Template("{% load kiln %}" + text).render(Context(context))


def test_the_when_filter_writes_iso_8601_with_the_zone() -> None:
    at = datetime(2026, 12, 1, 12, 56, 3, tzinfo=UTC)
    assert render("{{ at|when }}", at=at) == "2026-12-01 12:56 UTC"
    assert render('{{ at|when:"s" }}', at=at) == "2026-12-01 12:56:03 UTC"
    assert render("{{ at|when }}", at="2026-12-01T12:56:03+00:00") == "2026-12-01 12:56 UTC"  # a payload's string
    assert render('{{ at|when|default:"never" }}', at=None) == "never"
    assert render("{{ at|when }}", at=date(2026, 12, 1)) == "2026-12-01"


def test_a_datetime_printed_without_a_filter_reads_the_same() -> None:
    at = datetime(2026, 12, 1, 12, 56, 3, tzinfo=UTC)
    assert render("{{ at }}", at=at) == "2026-12-01 12:56:03 UTC"  # not "Dec. 1, 2026, 12:56 p.m."
    assert render("{{ at|date }}", at=at) == "2026-12-01"


@pytest.mark.django_db
def test_the_main_pages_write_dates_one_way(client, cluster, make_user, make_run) -> None:
    from django.utils import timezone

    first, second = make_run(cluster), make_run(cluster)
    for run in (first, second):
        run.status, run.started_at, run.finished_at = Status.PASS, timezone.now(), timezone.now()
        run.save()
    client.force_login(make_user("op", "operator"))
    pages = [
        reverse("inventory:cluster_detail", args=[cluster.name]),
        reverse("runs:run_detail", args=[second.pk]),
        reverse("history:cluster_runs", args=[cluster.name]),
        reverse("history:node_detail", args=[cluster.name, "n01"]),
        f"{reverse('history:run_compare')}?a={second.pk}&b={first.pk}",
        reverse("health:cluster", args=[cluster.name]),
    ]
    for url in pages:
        page = client.get(url).content.decode()
        assert ENGLISH_DATE.findall(page) == [], url
        assert ISO_WITH_ZONE.search(page), f"{url} shows no date"
