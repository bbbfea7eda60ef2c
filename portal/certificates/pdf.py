"""The certificate PDF (WeasyPrint, from the templates in certificates/pdf/, rendered in parts and
joined with pypdf), and reading the sealed payload back out of one.

The PDF carries two attachments: PAYLOAD_NAME (the exact canonical JSON bytes that were signed) and
SEAL_NAME (the seal: digest, signature, public key); signing.py then signs the whole document.
Anyone can check both offline (verification.py, `manage.py kiln_verify`, or pdfsig)."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.template.loader import render_to_string
from django.urls import reverse

from checks import presentation_of
from portal import formatting
from portal.certificates import cover, pdf_tables

if TYPE_CHECKING:  # charts.py and phases.py read the database; the document needs only their output
    from portal.certificates.charts import Chart
    from portal.certificates.phases import PhaseRanges

# WeasyPrint logs every layout step at INFO; the portal's root logger is at INFO.
for _name in ("weasyprint", "fontTools"):
    logging.getLogger(_name).setLevel(logging.WARNING)

PAYLOAD_NAME = "kiln-certificate.json"
SEAL_NAME = "kiln-certificate.seal.json"
NODES_PER_PART = 500  # rows of a per-node table laid out at once


class NotACertificate(ValueError):
    """The file is not a PDF, or carries no Kiln payload and seal."""


def pdf_render(*, payload: dict[str, Any], payload_bytes: bytes, seal_data: dict[str, Any], charts: list[Chart],
               charts_note: str, signer: str = "", phases: PhaseRanges | None = None,
               ca_fingerprint: str = "") -> bytes:  # fmt: skip
    """The document, rendered in parts (the front matter, NODES_PER_PART nodes per part of each
    per-node table and column group, the rest) whose page numbers carry on, joined into one PDF with the attachments.
    WeasyPrint lays out one part at a time: its memory is bounded by a part, not by the cluster.
    `phases` (phases.py) splits a range recorded in several phases into one row per phase.
    `signer` and `ca_fingerprint`: the SHA-256 fingerprints of the PDF-signing certificate and of the
    CA it chains to, printed on the last page for readers to compare."""
    drawn = [(c.section, {"title": c.title, "src": "data:image/svg+xml;base64," + base64.b64encode(c.svg).decode()})
             for c in charts]  # fmt: skip
    context = {
        **pdf_context(payload, phases=phases),
        **cover.cover_context(payload),
        "p": payload,
        "seal": seal_data,
        "charts": [chart for section, chart in drawn if section is None],
        "sections": [
            {**s, "charts": [chart for section, chart in drawn if section == s["result_id"]]}
            for s in payload.get("sections") or ()
        ],
        "charts_note": charts_note,
        "signer": signer,
        "ca_fingerprint": ca_fingerprint,
        "public_verify_url": public_verify_url(),
        "payload_name": PAYLOAD_NAME,
        "seal_name": SEAL_NAME,
    }
    parts: list[bytes] = []
    page = 1
    for template, extra in _parts(context["node_rows"], context["checks"]):
        document = _render_part(template, {**context, **extra, "first_page": page})
        page += len(document.pages)
        parts.append(document.write_pdf())
        del document
    return _join(parts, payload_bytes, seal_data, title=f"Acceptance certificate {payload.get('number', '')}")


def public_verify_url() -> str:
    """The public verify page's address (KILN_PUBLIC_URL and its path), or "" when the site has not
    said how it is reached or has the page off."""
    if not settings.KILN_PUBLIC_URL or int(settings.KILN_VERIFY_PUBLIC_CONCURRENCY) <= 0:
        return ""
    return str(settings.KILN_PUBLIC_URL) + reverse("certificates:public_verify")


def _parts(node_rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The front matter; the state table, one table per column group (checks that fit a page's
    width), NODES_PER_PART nodes per part, as aligned lines past TABLE_MAX_NODES nodes (pdf_tables.py
    says why); the GPU identities; the rest."""
    yield "certificates/pdf/front.html", {}
    serials = pdf_tables.has_serials(node_rows)
    lines = len(node_rows) > pdf_tables.TABLE_MAX_NODES
    groups = pdf_tables.state_groups(node_rows, len(checks), serials=serials, lines=lines)
    for number, group in enumerate(groups, start=1):
        legend = [(f"C{c['index']}", c["item"]["name"]) for c in checks[group.first - 1 : group.last]]
        header = pdf_tables.state_header(group, serials=serials)
        for start in range(0, len(node_rows), NODES_PER_PART):
            rows = node_rows[start : start + NODES_PER_PART]
            body = (
                {"text": pdf_tables.state_lines(rows, group, serials=serials)}
                if lines
                else {"rows": pdf_tables.state_rows(rows, group, serials=serials)}
            )
            yield "certificates/pdf/nodes.html", {
                "table": "states", "group": group, "group_number": number, "group_count": len(groups),
                "header": header, "legend": legend, **body,
                "first_row": start + 1, "last_row": start + len(rows), "total_rows": len(node_rows), "serials": serials,
            }  # fmt: skip
    widths = pdf_tables.gpus_widths(node_rows)
    for start in range(0, len(node_rows), NODES_PER_PART):
        rows = node_rows[start : start + NODES_PER_PART]
        yield "certificates/pdf/nodes.html", {
            "table": "gpus", "text": pdf_tables.gpus_table(rows, widths=widths), "first_row": start + 1,
            "last_row": start + len(rows), "total_rows": len(node_rows),
        }  # fmt: skip
    yield "certificates/pdf/tail.html", {}


