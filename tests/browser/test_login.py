"""Log in through the form, as a person would; the app's own CSS and htmx load (nothing from a CDN)."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def test_it_logs_in_through_the_login_form(live_server, page, shot, make_user) -> None:
    make_user("oscar", "operator")
    assets: list[tuple[str, int]] = []
    page.on("response", lambda r: assets.append((r.url, r.status)))

    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "oscar")
    page.fill("input[name=password]", "not-his-password")
    page.click("button[type=submit]")
    assert page.locator("main").inner_text().count("enter a correct username and password") == 1
    shot("wrong-password")

    log_in(page, live_server.url, "oscar", shot)
    shot("cluster-list")
    assert page.locator("header").get_by_text("oscar", exact=True).is_visible()
    assert page.get_by_role("heading", level=1).inner_text().strip() == "Clusters"
    assert page.locator("input[name=password]").count() == 0

    # The styles and htmx are served by the app itself (WhiteNoise, from the static finders), and
    # took effect; the page fixture also fails the test on any request that leaves the app.
    served = {re.sub(r"^https?://[^/]+", "", url): status for url, status in assets}
    assert served.get("/static/kiln/kiln.css") == 200, served
    assert served.get("/static/kiln/htmx.min.js") == 200, served
    assert page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor") == "rgb(36, 41, 47)"
    assert page.evaluate("typeof window.htmx") == "object"
