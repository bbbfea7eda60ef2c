"""The certificate's body fits the page: a 64-node certificate of a plan with more checks than one
table holds has every word of every page inside the printable box and none drawn over another, and
its state table is split by columns, each node row on one line in every part; a threshold is never
blank and a measurement reads by its label. The column layout itself is checked on made-up rows at
sizes no PDF is rendered for (many checks, very long hostnames)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from checks import REGISTRY
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.certificates import pdf, pdf_tables, services
from portal.inventory.models import Cluster, Node
from portal.runs.models import Measurement, Run
from tests.conftest import REPO, skip_or_fail
from tests.pdf_pages import Page, clipping_problems, pages

NODES = 64
CHECKS = 18  # the plan the demo showed with columns C13–C18 wrapped onto a second line
STATES = {"pass", "warn", "fail", "error", "waived", "missing", "—"}
SHOTS = REPO / "test-artifacts" / "screenshots" / "certificate-64"


def _plan() -> TestPlan:
    """A plan of CHECKS node checks: every node-scope definition of the catalog, then copies of them
    (a plan names each definition once, so the copies are definitions of their own)."""
    node_scope = [d for d in CheckDefinition.objects.order_by("slug") if REGISTRY[d.kind].scope == "node"]
    plan = TestPlan.objects.create(slug="wide", name="Wide plan")
    for order in range(CHECKS):
        base = node_scope[order % len(node_scope)]
        if order >= len(node_scope):
            base = CheckDefinition.objects.create(
                slug=f"{base.slug}-{order}", name=f"{base.name} again", kind=base.kind, params=base.params,
                thresholds=base.thresholds,
            )  # fmt: skip
        TestPlanItem.objects.create(plan=plan, check_definition=base, order=order)
    return plan


def _finish(run: Run, failing: str) -> None:
    """tests/certificates/conftest.py finish() in bulk (1,152 results): every result passes but
    gpu-node-007's `failing`, with a GPU inventory and one judged measurement each."""
    now = timezone.now()
    run.results.update(status="pass", reason="pass on purpose", stdout="raw output", finished_at=now)
    run.results.filter(node__hostname="gpu-node-007", item_key=failing).update(status="fail", reason="fail on purpose")
    rows = []
    for result in run.results.select_related("node"):
        host, bad = result.node.hostname, result.status == "fail"
        if result.kind == "gpu_inventory":
            for gpu in range(2):
                rows.append(Measurement(result=result, name="gpu_uuid", gpu=gpu, text=f"GPU-{host}-{gpu}"))
                rows.append(Measurement(result=result, name="gpu_serial", gpu=gpu, text=f"SN{host}{gpu}"))
        else:
            rows.append(Measurement(result=result, name="volatile_uncorrected", gpu=0, value=2.0 if bad else 0.0,
                                    threshold="<= 0", ok=not bad))  # fmt: skip
    Measurement.objects.bulk_create(rows)
    run.status, run.started_at, run.finished_at = "fail", run.started_at or now, now
    run.save()


