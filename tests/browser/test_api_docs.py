"""The REST API's documentation pages and the API tokens page in Chromium, under the portal's
Content-Security-Policy: Swagger UI and Redoc render the schema from the app's own copies (the
`page` fixture fails on any CSP report, JavaScript error or request that leaves the app)."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import LOCAL_URL, csp_violations, log_in

REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def test_it_renders_swagger_ui_and_redoc_under_the_policy(live_server, page, shot, make_user) -> None:
    make_user("vera", "viewer")
    log_in(page, live_server.url, "vera")
    page.goto(f"{live_server.url}/api/v1/docs/")
    page.wait_for_selector(".opblock-tag", timeout=30_000)  # the operations, read from /api/v1/schema/
    assert page.locator(".opblock").count() >= 30
    assert "no signing endpoint" in page.locator(".info").inner_text().lower()
    page.locator(".opblock-summary-path", has_text="/api/v1/runs/").first.click()  # Swagger UI works
    shot("swagger-ui")


def test_it_renders_redoc_with_nothing_leaving_the_app(live_server, browser_context, make_user) -> None:
    """Redoc's bundle always draws a "Redocly" logo from cdn.redoc.ly in its menu: the policy's
    img-src 'self' blocks it before it is sent, and that is the one thing it blocks (not the
    `page` fixture, which fails on any attempt)."""
    make_user("vera", "viewer")
    page = browser_context.new_page()
    console: list[str] = []
    failed: dict[str, str] = {}
    errors: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
    page.on("requestfailed", lambda r: failed.__setitem__(r.url, r.failure or ""))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, live_server.url, "vera")
    page.goto(f"{live_server.url}/api/v1/redoc/")
    # Redoc draws the whole schema in the browser: ~2 s alone, past 30 s beside a loaded CI run.
    page.wait_for_selector("h1:has-text('Kiln REST API')", timeout=90_000)
    page.wait_for_selector("h2:has-text('Start a run')", timeout=90_000)  # an operation, drawn
    outside = {url: why for url, why in failed.items() if not LOCAL_URL.match(url)}
    assert set(outside) <= {REDOCLY_LOGO}, outside
    assert all("csp" in why.lower() for why in outside.values()), outside
    assert all(REDOCLY_LOGO in m or "img-src" in m for m in csp_violations(console)), console
    assert not errors
    page.close()


def test_it_shows_a_new_token_once_on_the_page(live_server, page, shot, make_user) -> None:
    make_user("olga", "operator")
    log_in(page, live_server.url, "olga")
    page.get_by_role("link", name="API tokens").click()
    page.wait_for_url(re.compile(r"/account/tokens/$"))
    page.fill("input[name=name]", "laptop")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#token-secret").inner_text().strip()
    assert secret.startswith("kiln_")
    shot("token-created")
    page.goto(f"{live_server.url}/account/tokens/")  # a later visit: the secret is gone
    assert secret not in page.content()
    page.get_by_role("button", name="Revoke").click()
    page.wait_for_selector("text=revoked")