def _render_part(template: str, context: dict[str, Any]) -> Any:
    import weasyprint

    return weasyprint.HTML(string=render_to_string(template, context), base_url=None).render()


def _join(parts: list[bytes], payload_bytes: bytes, seal_data: dict[str, Any], *, title: str) -> bytes:
    """One PDF of the parts' pages, carrying the payload and the seal as attachments."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for part in parts:
        writer.append(PdfReader(io.BytesIO(part)))
    writer.add_attachment(PAYLOAD_NAME, payload_bytes)
    writer.add_attachment(SEAL_NAME, json.dumps(seal_data, sort_keys=True, indent=1).encode())
    writer.add_metadata({"/Title": title, "/Producer": "Kiln (WeasyPrint, pypdf)"})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def attachment_names(data: bytes) -> set[str]:
    """Names of the PDF's embedded files; empty when it has none or cannot be read."""
    from pypdf import PdfReader

    try:
        return set(PdfReader(io.BytesIO(data)).attachments)
    except Exception:  # any damage means "no readable attachments" here; pypdf raises many types
        return set()


def pdf_extract(data: bytes) -> tuple[bytes, dict[str, Any]]:
    """(payload bytes, seal) from a certificate PDF. Raises NotACertificate."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        attachments = dict(reader.attachments)
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, AttributeError, IndexError, RecursionError) as exc:
        raise NotACertificate(f"cannot read the PDF: {type(exc).__name__}: {str(exc)[:200]}") from None
    if PAYLOAD_NAME not in attachments or SEAL_NAME not in attachments:
        raise NotACertificate(f"the PDF has no {PAYLOAD_NAME} and {SEAL_NAME} attachments: not a Kiln certificate")
    if len(attachments[PAYLOAD_NAME]) != 1 or len(attachments[SEAL_NAME]) != 1:
        raise NotACertificate("the PDF carries more than one payload or seal")
    payload_bytes = attachments[PAYLOAD_NAME][0]
    try:
        seal_data = json.loads(attachments[SEAL_NAME][0])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotACertificate(f"the seal attachment is not JSON: {exc}") from None
    if not isinstance(seal_data, dict):
        raise NotACertificate("the seal attachment is not a JSON object")
    return payload_bytes, seal_data


def measurement_label(kind: str, name: str) -> str:
    """A measurement's name as people read it: the label its check declares, else in words."""
    return formatting.name_label(name, presentation_of(kind).label_of(name))


