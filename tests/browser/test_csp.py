"""The Content-Security-Policy in Chromium: what it blocks is reported (so the `page` fixture's check can
fail), and the pages no other browser test opens work under it: the admin, the lockout page, and a
confirm dialog that used to be an inline onclick."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import csp_violations, log_in, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture
def cluster(live_server):
    from portal.inventory.models import Cluster, Node

    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"n{i:02d}") for i in range(1, 5))
    return cluster


def test_it_blocks_and_reports_an_inline_script(live_server, browser_context, make_user) -> None:
    make_user("vera", "viewer")
    page = browser_context.new_page()  # not the `page` fixture: this page is meant to see a violation
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    log_in(page, live_server.url, "vera")
    page.evaluate(
        """() => {
          const s = document.createElement('script');
          s.textContent = 'window.__injected = 1';
          document.body.appendChild(s);
          const a = document.createElement('a');
          a.setAttribute('onclick', 'window.__clicked = 1');
          document.body.appendChild(a);
          a.click();
        }"""
    )
    found = wait_for(lambda: len(csp_violations(console)) >= 2 and csp_violations(console), 10, "CSP reports")
    assert page.evaluate("[window.__injected, window.__clicked]") == [None, None]
    assert any("script-src" in m for m in found), found
    page.close()


def test_it_runs_the_admin_under_the_policy(live_server, page, shot, make_user, cluster) -> None:
    from django.contrib.auth.models import User

    make_user("root", superuser=True)
    User.objects.filter(username="root").update(is_staff=True)
    log_in(page, live_server.url, "root")
    for path in (
        "/admin/",
        "/admin/inventory/cluster/",
        f"/admin/inventory/cluster/{cluster.pk}/change/",
        "/admin/inventory/node/?q=n0",
        "/admin/auth/user/add/",
        "/admin/axes/accessattempt/",
    ):
        response = page.goto(live_server.url + path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
    # The admin's own scripts ran: the change list's select-all checkbox ticks every row.
    page.goto(f"{live_server.url}/admin/inventory/node/")
    page.check("#action-toggle")
    assert page.locator("input.action-select:checked").count() == 4
    shot("admin-node-list")


def test_it_shows_the_lockout_page_after_10_failed_logins(live_server, page, shot, make_user) -> None:
    make_user("oscar", "operator")
    page.goto(f"{live_server.url}/login/")
    for _ in range(10):
        page.fill("input[name=username]", "oscar")
        page.fill("input[name=password]", "not-his-password")
        page.click("button[type=submit]")
        page.wait_for_load_state()
    assert page.get_by_role("heading", level=1).inner_text() == "Too many failed logins"
    assert "axes_reset_username" in page.locator("main").inner_text()
    shot("locked-out")
    page.get_by_role("link", name="Back to the login page").click()
    page.fill("input[name=username]", "oscar")
    page.fill("input[name=password]", "pw-oscar")
    page.click("button[type=submit]")
    assert page.get_by_role("heading", level=1).inner_text() == "Too many failed logins"


def test_it_asks_before_deleting_a_schedule(live_server, page, shot, make_user, cluster) -> None:
    from portal.catalog.models import TestPlan
    from portal.health import services
    from portal.health.models import Schedule

    quick = TestPlan.objects.get(slug="quick")
    services.schedule_create(name="nightly", cluster=cluster, plan=quick, crontab="0 2 * * *")
    make_user("otto", "operator")
    log_in(page, live_server.url, "otto")
    page.goto(f"{live_server.url}/health/schedules/")
    asked: list[str] = []

    def answer(dialog, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda d: answer(d, False))
    page.get_by_role("button", name="Delete").click()
    assert asked == ["Delete this schedule?"] and Schedule.objects.count() == 1
    page.once("dialog", lambda d: answer(d, True))
    page.get_by_role("button", name="Delete").click()
    page.wait_for_url(re.compile(r"/health/schedules/$"))
    wait_for(lambda: Schedule.objects.count() == 0, 10, "the schedule to be deleted")
    shot("schedule-deleted")
