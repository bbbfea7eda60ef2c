"""One reverse() for many ids gives what reverse() gives for each."""

from __future__ import annotations

from django.urls import reverse

from portal.urlmaker import url_maker


def test_it_makes_the_same_urls_as_reverse() -> None:
    result_url = url_maker("runs:result_detail")
    for pk in (1, 42, 10**12):
        assert result_url(pk) == reverse("runs:result_detail", args=[pk])
    assert url_maker("runs:run_detail")(7) == reverse("runs:run_detail", args=[7])
