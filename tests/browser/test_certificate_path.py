"""The whole handover path in the browser on the demo cluster (local transport,
simulated nodes), driven through the pages like a person.

An operator opens a campaign and runs it: demo03 (uncorrectable ECC) and demo06 (wrong driver) fail.
demo06 is re-imaged (its fault cleared) and the open nodes are re-run from the campaign page; demo03
still fails and the vendor's approver waives it with a justification. The vendor and the customer
approver each sign in their own login; the certificate PDF downloads and `kiln_verify` calls it valid.

No broker, no worker: the page's enqueue is caught and the test thread executes the run inline, the way
`kiln_run --inline` does (tests/certificates/test_acceptance_path.py does the same without a browser).
"""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from tests.browser.conftest import log_in, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page

# A verification takes seconds alone and has taken over the default 15 s beside the other test
# processes of a two-core machine; the server's own bound (KILN_VERIFY_WALL_S) is longer still.
VERIFY_TIMEOUT_MS = 90_000

pytestmark = [pytest.mark.browser]

WAIVER = "GPU 5 swap scheduled; customer accepts"
issuing: list[int] = []


@pytest.fixture
def demo(transactional_db: None, monkeypatch: pytest.MonkeyPatch, settings, tmp_path) -> list[tuple[int, list[int]]]:
    """The demo cluster, a two-check plan (fast), site keys, and the runs the pages start, caught
    instead of queued."""
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    settings.KILN_KEY_DIR = str(tmp_path / "keys")
    call_command("kiln_keys", "init", "--site", "Browser test site", stdout=StringIO())
    started: list[tuple[int, list[int]]] = []
    issuing.clear()
    # Called by the live server's thread once the page's transaction commits; the test thread runs it.
    monkeypatch.setattr("portal.runs.services._enqueue", lambda run_id, node_ids: started.append((run_id, node_ids)))
    # The certificate task the second signature queues: the test thread runs it (a worker would).
    monkeypatch.setattr(
        "portal.certificates.services.issuing._enqueue_issue", lambda campaign_id: issuing.append(campaign_id)
    )
    call_command("kiln_demo", stdout=StringIO())
    plan = TestPlan.objects.create(slug="handover", name="Handover (fast checks)")
    for order, slug in enumerate(["gpu-inventory", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return started


def _execute_started(started: list[tuple[int, list[int]]]) -> int:
    """Executes the run the page just started (as `kiln_run --inline` would) and returns its id."""
    from portal.execution.groups import execute_run_inline

    run_id, node_ids = wait_for(lambda: started[-1] if started else None, 15, "the page to start a run")
    started.clear()
    # One thread on SQLite: the live server shares its single in-memory connection.
    execute_run_inline(run_id=run_id, node_ids=node_ids, max_workers=1 if connection.vendor == "sqlite" else 8)
    return run_id


def _open_cells(page: Page) -> list[tuple[str, str, str]]:
    rows = page.locator("#open-items tr:has(td)")
    return [tuple(rows.nth(i).locator("td").all_inner_texts()[:3]) for i in range(rows.count())]


def _log_out(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    page.wait_for_load_state()


def _sign(page: Page, base_url: str, campaign_url: str, side: str) -> None:
    page.goto(base_url + campaign_url)
    button = page.locator("#sign-form").get_by_role("button", name=f"Sign for the {side} side")
    assert button.is_enabled(), "every in-scope node x check has a pass or a waiver"
    button.click()
    page.wait_for_url(f"**{campaign_url}")


def test_it_takes_a_cluster_to_a_signed_certificate_from_the_browser(
    demo, live_server, page, shot, make_user, tmp_path
) -> None:
    from testbed.sim import write_state

    make_user("olga", "operator")
    make_user("vera", "approver", "vendor")
    make_user("carl", "approver", "customer")
    base = live_server.url

    # 1. The operator opens a campaign for the demo cluster from the campaigns page.
    log_in(page, base, "olga", shot)
    page.get_by_role("link", name="Campaigns").click()
    page.wait_for_url("**/campaigns/")
    page.select_option("select[name=cluster]", "demo")
    page.select_option("select[name=plan]", "handover")
    page.fill("input[name=name]", "demo handover")
    shot("open-campaign")
    page.get_by_role("button", name="Open campaign").click()
    page.wait_for_url(re.compile(r"/campaigns/\d+/$"))
    campaign_url = re.search(r"/campaigns/\d+/$", page.url).group(0)
    assert page.locator("h1").inner_text() == "demo handover"
    shot("campaign-new")

    # 2. It starts the campaign's run on every node: demo03 and demo06 fail.
    page.fill("#campaign-run-form input[name=node_set]", "")
    page.locator("#campaign-run-form").get_by_role("button", name="Start run").click()
    page.wait_for_url(f"**{campaign_url}")
    first = _execute_started(demo)
    assert f"Run #{first} started" in page.locator("ul.messages").inner_text()
    page.reload()
    shot("first-run-failed")
    assert [(h, c, s) for h, c, s in _open_cells(page)] == [
        ("demo03", "ecc-health", "fail"),
        ("demo06", "gpu-inventory", "fail"),
    ]
    run_form_nodes = page.locator("#campaign-run-form input[name=node_set]")
    assert run_form_nodes.input_value() == "demo[03,06]", "the re-run is prefilled with the open nodes"

    # 3. demo06 is re-imaged (fault cleared); demo03's GPU still reports errors. Re-run the open nodes.
    write_state(settings.DATA_DIR / "demo" / "nodes" / "demo06" / "state", node="demo06")
    page.locator("#campaign-run-form").get_by_role("button", name="Start run").click()
    page.wait_for_url(f"**{campaign_url}")
    rerun = _execute_started(demo)
    assert rerun != first
    page.reload()
    shot("rerun-done")
    assert _open_cells(page) == [("demo03", "ecc-health", "fail")]
    assert page.locator("#open-items td.reason").inner_text().startswith(f"run #{rerun}:")
    assert page.locator("#sign-form").count() == 0, "the operator is no approver"
    _log_out(page)

    # 4. The vendor's approver waives demo03 with a justification, then signs.
    log_in(page, base, "vera")
    page.goto(base + campaign_url)
    row = page.locator("#open-items tr", has=page.locator("td", has_text="demo03"))
    row.locator("textarea[name=justification]").fill(WAIVER)
    shot("waive-demo03")
    row.get_by_role("button", name="Waive").click()
    page.wait_for_url(f"**{campaign_url}")
    assert "Waived demo03" in page.locator("ul.messages").inner_text()
    assert page.locator("#campaign-ready").is_visible()
    assert page.locator("#open-items").count() == 0
    _sign(page, base, campaign_url, "vendor")
    shot("vendor-signed")
    assert "the other side signs next" in page.locator("ul.messages").inner_text()
    assert "None issued yet" in page.locator("#certificates").inner_text()
    _log_out(page)

    # 5. The customer's approver signs in their own login: the certificate is issued by the task the
    # signature queued, and the page, polling, reloads with it.
    log_in(page, base, "carl")
    _sign(page, base, campaign_url, "customer")
    assert "the certificate is being issued" in page.locator("ul.messages").inner_text()
    assert page.locator("#issuing").is_visible()
    shot("certificate-issuing")
    campaign_id = wait_for(lambda: issuing[-1] if issuing else None, 15, "the signature to queue the certificate")
    from portal.certificates.tasks import certificate_issue_task

    number = certificate_issue_task.apply(args=[campaign_id]).get()
    assert number, "the task issued a certificate"
    cert_row = page.locator("#certificates tr", has=page.locator("td", has_text=number))
    cert_row.wait_for(timeout=15_000)  # htmx polls the banner, which reloads the page
    assert page.locator("#issuing").count() == 0
    shot("certificate-issued")
    assert "PASS WITH WAIVERS" in cert_row.inner_text()
    assert WAIVER in page.locator("#audit-log").inner_text()

    # 6. The PDF downloads and verifies.
    with page.expect_download() as download_info:
        cert_row.get_by_role("link", name="PDF", exact=True).click()
    download = download_info.value
    assert download.suggested_filename == f"{number}.pdf"
    pdf = tmp_path / download.suggested_filename
    download.save_as(pdf)
    assert Path(pdf).read_bytes().startswith(b"%PDF")
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", str(pdf), "--json", stdout=out)
    verdict = json.loads(out.getvalue())
    assert exited.value.code == 0 and verdict["status"] == "valid", verdict

    # 7. The same PDF through the verify page, as a customer would check it; then the campaign is
    # closed: no more signing on it.
    page.goto(base + "/certificates/verify/")
    page.set_input_files("input[name=pdf]", str(pdf))
    # The page answers once a sandboxed child process has verified the PDF.
    page.get_by_role("button", name="Verify").click(timeout=VERIFY_TIMEOUT_MS)
    page.locator("#verify-status").wait_for(timeout=VERIFY_TIMEOUT_MS)
    shot("certificate-verified")
    assert page.locator("#verify-status").inner_text() == "VALID"
    assert "Browser test site" in page.locator("#site-keys").inner_text()
    page.goto(base + campaign_url)
    assert page.locator("#campaign-closed").is_visible() and page.locator("#sign-form").count() == 0
    shot("campaign-closed")

    # 8. A customer without an account: logged out, the public verify page answers for the same PDF,
    # and nothing else of the portal opens.
    page.context.clear_cookies()
    page.goto(base + "/verify/")
    page.set_input_files("input[name=pdf]", str(pdf))
    page.get_by_role("button", name="Verify").click(timeout=VERIFY_TIMEOUT_MS)
    page.locator("#verify-status").wait_for(timeout=VERIFY_TIMEOUT_MS)
    shot("certificate-verified-public")
    assert page.locator("#verify-status").inner_text() == "VALID"
    assert number in page.locator("#verify-identity").inner_text()
    page.goto(base + campaign_url)
    assert "/login/" in page.url