@pytest.fixture
def big_certificate(users, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A 64-node certificate with serials, racks and one waived failure."""
    for tool in ("pdftotext", "pdftoppm"):
        if not shutil.which(tool):
            skip_or_fail(f"the certificate layout test needs {tool} (apt-get install poppler-utils)")
    cluster = Cluster.objects.create(name="big", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"gpu-node-{i:03d}", rack=f"R{(i - 1) // 8 + 1:02d}", position=(i - 1) % 8 + 1,
             serial=f"CHS-{i:06d}")
        for i in range(1, NODES + 1)
    )  # fmt: skip
    campaign = services.campaign_create(cluster=cluster, plan=_plan(), name="big", user=users["operator"])
    run = services.campaign_run_start(campaign=campaign, node_set="", user=users["operator"], enqueue=False)
    failed = run.results.exclude(kind="gpu_inventory").order_by("item_key").first()
    assert failed is not None
    _finish(run, failed.item_key)
    services.waiver_grant(
        campaign=campaign, hostname="gpu-node-007", item_key=failed.item_key, justification="Cable reseated, re-run",
        user=users["vendor"],
    )  # fmt: skip
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    started = time.perf_counter()
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert certificate is not None
    path = tmp_path / "big.pdf"
    path.write_bytes(bytes(certificate.pdf))
    payload_bytes, _ = pdf.pdf_extract(bytes(certificate.pdf))
    return path, {"issue_s": time.perf_counter() - started, "payload": payload_bytes}


def test_a_64_node_certificate_fits_every_page_and_its_node_table_one_line_a_node(big_certificate) -> None:
    """One test for the whole document: rendering it is the costly part (about 2 s of WeasyPrint)."""
    path, made = big_certificate
    found = pages(path)
    assert not clipping_problems(found), "\n".join(clipping_problems(found)[:20])

    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):
        old.unlink()
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(path), str(SHOTS / "page")], check=True, timeout=120)
    assert len(list(SHOTS.glob("page-*.png"))) == len(found), "a PNG per page"

    rows = _one_line_a_node(found, [f"gpu-node-{i:03d}" for i in range(1, NODES + 1)], CHECKS)
    assert any("waived" in line for line in rows["gpu-node-007"])

    # Charts are off here (KILN_CERT_CHARTS=0); the issue time is reported, not bounded (machine load).
    print(f"64-node certificate: {len(found)} pages, issued in {made['issue_s']:.1f} s")
    _no_threshold_or_setting_is_blank(path, json.loads(made["payload"]))


def _one_line_a_node(found: list[Page], hosts: list[str], checks: int) -> dict[str, list[list[str]]]:
    """Every node row of the state tables: the hostname, then only its serial, rack and states, on
    one line; the checks split over tables (C13–C18 do not fit beside C1–C12), each listing every
    node. The rows found, by hostname."""
    rows: dict[str, list[list[str]]] = {}
    for page in found:
        for word in page.words:
            if word.text in hosts:
                line = [w.text for w in page.line_of(word)]
                if line[0] == word.text and line[-1] in STATES:
                    rows.setdefault(word.text, []).append(line)
    assert sorted(rows) == sorted(hosts)
    headers = [
        [w.text for w in page.line_of(word)]
        for page in found
        for word in page.words
        if word.text == "Node" and any(re.fullmatch(r"C\d+", w.text) for w in page.line_of(word))
    ]
    shown = sorted({h for header in headers for h in header if re.fullmatch(r"C\d+", h)}, key=lambda c: int(c[1:]))
    assert shown == [f"C{i}" for i in range(1, checks + 1)]
    tables = {tuple(h) for h in headers}
    assert len(tables) >= 2, tables  # split by columns
    for host, lines in rows.items():
        assert len(lines) == len(tables), (host, lines)
        assert sorted(len(line) for line in lines) == sorted(len(h) for h in tables), (host, lines)
    return rows


def _no_threshold_or_setting_is_blank(path: Path, payload: dict[str, Any]) -> None:
    """Every plan setting without a value reads "not set" beside its name, never a blank."""
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout
    plan = " ".join(text.split("The plan: checks, parameters and thresholds", 1)[1].split())
    items = [item for p in payload["plans"] for item in p["snapshot"]["items"]]
    unset = {
        k for item in items for k, v in {**item["params"], **item["thresholds"]}.items() if v in (None, "", [], {})
    }
    assert unset, "the catalog has settings with no value (expected versions, optional limits)"
    for name in unset:
        assert f"{name} not set" in plan, name


def _rows(n: int, checks: int, hostname: str = "gpu{:05d}") -> list[dict[str, Any]]:
    return [
        {"hostname": hostname.format(i), "serial": f"SN{i}", "rack": "R1", "position": i, "states": ["pass"] * checks}
        for i in range(n)
    ]


@pytest.mark.parametrize("checks", [1, 11, 12, 13, 18, 40])
def test_the_state_table_splits_by_columns_and_every_table_fits_the_page(checks: int) -> None:
    rows = _rows(12, checks)
    rows[3]["states"][-1] = "cancelled"  # the widest state word sets its column's width
    groups = pdf_tables.state_groups(rows, checks)
    assert [g.first for g in groups][0] == 1 and groups[-1].last == checks
    assert all(b.first == a.last + 1 for a, b in zip(groups, groups[1:], strict=False))  # no check lost or repeated
    assert all(g.last - g.first + 1 <= pdf_tables.MAX_CHECK_COLUMNS for g in groups)
    assert all(g.width_pt <= pdf_tables.LINE_WIDTH_PT for g in groups)
    assert groups[0].lead == (0, 1, 2) and all(g.lead == (0,) for g in groups[1:])  # the node repeats
    for group in groups:
        header = pdf_tables.state_header(group)
        assert header[0] == "Node" and len(header) == len(group.widths_pt)
        [row] = pdf_tables.state_rows(rows[3:4], group)
        assert row.count("<td") == len(header)


def test_a_very_long_hostname_shrinks_the_font_and_the_table_still_fits() -> None:
    name = "a-very-long-fully-qualified-node-name.rack-r01.hall-b.datacentre-north.example.internal" * 2
    rows = _rows(3, 18, hostname=name + "{:03d}")
    groups = pdf_tables.state_groups(rows, 18)
    assert pdf_tables.MIN_FONT_PT <= groups[0].font_pt < pdf_tables.FONT_PT
    assert all(g.width_pt <= pdf_tables.LINE_WIDTH_PT for g in groups)


def test_a_hostile_cell_is_escaped_in_the_state_table() -> None:
    rows = _rows(1, 2, hostname='<img src=x onerror="alert(1)">{}')
    rows[0]["states"] = ["pass", "<b>fail</b>"]
    [group] = pdf_tables.state_groups(rows, 2)
    [row] = pdf_tables.state_rows(rows, group)
    assert "<img" not in row and "<b>" not in row and "&lt;img" in row


def test_past_the_table_limit_the_state_table_is_aligned_lines_that_fit_the_same_way(monkeypatch, tmp_path) -> None:
    """Past TABLE_MAX_NODES nodes (about 1.3 ms a node instead of 14 at 18 checks) the same columns,
    the same split and one line per node, as text: rendered here for 64 nodes with the limit lowered."""
    monkeypatch.setattr(pdf_tables, "TABLE_MAX_NODES", 10)
    rows = _rows(NODES, CHECKS, hostname="gpu-node-{:03d}")
    rows[6]["states"][0] = "waived"
    checks = [{"index": i, "item": {"name": f"Check {i}"}} for i in range(1, CHECKS + 1)]
    parts = [extra for template, extra in pdf._parts(rows, checks) if extra.get("table") == "states"]
    assert parts and all(extra["group"].lines and "rows" not in extra for extra in parts)
    path = tmp_path / "lines.pdf"
    path.write_bytes(
        pdf._join([pdf._render_part("certificates/pdf/nodes.html", {**e, "p": {}, "first_page": 1}).write_pdf()
                   for e in parts], b"{}", {}, title="lines")
    )  # fmt: skip
    found = pages(path)
    assert not clipping_problems(found), "\n".join(clipping_problems(found)[:20])
    lines = _one_line_a_node(found, [r["hostname"] for r in rows], CHECKS)
    assert "waived" in lines["gpu-node-006"][0]


@pytest.mark.parametrize("checks", [1, 12, 18, 40])
def test_aligned_lines_are_sized_with_their_gaps_and_fit_the_page(checks: int) -> None:
    rows = _rows(5, checks)
    for group in pdf_tables.state_groups(rows, checks, lines=True):
        text = pdf_tables.state_lines(rows, group)
        width = max(len(group.chars), 1) * pdf_tables.GAP + sum(group.chars)
        assert width * pdf_tables.MONO_ADVANCE_EM * group.font_pt <= pdf_tables.LINE_WIDTH_PT + 1e-6
        assert all(len(str(line)) <= width for block in text.blocks for line in block)  # plain "pass" lines
        assert str(text.header).split()[: len(group.lead)] == ["Node", "Serial", "Rack/pos"][: len(group.lead)]
