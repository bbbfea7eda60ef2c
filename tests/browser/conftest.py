"""Browser tests: Playwright (sync API) driving Debian's Chromium against pytest-django's live server.

The pages are served by `live_server` (a thread of this process, on the test database); runs are
executed by a real Celery worker process over SSH on the sshd testbed (tests/conftest.py).
One Chromium serves the pytest process, started by its first browser test; each test gets a fresh context.

Never `playwright install`: it downloads a browser. Chromium comes from apt (`/usr/bin/chromium`).
Without Chromium or the playwright package the tests skip, except under CI=true, where they fail.
Screenshots of every step land in test-artifacts/browser/ at the repository root (git-ignored).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import REPO, skip_or_fail

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright

CHROMIUM = Path(os.environ.get("KILN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "browser"
LOCAL_URL = re.compile(r"^(https?://(localhost|127\.0\.0\.1)(:\d+)?/|data:|blob:|about:)")


def pytest_configure(config: pytest.Config) -> None:
    # Until pyproject.toml lists it (--strict-markers would reject an unknown marker).
    config.addinivalue_line("markers", "browser: drives Chromium with Playwright against the live server")


@pytest.fixture(autouse=True)
def _live_server_closes_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    # The live server answers each request on a new thread; with persistent connections
    # (CONN_MAX_AGE) every one of them leaves an idle session behind, and PostgreSQL then refuses to
    # drop the test database at the end. Closing at the end of each request avoids that.
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)


class _Chromium:
    """One Playwright runtime and one Chromium for the whole pytest process, started by the first
    browser test: launching them costs about 1.2 s of CPU, against 0.1 s for a new context."""

    def __init__(self) -> None:
        self.runtime: Playwright | None = None
        self.browser: Browser | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def resume(self) -> Browser:
        from playwright.sync_api import sync_playwright

        if self.browser is not None and not self.browser.is_connected():
            self.stop()  # a test killed Chromium: start over
        if self.runtime is None:
            self.runtime = sync_playwright().start()
            self.loop = asyncio.get_running_loop()  # the sync API's loop, marked running on this thread
        else:
            asyncio.events._set_running_loop(self.loop)
        if self.browser is None:
            self.browser = self.runtime.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
        return self.browser

    def pause(self) -> None:
        # The sync API leaves its loop marked running on this thread between calls, which makes Django's
        # ORM refuse to run (SynchronousOnlyOperation) and asyncio.run() refuse to start: unmark it
        # until the next browser test, so the tests after these see no loop at all. The loop itself
        # waits in the dispatcher greenlet, untouched; the driver buffers what Chromium sends meanwhile.
        asyncio.events._set_running_loop(None)

    def stop(self) -> None:
        from playwright.sync_api import Error

        runtime, browser, self.runtime, self.browser = self.runtime, self.browser, None, None
        if runtime is None:
            return
        asyncio.events._set_running_loop(self.loop)
        try:
            if browser is not None and browser.is_connected():
                browser.close()
        except Error:
            pass  # gone already
        finally:
            try:
                runtime.stop()  # ends the driver (Chromium with it, if still there) and closes the loop
            finally:
                self.loop = None
                asyncio.events._set_running_loop(None)


@pytest.fixture(scope="session")
def _chromium() -> Iterator[_Chromium]:
    if not CHROMIUM.exists():
        skip_or_fail(f"browser tests need Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        skip_or_fail(f"browser tests need the playwright package ({exc})")
    chromium = _Chromium()
    try:
        yield chromium
    finally:
        chromium.stop()


@pytest.fixture
def browser_context(monkeypatch: pytest.MonkeyPatch, _chromium: _Chromium) -> Iterator[BrowserContext]:
    """A fresh context (cookies, storage, cache, permissions: nothing carried over) of the process's Chromium."""
    from django.db import connections

    # While the Playwright loop is marked running (this test), Django's ORM would refuse to run beside
    # it ("cannot call this from an async context") although our calls are synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # While the loop is marked running, this thread sees another set of Django connections (a new
    # PostgreSQL session), and the one opened before stays idle: close them on each side of the
    # test, or PostgreSQL refuses to drop the test database at the end. (An in-memory SQLite test
    # database ignores close().)
    connections.close_all()
    try:
        browser = _chromium.resume()
        context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
        try:
            context.set_default_timeout(15_000)
            # A page load carries plotly's bundle and the server's query; beside a loaded CI run
            # (two pytest workers on two cores) one took over 15 s, which says nothing of the page.
            context.set_default_navigation_timeout(60_000)
            # Every page reports what its Content-Security-Policy blocked to the console, where the page
            # fixture fails the test on it (Chromium also logs its own "Refused to ..." line).
            context.add_init_script(CSP_REPORTER_JS)
            yield context
        finally:
            context.close()
    finally:
        connections.close_all()
        _chromium.pause()


CSP_REPORTER_JS = """document.addEventListener('securitypolicyviolation', (e) => {
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || 'inline'} in ${e.documentURI}`
    + (e.sample ? ` (${e.sample})` : ''));
});"""
CSP_MESSAGE = re.compile(r"CSP violation|Content Security Policy|Content-Security-Policy", re.I)


def csp_violations(messages: list[str]) -> list[str]:
    return [m for m in messages if CSP_MESSAGE.search(m)]