def _range_rows(item: dict[str, Any], ranges: list[dict[str, Any]], phases: PhaseRanges) -> list[dict[str, Any]]:
    """The check's ranges for people: the measurement's label, values and threshold in its unit, a
    range recorded in several phases shown as one row per phase. A range that no threshold judged
    says so rather than leaving the cell blank."""
    rows = []
    for r in ranges:
        split = phases.get((item["key"], r["name"], r["unit"], r["threshold"]))
        label = measurement_label(item.get("kind", ""), r["name"])
        threshold = formatting.threshold(r["threshold"], r["unit"]) if r["threshold"] else formatting.NOT_SET
        for part in split or [{**r, "phase": ""}]:
            rows.append(
                {"name": r["name"], "label": label, "phase": part["phase"], "unit": formatting.unit_shown(r["unit"]),
                 "n": part["n"], "threshold": threshold,
                 **{k: formatting.quantity(part[k], r["unit"]) for k in ("min", "median", "max")}}
            )  # fmt: skip
    return rows


def _node_counts(node_rows: list[dict[str, Any]]) -> dict[str, int]:
    """In-scope nodes by outcome: every check passed (or warned), passed with a waiver, or neither."""
    counts = {"passed": 0, "waived": 0, "not_passed": 0}
    for node in node_rows:
        states = set(node["states"])
        if states <= {"pass", "warn"}:
            counts["passed"] += 1
        elif states <= {"pass", "warn", "waived"}:
            counts["waived"] += 1
        else:
            counts["not_passed"] += 1
    return counts


def pdf_context(payload: dict[str, Any], phases: PhaseRanges | None = None) -> dict[str, Any]:
    """Condensed views of a format-3 payload for the document: one row per node, measurement ranges
    per check (gathered over the nodes when the body was built), and the out-of-spec measurements the
    node summaries list. Everything else is in the attached payload and the exported evidence.
    Numbers are written for people (portal/formatting.py); the payload keeps them raw."""
    items = payload["campaign_plan"]["items"]
    by_key = {item["key"]: item for item in items}
    out_of_spec = []

    def collect(key: str, where: str, check: dict[str, Any]) -> None:
        item = by_key.get(key, {})
        for m in check.get("out_of_spec", ()):
            name = measurement_label(item.get("kind", ""), m["name"])
            threshold = formatting.threshold(m["threshold"], m["unit"]) if m["threshold"] else formatting.NOT_SET
            out_of_spec.append(
                {"where": where, "check": item.get("name") or key, "name": name,
                 "gpu": m["gpu"], "value": formatting.quantity(m["value"], m["unit"]), "threshold": threshold}
            )  # fmt: skip
        hidden = check.get("out_of_spec_count", 0) - len(check.get("out_of_spec", ()))
        if hidden > 0:
            more = f"… {hidden} more (see the evidence)"
            out_of_spec.append({"where": where, "check": item.get("name") or key, "gpu": None,
                                "name": more, "value": "", "threshold": ""})  # fmt: skip

    node_rows = []
    for node in payload["nodes"]:
        for key, check in node["checks"].items():
            collect(key, node["hostname"], check)
        node_rows.append({**node, "states": [node["checks"].get(item["key"], {}).get("state", "") for item in items]})
    for group in payload["group_results"]:
        collect(group["item_key"], group["node_set"], group)
    checks = []
    for index, (item, summary) in enumerate(zip(items, payload["summary"], strict=True), start=1):
        rows = _range_rows(item, summary.get("ranges", ()), phases or {})
        checks.append({"index": index, "item": item, "summary": summary, "ranges": rows})
    counts = _node_counts(node_rows)
    return {"checks": checks, "node_rows": node_rows, "out_of_spec": out_of_spec, "node_counts": counts}
