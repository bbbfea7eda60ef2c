"""Page 1 of a certificate is the decision: every exception by name (out-of-scope nodes with their
reasons, waived findings with value against limit, justification and approver) and the signatories
with full name, organisation, side and time; the sealed payload carries the same."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from portal import users as user_services
from portal.certificates import cover, document, pdf, services
from portal.certificates.models import Certificate
from portal.inventory.models import Node

JUSTIFICATION = "GPU 0 of n02 goes back under RMA; the customer accepts the node with 7 GPUs until it returns"
REASON = "mainboard replaced; the node is accepted with the next campaign"


def page_text(data: bytes, tmp_path: Path, first: int = 1, last: int = 1, *, layout: bool = False) -> str:
    path = tmp_path / "certificate.pdf"
    path.write_bytes(data)
    args = ["pdftotext", "-f", str(first), "-l", str(last), *(["-layout"] if layout else []), str(path), "-"]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def flat(text: str) -> str:
    """Whitespace folded, and a word broken after its hyphen at a line end joined again."""
    return re.sub(r"-\s+", "-", " ".join(text.split()))


@pytest.fixture
def named_users(users) -> dict[str, Any]:
    for who, full_name, organisation in (
        ("olga", "Olga Operator", "Example GPU Systems Ltd"),
        ("vera", "Vera Vendor", "Example GPU Systems Ltd"),
        ("carl", "Carl Customer", "Example Research Lab"),
    ):
        user_services.user_details_set(username=who, full_name=full_name, organisation=organisation)
    for user in users.values():
        user.refresh_from_db()
    return users


@pytest.fixture
def with_exceptions(campaign, campaign_run, named_users) -> Certificate:
    """n04 out of scope, n02's ECC failure waived, both sides signed, issued."""
    services.node_scope_remove(
        campaign=campaign, node=Node.objects.get(hostname="n04"), reason=REASON, user=named_users["operator"]
    )
    campaign_run(node_set="n[01-03]", statuses={("n02", "ecc-health"): "fail"})
    services.waiver_grant(
        campaign=campaign, hostname="n02", item_key="ecc-health", justification=JUSTIFICATION,
        user=named_users["vendor"],
    )  # fmt: skip
    services.certificate_sign(campaign=campaign, user=named_users["vendor"])
    services.certificate_sign(campaign=campaign, user=named_users["customer"])
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert certificate is not None
    return certificate


def test_the_payload_names_every_exception_and_signer(with_exceptions: Certificate) -> None:
    payload = json.loads(with_exceptions.payload)

    assert [(s["side"], s["name"], s["organisation"]) for s in payload["signatures"]] == [
        ("vendor", "Vera Vendor", "Example GPU Systems Ltd"),
        ("customer", "Carl Customer", "Example Research Lab"),
    ]
    (waiver,) = payload["waivers"]
    assert waiver["node"] == "n02" and waiver["item_key"] == "ecc-health" and waiver["check"] == "ECC and Xid"
    assert waiver["status"] == "fail" and waiver["justification"] == JUSTIFICATION
    assert (
        waiver["findings"]
        == [{"name": "volatile_uncorrected", "gpu": 0, "value": "2.0", "unit": "", "threshold": "<= 0"}]
        and waiver["findings_count"] == 1
    )
    assert (waiver["granted_by_name"], waiver["granted_by_organisation"], waiver["granted_by_side"]) == (
        "Vera Vendor", "Example GPU Systems Ltd", "vendor",
    )  # fmt: skip
    assert "expires" not in waiver, "a waiver accepts one result for this certificate: it has no expiry"
    (excluded,) = payload["out_of_scope"]
    assert (excluded["node"], excluded["reason"], excluded["by_name"], excluded["by_organisation"]) == (
        "n04", REASON, "Olga Operator", "Example GPU Systems Ltd",
    )  # fmt: skip


def test_page_1_names_every_exception_and_signer(with_exceptions: Certificate, tmp_path: Path) -> None:
    data = bytes(with_exceptions.pdf)
    text = flat(page_text(data, tmp_path))

    assert "Scope 3 of 4 nodes" in text and "1 out of scope" in text
    assert "n04" in text and REASON in text
    assert "n02" in text and "Waived: ECC and Xid" in text and "volatile_uncorrected [GPU 0]: 2 against ≤ 0" in text
    assert JUSTIFICATION in text
    assert "Vera Vendor, Example GPU Systems Ltd (vendor)" in text, "the waiver's approver"
    assert "Olga Operator, Example GPU Systems Ltd" in text, "who took n04 out of scope"
    layout = page_text(data, tmp_path, layout=True)
    assert re.search(r"Vendor\s+Vera Vendor\s+Example GPU Systems Ltd\s+\d{4}-\d\d-\d\dT", layout), layout
    assert re.search(r"Customer\s+Carl Customer\s+Example Research Lab\s+\d{4}-\d\d-\d\dT", layout), layout
    assert "Exceptions in full" not in flat(page_text(data, tmp_path, 2, 2)), "nothing was cut or left off"
    # What verification reads on page 1 (verdict, cluster, number, "Waivers N") is still there.
    assert document.headline_mismatch(data, json.loads(with_exceptions.payload)) == ""