@pytest.fixture
def page(browser_context: BrowserContext) -> Iterator[Page]:
    page = browser_context.pages[0] if browser_context.pages else browser_context.new_page()
    errors: list[str] = []
    elsewhere: list[str] = []
    console: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda r: None if LOCAL_URL.match(r.url) else elsewhere.append(r.url))
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
    yield page
    # A JavaScript exception on any page is a bug even when the assertions passed; and GPU sites are
    # air-gapped: every script, style and font must come from the app itself, never from a CDN. The
    # pages and charts must work under the Content-Security-Policy: nothing it blocks, ever.
    assert not errors, f"JavaScript errors: {errors}"
    assert not elsewhere, f"requests that left the app: {elsewhere}"
    assert not csp_violations(console), f"Content-Security-Policy violations: {csp_violations(console)}"


Shot = Callable[[str], Path]


@pytest.fixture
def shot(page: Page, request: pytest.FixtureRequest) -> Shot:
    """shot("grid-final") saves test-artifacts/browser/<test>-NN-grid-final.png (full page)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    test_name = re.sub(r"^test_it_", "", request.node.name)
    test_name = re.sub(r"[^\w-]+", "_", test_name)
    for old in ARTIFACTS.glob(f"{test_name}-*.png"):
        old.unlink()  # a rerun replaces its screenshots rather than mixing with the last run's
    counter = iter(range(1, 100))

    def take(step: str) -> Path:
        path = ARTIFACTS / f"{test_name}-{next(counter):02d}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


def log_in(page: Page, base_url: str, username: str, shot: Shot | None = None) -> None:
    """Through the login form, as a person would (password convention of `make_user`)."""
    page.goto(f"{base_url}/")
    page.wait_for_url(re.compile(r"/login/"))
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"pw-{username}")
    if shot:
        shot("login-form")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/clusters/$"))


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# Reads the run grid as a person sees it: hostname -> the status texts of its cells, left to right.
GRID_CELLS_JS = """() => {
  const out = {};
  for (const row of document.querySelectorAll('#run-grid tr')) {
    const first = row.querySelector('td');
    if (!first || !row.querySelector('.cell')) continue;
    out[first.innerText.trim()] = [...row.querySelectorAll('.cell')].map(c => c.innerText.trim());
  }
  return out;
}"""

# Counts htmx swaps: proof that the grid was updated in place, by polling, not by a reload.
COUNT_SWAPS_JS = """() => {
  window.__kilnMarker = 1;
  window.__kilnSwaps = 0;
  document.body.addEventListener('htmx:afterSwap', () => { window.__kilnSwaps += 1; });
}"""


def start_run_from_cluster_page(page: Page, base_url: str, cluster: str, plan: str, shot: Shot, nodes: str = "") -> int:
    """Cluster page -> "Start a run" -> pick the plan (and nodes) -> submit. Returns the run id."""
    page.goto(f"{base_url}/clusters/{cluster}/")
    shot(f"cluster-{cluster}")
    page.get_by_role("link", name="Start a run").click()
    page.select_option("select[name=plan]", plan)
    if nodes:
        page.fill("input[name=node_set]", nodes)
    shot("start-run-form")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/$", page.url)
    assert run_id, page.url
    return int(run_id.group(1))


def wait_for_run_end(page: Page, timeout_s: float) -> str:
    """Waits, without reloading, until htmx has swapped in a grid whose run is over."""
    page.wait_for_selector(
        "#run-grid:not([data-status=queued]):not([data-status=running])", timeout=timeout_s * 1000, state="attached"
    )
    return page.get_attribute("#run-grid", "data-status") or ""


def assert_plotly_rendered(page: Page, scope: str = "body", timeout_s: float = 15) -> dict[str, Any]:
    """Waits for a plotly chart under `scope` to be drawn, and returns what it drew: plotly.js (served
    by the app) ran, made its SVG, and drew at least one trace with a real path or markers."""
    chart = f"{scope} .js-plotly-plot"
    page.wait_for_selector(f"{chart} .main-svg", timeout=timeout_s * 1000)
    drawn = page.evaluate(
        """(chart) => {
          const plots = [...document.querySelectorAll(chart)];
          const marks = '.trace path, .trace .point, .trace rect, .hm image';
          const paths = plots.flatMap(p => [...p.querySelectorAll(marks)]);
          return {
            plots: plots.length,
            traces: plots.reduce((n, p) => n + p.querySelectorAll('.trace, .hm').length, 0),
            drawn: paths.filter(e => (e.getAttribute('d') || '').length > 10 || e.tagName !== 'path').length,
            data: plots.map(p => (p.data || []).map(t => ({
              name: t.name, type: t.type || 'scatter', n: (t.x || t.y || t.z || []).length,
            }))),
            titles: plots.map(p => [...p.querySelectorAll('.gtitle, .g-xtitle, .g-ytitle')].map(e => e.textContent)),
            xtype: plots.map(p => p.layout && p.layout.xaxis ? p.layout.xaxis.type : null),
            text: plots.map(p => p.querySelector('.main-svg').parentNode.textContent).join(' '),
          };
        }""",
        chart,
    )
    assert drawn["plots"] >= 1 and drawn["traces"] >= 1, drawn
    assert drawn["drawn"] >= 1, f"no trace was drawn: {drawn}"
    return drawn


# The grid's column headers (the checks' names), in order, without "Node" and "Why".
GRID_COLUMNS_JS = """() => [...document.querySelector('#run-grid tr').querySelectorAll('th')]
  .map(th => th.innerText.trim()).filter(t => t !== 'Node' && t !== 'Why')"""

# True once htmx has swapped something in and a cell of the grid has left `queued` (mid-run, or over).
PROGRESS_SEEN_JS = "() => window.__kilnSwaps >= 1 && !!document.querySelector('#run-grid tr a.cell:not(.queued)')"
