"""Page 1 of the certificate: the decision. The verdict and scope, every exception by name (each
out-of-scope node with its reason, each waived finding with its values, justification and approver),
then who signed, for whom, and when. Built from the sealed payload alone, as the rest of the PDF is.

Page 1 lists exceptions while their estimated lines fit its budget (at most COVER_EXCEPTIONS, at least
one), their texts cut at TEXT_MAX characters; when anything is cut or left off, every exception follows
in full on the pages after page 1.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

from portal import formatting

# Measured on A4 with the cover's 8 pt exception rows (front.html): the headline, scope and signatories
# leave about 110 mm, some 32 of these estimated lines (32 ended 2 mm above the page's foot with
# 200-character justifications); 29 keeps about 10 mm for a cluster line or plan name that wraps.
LINE_BUDGET = 29
COVER_EXCEPTIONS = 10  # rows on page 1 at most, however short (a page people read, not a list)
TEXT_CHARS_PER_LINE = 48  # 8 pt DejaVu Sans in the 90 mm "What" column
BY_CHARS_PER_LINE = 22  # in the 42 mm "Decided by" column
TEXT_MAX = 200  # characters of a reason or justification on page 1 (about four lines)
BY_MAX = 80  # characters of "name, organisation (side)" on page 1
FINDINGS_MAX = 2  # out-of-spec measurements named per waiver on page 1


@dataclass
class ExceptionRow:
    """One exception as page 1 and its continuation show it."""

    node: str
    kind: str  # "Out of scope" or "Waived"
    check: str = ""
    findings: list[str] = field(default_factory=list)
    more_findings: int = 0
    text: str = ""  # the reason (out of scope) or the waiver's justification
    by: str = ""  # "Vera Vendor, Example GPU Systems (vendor)"
    at: str = ""

    def cut(self) -> tuple[ExceptionRow, bool]:
        """The page-1 copy (texts and findings shortened) and whether anything was shortened."""
        text, by = _cut(self.text, TEXT_MAX), _cut(self.by, BY_MAX)
        shown = [_cut(f, TEXT_MAX) for f in self.findings[:FINDINGS_MAX]]
        more = self.more_findings + len(self.findings) - len(shown)
        short = ExceptionRow(self.node, self.kind, self.check, shown, more, text, by, self.at)
        return short, (text, by, shown, more) != (self.text, self.by, self.findings, self.more_findings)

    def lines(self) -> float:
        """About how many text lines its row takes on page 1 (the taller of its two wrapping columns)."""
        what = [*self.findings, *(["and more"] if self.more_findings else []), "Waiver: " + self.text]
        text_lines = sum(_wrapped(t, TEXT_CHARS_PER_LINE) for t in what)
        by_lines = _wrapped(self.by, BY_CHARS_PER_LINE) + 1
        return max(text_lines, by_lines) + 1  # the row's padding and rule (about 2 mm)


def _wrapped(text: str, width: int) -> int:
    return max(1, len(textwrap.wrap(text, width=width, break_long_words=True)))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def person(name: str, username: str, organisation: str, side: str = "") -> str:
    """'Vera Vendor, Example GPU Systems (vendor)'; the username where no full name was set."""
    out = name or username or "—"
    if organisation:
        out += f", {organisation}"
    return out + (f" ({side})" if side else "")


def _finding(m: dict[str, Any]) -> str:
    name = m.get("name", "") + (f" [GPU {m['gpu']}]" if m.get("gpu") is not None else "")
    value = formatting.quantity(m.get("value"), m.get("unit") or "")
    return f"{name}: {value} against {formatting.threshold(m.get('threshold'), m.get('unit') or '')}"


def exceptions(payload: dict[str, Any]) -> list[ExceptionRow]:
    """Every exception of the certificate: out-of-scope nodes first, then waivers, each by node."""
    out = [
        ExceptionRow(
            node=e["node"],
            kind="Out of scope",
            text=e.get("reason", ""),
            by=person(e.get("by_name", ""), e.get("by", ""), e.get("by_organisation", "")),
            at=formatting.iso_utc(e.get("at")),
        )
        for e in sorted(payload.get("out_of_scope") or [], key=lambda e: e["node"])
    ]
    for w in sorted(payload.get("waivers") or [], key=lambda w: (w["node"], w.get("check", w["item_key"]))):
        findings = [_finding(m) for m in w.get("findings") or []]
        if not findings and w.get("reason"):  # an error has no out-of-spec value: why it could not tell
            findings = [f"{w.get('status') or 'not passed'}: {w['reason']}"]
        more = max(0, int(w.get("findings_count") or 0) - len(w.get("findings") or []))
        out.append(
            ExceptionRow(
                node=w["node"],
                kind="Waived",
                check=w.get("check") or w["item_key"],
                findings=findings,
                more_findings=more,
                text=w.get("justification", ""),
                by=person(
                    w.get("granted_by_name", ""),
                    w.get("granted_by", ""),
                    w.get("granted_by_organisation", ""),
                    w.get("granted_by_side", ""),
                ),
                at=formatting.iso_utc(w.get("granted_at")),
            )
        )
    return out


def _scope(payload: dict[str, Any]) -> dict[str, int]:
    nodes = payload.get("nodes") or []
    counts = payload.get("counts") or {}
    in_scope = int(counts.get("nodes_in_scope", len(nodes)))
    out_of_scope = int(counts.get("nodes_out_of_scope", 0))
    return {
        "in_scope": in_scope,
        "nodes": in_scope + out_of_scope,
        "out_of_scope": out_of_scope,
        "gpus": sum(len(n.get("gpus") or []) for n in nodes),
    }


def cover_context(payload: dict[str, Any]) -> dict[str, Any]:
    """What front.html's cover section shows beyond the payload itself."""
    every = exceptions(payload)
    shown: list[ExceptionRow] = []
    cut, budget = False, float(LINE_BUDGET)
    for item in every[:COVER_EXCEPTIONS]:
        short, was_cut = item.cut()
        budget -= short.lines()
        if shown and budget < 0:
            break
        shown.append(short)
        cut = cut or was_cut
    signatories = [
        {
            "side": s.get("side", ""),
            "name": s.get("name") or s.get("username", ""),
            "organisation": s.get("organisation", ""),
            "signed_at": formatting.iso_utc(s.get("signed_at")),
        }
        for s in payload.get("signatures") or []
    ]
    return {
        "cover": {
            "scope": _scope(payload),
            "exceptions": shown,
            "exceptions_all": every if cut or len(every) > len(shown) else [],
            "exceptions_more": len(every) - len(shown),
            "signatories": signatories,
        }
    }
