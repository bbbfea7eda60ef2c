"""The certificate PDF (WeasyPrint, from templates/certificates/certificate_pdf.html), and reading the
sealed payload back out of one.

The PDF carries two attachments: PAYLOAD_NAME (the exact canonical JSON bytes that were signed) and
SEAL_NAME (the seal: digest, signature, public key); signing.py then signs the whole document.
Anyone can check both offline (verification.py, `manage.py kiln_verify`, or pdfsig)."""

from __future__ import annotations

import base64
import io
import json
import logging
from statistics import median
from typing import Any

from django.template.loader import render_to_string

from portal.certificates.charts import Chart

# WeasyPrint logs every layout step at INFO; the portal's root logger is at INFO.
for _name in ("weasyprint", "fontTools"):
    logging.getLogger(_name).setLevel(logging.WARNING)

PAYLOAD_NAME = "kiln-certificate.json"
SEAL_NAME = "kiln-certificate.seal.json"


class NotACertificate(ValueError):
    """The file is not a PDF, or carries no Kiln payload and seal."""


def pdf_render(*, payload: dict[str, Any], payload_bytes: bytes, seal_data: dict[str, Any], charts: list[Chart],
               charts_note: str, signer: str = "") -> bytes:  # fmt: skip
    import weasyprint

    html = render_to_string(
        "certificates/certificate_pdf.html",
        {
            **pdf_context(payload),
            "p": payload,
            "seal": seal_data,
            "charts": [
                {"title": c.title, "src": "data:image/svg+xml;base64," + base64.b64encode(c.svg).decode()}
                for c in charts
            ],
            "charts_note": charts_note,
            "signer": signer,
            "payload_name": PAYLOAD_NAME,
            "seal_name": SEAL_NAME,
        },
    )
    attachments = [
        weasyprint.Attachment(string=payload_bytes, name=PAYLOAD_NAME, description="Kiln certificate payload"),
        weasyprint.Attachment(
            string=json.dumps(seal_data, sort_keys=True, indent=1).encode(),
            name=SEAL_NAME,
            description="Kiln certificate seal (Ed25519 over the SHA-256 of the payload)",
        ),
    ]
    return weasyprint.HTML(string=html, base_url=None).write_pdf(attachments=attachments)


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


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _show(value: float) -> str:
    return f"{value:.4g}"


def pdf_context(payload: dict[str, Any]) -> dict[str, Any]:
    """Condensed views of the payload for the document: it must stay readable at 1,000 nodes, so
    per-node detail is one row per node; measurements are summarised per check (range over nodes)
    and listed one by one only where out of spec. Everything else is in the attached payload."""
    items = payload["campaign_plan"]["items"]
    ranges: dict[str, dict[tuple[str, str, str], list[float]]] = {item["key"]: {} for item in items}
    out_of_spec = []

    def collect(key: str, where: str, measurements: list[dict[str, Any]]) -> None:
        for m in measurements:
            value = _number(m["value"])
            if m["threshold"] and value is not None:
                ranges.setdefault(key, {}).setdefault((m["name"], m["unit"], m["threshold"]), []).append(value)
            if m["ok"] is False:
                out_of_spec.append(
                    {
                        "where": where,
                        "check": key,
                        "name": m["name"] + (f"[GPU {m['gpu']}]" if m["gpu"] is not None else ""),
                        "value": _show(value) if value is not None else m["text"],
                        "unit": m["unit"],
                        "threshold": m["threshold"],
                    }
                )

    node_rows = []
    for node in payload["nodes"]:
        for key, check in node["checks"].items():
            if "measurements" in check:
                collect(key, node["hostname"], check["measurements"])
        node_rows.append({**node, "states": [node["checks"].get(item["key"], {}).get("state", "") for item in items]})
    for group in payload["group_results"]:
        collect(group["item_key"], group["node_set"], group["measurements"])
    checks = []
    summary = {s["key"]: s for s in payload["summary"]}
    for index, item in enumerate(items, start=1):
        rows = []
        for (name, unit, threshold), values in sorted(ranges.get(item["key"], {}).items()):
            rows.append(
                {
                    "name": name,
                    "unit": unit,
                    "threshold": threshold,
                    "n": len(values),
                    "min": _show(min(values)),
                    "median": _show(median(values)),
                    "max": _show(max(values)),
                }
            )
        checks.append({"index": index, "item": item, "summary": summary.get(item["key"], {}), "ranges": rows})
    return {"checks": checks, "node_rows": node_rows, "out_of_spec": out_of_spec}
