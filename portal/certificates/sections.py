"""Certificate sections of their own (checks/core/presentation.py CertificateSection): for each cited group
result whose check kind declares one (the heat soak's "Power and cooling"), the result's verdict and
every subject it judged apart from its nodes (racks, PDU phases, feeds, UPS, loops), with the
subject's verdict and reason, from the result's SUBJECT_VERDICT rows.

Part of the signed body (payload.py) under "sections", present only when there is one: a body
without any is byte for byte what it was before sections existed, so pending signatures and issued
certificates are untouched. Each entry is a summary; the rows themselves are in the group result's
evidence record, whose digest the body carries. Two queries whatever the number of subjects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checks import presentation_of
from checks.core.presentation import SUBJECT_VERDICT, CertificateSection
from portal.certificates.summary import REASON_MAX
from portal.runs.models import CheckResult, Measurement, Scope


def sectioned(kind: str) -> CertificateSection | None:
    return presentation_of(kind).certificate_section


def _entries(result_ids: list[int]) -> dict[int, dict[str, list[dict[str, str]]]]:
    """Result id -> subject kind -> [{name, status, reason}] in the order the check recorded them."""
    out: dict[int, dict[str, list[dict[str, str]]]] = {}
    rows = Measurement.objects.filter(result_id__in=result_ids, name=SUBJECT_VERDICT).order_by("result_id", "id")
    for result_id, text, labels in rows.values_list("result_id", "text", "labels"):
        labels = labels or {}
        entry = {"name": str(labels.get("subject_name", "")), "status": str(labels.get("status", "")),
                 "reason": text[:REASON_MAX]}  # fmt: skip
        out.setdefault(result_id, {}).setdefault(str(labels.get("subject", "")), []).append(entry)
    return out


def _counts(subjects: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for group in subjects:
        for entry in group["entries"]:
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return counts


def sections_build(*, result_ids: Iterable[int]) -> list[dict[str, Any]]:
    """One section per cited group result whose kind declares one, by result id. Subjects are grouped
    by kind in the declared order; a kind the result recorded but the declaration does not name comes
    after, titled by its key (nothing a check judged is left out)."""
    results = list(
        CheckResult.objects.filter(pk__in=sorted(set(result_ids)), scope=Scope.GROUP)
        .order_by("id")
        .values("id", "run_id", "kind", "item_key", "status", "reason", "node_set")
    )
    declared = {r["id"]: section for r in results if (section := sectioned(r["kind"])) is not None}
    found = _entries(sorted(declared)) if declared else {}
    out = []
    for r in results:
        section = declared.get(r["id"])
        if section is None:
            continue
        recorded = found.get(r["id"], {})
        named = [s.key for s in section.subjects]
        subjects = [
            {"kind": s.key, "title": s.title, "entries": recorded[s.key]} for s in section.subjects if s.key in recorded
        ]
        subjects += [{"kind": k, "title": k, "entries": recorded[k]} for k in sorted(recorded) if k not in named]
        out.append(
            {"title": section.title, "result_id": r["id"], "run_id": r["run_id"], "item_key": r["item_key"],
             "status": r["status"], "reason": r["reason"][:REASON_MAX], "node_set": r["node_set"],
             "counts": _counts(subjects), "subjects": subjects}
        )  # fmt: skip
    return out