def test_the_api_names_the_signatories(with_exceptions: Certificate, client, named_users) -> None:
    client.force_login(named_users["viewer"])
    body = client.get(f"/api/v1/certificates/{with_exceptions.pk}/").json()
    assert [(s["side"], s["name"], s["organisation"]) for s in body["signatures"]] == [
        ("vendor", "Vera Vendor", "Example GPU Systems Ltd"),
        ("customer", "Carl Customer", "Example Research Lab"),
    ]


def test_a_signature_keeps_the_organisation_its_signer_had(campaign, campaign_run, named_users, client) -> None:
    campaign_run()
    signature = services.certificate_sign(campaign=campaign, user=named_users["vendor"])
    user_services.user_details_set(username="vera", organisation="Another Integrator SA")
    signature.refresh_from_db()
    assert (signature.name, signature.organisation) == ("Vera Vendor", "Example GPU Systems Ltd")
    client.force_login(named_users["viewer"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert "Signed so far: <b>Vera Vendor</b> (Example GPU Systems Ltd, vendor," in page


def _waiver(i: int, justification: str) -> dict[str, Any]:
    return {
        "id": i, "node": f"gpu{i:03d}", "item_key": "ecc-health", "check": "ECC and Xid", "status": "fail",
        "reason": "GPU 3: 4 uncorrectable volatile ECC errors (max 0)",
        "findings": [{"name": "volatile_uncorrected", "gpu": 3, "value": "4.0", "unit": "", "threshold": "<= 0"}],
        "findings_count": 1, "justification": justification, "granted_by": "vera", "granted_by_name": "Vera Vendor",
        "granted_by_organisation": "Example GPU Systems Ltd", "granted_by_side": "vendor",
        "granted_at": "2026-12-01T10:00:00+00:00",
    }  # fmt: skip


@pytest.mark.parametrize(
    "justification", ["GPU 3 replaced under RMA next week", "a very long justification " * 40], ids=["short", "long"]
)
def test_many_exceptions_fill_page_1_and_continue_in_full(
    with_exceptions: Certificate, tmp_path: Path, justification: str
) -> None:
    payload = json.loads(with_exceptions.payload)
    payload["waivers"] = [_waiver(i, justification) for i in range(40)]
    context = cover.cover_context(payload)["cover"]
    shown, more = len(context["exceptions"]), context["exceptions_more"]
    assert 1 <= shown <= cover.COVER_EXCEPTIONS and shown + more == 41
    assert len(context["exceptions_all"]) == 41 and context["exceptions_all"][-1].text == justification

    data = pdf.pdf_render(
        payload=payload, payload_bytes=b"{}", seal_data=json.loads(json.dumps(with_exceptions.seal)), charts=[],
        charts_note="",
    )  # fmt: skip
    first = flat(page_text(data, tmp_path))
    assert f"And {more} more exceptions, listed with every other in full from page 2." in first
    assert "Carl Customer" in first and "Example Research Lab" in first, "the signatories stay on page 1"
    assert "SHA-256 of payload" in first, "page 1 holds all of its table"
    rest = flat(page_text(data, tmp_path, 2, 99)).split("Summary per check")[0]
    assert rest.startswith("Exceptions in full") and all(f"gpu{i:03d}" in rest for i in range(40))
    assert rest.count(flat(justification)) == 40 and "n04" in rest


def test_a_certificate_without_exceptions_says_so(issued: Certificate, tmp_path: Path) -> None:
    payload = copy.deepcopy(json.loads(issued.payload))
    payload["waivers"], payload["out_of_scope"] = [], []
    data = pdf.pdf_render(payload=payload, payload_bytes=b"{}", seal_data=issued.seal, charts=[], charts_note="")
    assert "Exceptions None: every node of the cluster is in scope and passed every check" in flat(
        page_text(data, tmp_path)
    )


def test_an_older_payload_without_names_still_renders_its_cover(issued: Certificate) -> None:
    """Certificates sealed before names and organisations were recorded carry usernames only."""
    payload = json.loads(issued.payload)
    for s in payload["signatures"]:
        s.pop("organisation")
    for w in payload["waivers"]:
        for key in ("check", "findings", "findings_count", "granted_by_organisation", "granted_by_side", "status"):
            w.pop(key)
    context = cover.cover_context(payload)["cover"]
    assert [s["organisation"] for s in context["signatories"]] == ["", ""]
    (row,) = context["exceptions"]
    assert (row.node, row.check, row.by) == ("n02", "ecc-health", "vera")
