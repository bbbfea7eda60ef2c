"""Screenshots as tests: every main page in Chromium at 1280 and 1920 px, saved as
test-artifacts/screenshots/<width>/<page>.png, and on each page:
- the page is no wider than the window (the window without its vertical scrollbar), and nothing runs
  past the right edge of its column (what is in <main>: main's content box; the header: the window)
  except inside a box that scrolls (overflow-x auto or scroll: the result pages' `.table-wrap`, the
  run grid's `.grid-wrap`, `pre`) and itself fits;
- no chart text (a title, a tick label, a legend) cut off at its chart's edge;
- no raw template syntax (`{#`, `{{`, `{%`) in the text a person reads;
- no console error (a 404 for the favicon included), no uncaught exception, no chart that failed.
The issued certificate's pages are saved as PNG too (pdftoppm), under test-artifacts/screenshots/certificate/,
and each page is held to the same rule, read from the PDF's words (tests/pdf_pages.py): no word past
the printable box, none drawn over another (a cell too narrow, chart labels that collide).

One data set serves the module (tests/browser/screenshot_site.py: the demo cluster's runs executed
inline, a certified campaign, an open one, a run still running; about 40 s), and each width
opens every page in one test: a problem is reported with the page and the width, after every page
was looked at, so one run shows them all.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.browser.conftest import log_in
from tests.browser.screenshot_site import USERNAME, Site, site_build
from tests.conftest import REPO, skip_or_fail
from tests.load import busy_loops
from tests.pdf_pages import clipping_problems, pages

if TYPE_CHECKING:
    from playwright.sync_api import Page

# Loads every core while the demo's simulated nodes run: the machine alone (tests/conftest.py).
pytestmark = [pytest.mark.browser, pytest.mark.exclusive("demo", "cpu")]

WIDTHS = (1280, 1920)
SHOTS = REPO / "test-artifacts" / "screenshots"
RAW_TEMPLATE = re.compile(r"\{[#{%]")
# Long enough for plotly to draw a chart on a busy two-core machine (its figure is fetched first).
READY_TIMEOUT_MS = 20_000

# Counts htmx requests in flight on every page (an init script runs before the page's own scripts).
PENDING_JS = """
window.__kilnPending = 0;
document.addEventListener('htmx:beforeRequest', () => { window.__kilnPending += 1; });
document.addEventListener('htmx:afterRequest', () => { window.__kilnPending -= 1; });
"""

# A page is ready to look at once it has loaded, no htmx request is in flight (the run page's chart
# links, the ECC table) and every chart has been drawn, or has failed (charts.js marks both).
READY_JS = """() => {
  if (document.readyState !== 'complete' || window.__kilnPending > 0) return false;
  const listed = document.getElementById('history-charts');
  const ids = listed ? JSON.parse(listed.textContent).map(c => c.div) : [];
  const charts = [...document.querySelectorAll('.kiln-chart'), ...ids.map(id => document.getElementById(id))];
  return charts.every(c => !c || c.hasAttribute('data-rendered'));
}"""

# What the page shows, measured: its width against the window's, the outermost elements whose right
# edge runs past their column outside a scroll box that fits, the text of a chart (an SVG) that runs
# past the chart's edge, where it is cut off, the charts that failed, the page's visible text.
MEASURE_JS = """() => {
  const view = document.documentElement.clientWidth;
  // What is in <main> stays in its column (its padding is the page's margin); the rest, in the window.
  const main = document.querySelector('main');
  const mainBox = main.getBoundingClientRect();
  const column = mainBox.left + main.clientWidth - parseFloat(getComputedStyle(main).paddingRight);
  const edge = (el) => (el !== main && main.contains(el) ? column : view);
  const past = (el) => el.getBoundingClientRect().right > edge(el) + 0.5;
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const name = (el) => {
    const classes = typeof el.className === 'string' ? el.className.trim().split(/\\s+/).filter(Boolean) : [];
    return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + classes.map(c => '.' + c).join('');
  };
  const offenders = new Set(), covered = new Set();
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if ((box.width === 0 && box.height === 0) || !past(el)) continue;
    let up = el.parentElement;
    while (up && up !== document.body && !scrolls(up)) up = up.parentElement;
    if (up && up !== document.body && !past(up)) continue;  // inside a scroll box that fits
    if (el.parentElement && covered.has(el.parentElement)) covered.add(el);  // an ancestor is reported
    else { offenders.add(el); covered.add(el); }
  }
  return {
    scrollWidth: document.scrollingElement.scrollWidth,
    clientWidth: view,
    offenders: [...offenders].slice(0, 8).map(el => {
      const path = [];
      for (let e = el; e && e !== document.body; e = e.parentElement) path.unshift(name(e));
      return `${path.slice(-4).join(' > ')} ends at ${Math.ceil(el.getBoundingClientRect().right)} px,`
        + ` past ${Math.floor(edge(el))} px ("${(el.innerText || el.textContent || '').trim().slice(0, 40)}")`;
    }),
    clippedText: [...document.querySelectorAll('svg text')].filter(t => {
      const box = t.getBoundingClientRect(), svg = t.ownerSVGElement;
      if (!svg || !box.width || !t.textContent.trim()) return false;
      const frame = svg.getBoundingClientRect();
      return box.left < frame.left - 1 || box.right > frame.right + 1 || box.top < frame.top - 1
        || box.bottom > frame.bottom + 1;
    }).map(t => `${t.closest('[id]') ? '#' + t.closest('[id]').id : 'svg'}: "${t.textContent.slice(0, 60)}"`),
    failedCharts: [...document.querySelectorAll('[data-rendered=error]')].map(e => `#${e.id}: ${e.textContent}`),
    text: document.body.innerText,
  };
}"""


@pytest.fixture(scope="module")
def site(django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[tuple[str, Site]]:
    """The live server's URL and the data set, made once for the module.

    pytest-django gives each test that uses its `live_server` a transactional database, emptied after
    the test: the data set would be gone after the first width. So the module runs a live server of
    its own (pytest-django's class, the same server), the data is written with the database open for
    the whole module, and the database is emptied at its end the way the transactional tests empty
    it (flush, which also restores what migrations put there: roles, the built-in catalog)."""
    from pytest_django.live_server_helper import LiveServer

    keys = tmp_path_factory.mktemp("site-keys")
    with (
        django_db_blocker.unblock(),
        override_settings(KILN_KEY_DIR=str(keys)),
        pytest.MonkeyPatch.context() as patch,
    ):
        # The second signature queues the certificate for a worker; site_build issues it in this thread.
        patch.setattr("portal.certificates.services.issuing._enqueue_issue", lambda campaign_id: None)
        server = LiveServer("localhost")
        try:
            call_command("kiln_keys", "init", "--site", "Screenshot site", stdout=StringIO())
            # Built beside busy loops: the data set's real samplers (DLC, burn-in) must hold on a loaded
            # machine; the pages are then shot without them.
            with busy_loops():
                built = site_build()
            yield server.url, built
        finally:
            server.stop()
            call_command("flush", interactive=False, verbosity=0)


def _folder(name: str) -> Path:
    folder = SHOTS / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()  # a rerun replaces the screenshots rather than mixing with the last run's
    return folder


def _look(page: Page, url: str, png: Path, console: list[str]) -> list[str]:
    """Opens the page, saves its screenshot, and returns what is wrong with it."""
    from playwright.sync_api import Error as PlaywrightError

    problems: list[str] = []
    try:
        response = page.goto(url)
        if response is None or response.status != 200:
            problems.append(f"HTTP {response.status if response else '(no response)'}")
        page.wait_for_function(READY_JS, timeout=READY_TIMEOUT_MS)
    except PlaywrightError as exc:
        problems.append(f"not ready: {str(exc).splitlines()[0]}")
    page.screenshot(path=str(png), full_page=True)
    seen = page.evaluate(MEASURE_JS)
    if seen["scrollWidth"] > seen["clientWidth"]:
        problems.append(f"the page is {seen['scrollWidth']} px wide in a {seen['clientWidth']} px window")
    problems += [f"runs past the right edge: {o}" for o in seen["offenders"]]
    for match in RAW_TEMPLATE.finditer(seen["text"]):
        problems.append(f"raw template syntax: {seen['text'][max(0, match.start() - 30) : match.end() + 50]!r}")
    problems += [f"text cut off at its chart's edge: {c}" for c in seen["clippedText"]]
    problems += [f"chart failed: {c}" for c in seen["failedCharts"]]
    problems += [f"console: {m}" for m in console]
    return problems


def _errors(page: Page) -> list[str]:
    """The page's console errors (a resource that failed to load among them) and uncaught exceptions,
    as they come; the caller empties the list before each page."""
    console: list[str] = []
    page.on(
        "console", lambda m: console.append(f"{m.text} ({m.location.get('url', '')})") if m.type == "error" else None
    )
    page.on("pageerror", lambda exc: console.append(f"uncaught {exc}"))
    return console


# Up to 70 s with the site's set-up on an idle 2-core machine: room for a run two or three times as slow.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_reads_clean_and_logs_no_error(site: tuple[str, Site], page: Page, width: int) -> None:
    base, data = site
    folder = _folder(str(width))
    console = _errors(page)
    page.add_init_script(PENDING_JS)
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, base, USERNAME)

    problems: list[str] = []
    for name, path in data.pages.items():
        console.clear()
        found = _look(page, base + path, folder / f"{name}.png", console)
        problems += [f"{width} px, {name} ({path}): {p}" for p in found]

    shots = sorted(p.stem for p in folder.glob("*.png"))
    assert shots == sorted(data.pages), "a screenshot per page"
    assert not problems, f"{len(problems)} problem(s) on {len(data.pages)} pages:\n" + "\n".join(problems)


def test_the_certificate_pages_render_as_png_and_nothing_is_cut_off(site: tuple[str, Site], tmp_path: Path) -> None:
    """The issued certificate, page by page, as a person reading it sees it (60 dpi, for a look), and
    every page passes the no-clipping rule."""
    for tool in ("pdftoppm", "pdfinfo", "pdftotext"):
        if not shutil.which(tool):
            skip_or_fail(f"the certificate screenshots need {tool} (apt-get install poppler-utils)")
    _, data = site
    folder = _folder("certificate")
    pdf = tmp_path / f"{data.certificate}.pdf"
    pdf.write_bytes(data.pdf)

    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(folder / "page")], check=True, timeout=120)

    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    pages_seen = re.search(r"^Pages:\s+(\d+)", info, re.M)
    assert pages_seen and int(pages_seen.group(1)) >= 2, info
    assert len(list(folder.glob("page-*.png"))) == int(pages_seen.group(1)), "a PNG per page"
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    assert data.certificate in text and "PASS WITH WAIVERS" in text
    assert not RAW_TEMPLATE.search(text), RAW_TEMPLATE.search(text)
    found = pages(pdf)
    assert len(found) == int(pages_seen.group(1)) and all(page.words for page in found)
    problems = clipping_problems(found)
    assert not problems, f"{len(problems)} problem(s) on {len(found)} pages:\n" + "\n".join(problems[:40])


def _run_row(page: Page, run_id: int) -> dict[str, Any]:
    """A run's row of the runs list: its badges, its "of N" and its duration."""
    row = page.locator("table.runs tr", has=page.locator(f'a[href="/runs/{run_id}/"]')).first
    badges = {b.split(" ")[1]: int(b.split(" ")[0]) for b in row.locator(".badge").all_inner_texts()}
    of = re.search(r"of (\d+)", row.locator("td").nth(4).inner_text())
    return {"badges": badges, "of": int(of.group(1)) if of else None, "duration": row.locator("td.num").inner_text()}


def test_a_live_run_fills_its_triage_without_reload_and_agrees_with_the_runs_list(
    site: tuple[str, Site], page: Page
) -> None:
    """Mid-way, demo03's ECC fails while the run page is open: the triage box fills in through the
    grid's poll (no reload) and counts what the badges and the runs list count; the runs list gives
    the heat soak its wall time."""
    from portal.execution.execution import execute_node
    from portal.inventory.models import Node
    from portal.runs.models import CheckResult
    from tests.browser.screenshot_site import SOAK_WALL_S

    base, data = site
    folder = _folder("live")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, base, USERNAME)
    page.goto(f"{base}/runs/{data.live_run}/")
    assert page.locator("#triage").get_attribute("data-fail") == "0"
    assert "Nothing to triage yet" in page.locator("#triage").inner_text()

    demo03 = Node.objects.get(cluster__name="demo", hostname="demo03")
    execute_node(run_id=data.live_run, node_id=demo03.pk, claim="shots-demo03")
    page.wait_for_selector('#triage[data-fail="1"] tr.triage-line[data-nodes="demo03"]', timeout=READY_TIMEOUT_MS)
    page.wait_for_function(READY_JS, timeout=READY_TIMEOUT_MS)
    page.screenshot(path=str(folder / "run-live-triage.png"), full_page=True)

    triage = page.locator("#triage")
    fail, error = int(triage.get_attribute("data-fail") or -1), int(triage.get_attribute("data-error") or -1)
    badges = {b.split(" ")[1]: int(b.split(" ")[0]) for b in page.locator("#run-counts .badge").all_inner_texts()}
    assert (fail, error) == (badges.get("fail", 0), badges.get("error", 0)) == (1, 0)
    assert page.locator("#run-status").inner_text() == "running"  # still mid-way
    total = int(re.search(r"\d+/(\d+) checks", page.locator("#run-summary").inner_text()).group(1))  # type: ignore[union-attr]

    page.goto(f"{base}/clusters/demo/runs/")
    page.screenshot(path=str(folder / "cluster-runs.png"), full_page=True)
    live = _run_row(page, data.live_run)
    assert live["badges"].get("fail", 0) == fail and live["badges"].get("error", 0) == error
    assert live["of"] == total
    soak = _run_row(page, data.soak_run)
    group = CheckResult.objects.get(run_id=data.soak_run, scope="group")
    wall = (group.finished_at - group.started_at).total_seconds()
    assert group.duration_s == pytest.approx(wall) and SOAK_WALL_S <= wall < 8 * SOAK_WALL_S
    assert soak["duration"] == f"{round(wall)} s" and soak["of"] == 8  # one soak, a cell per node
