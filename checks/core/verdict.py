"""The verdict vocabulary of checks: statuses, findings, verdicts (checks/core/base.py re-exports them).

Kept apart from base.py for its length; it depends on nothing else in checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PASS = "pass"
WARN = "warn"
FAIL = "fail"  # ran, and the hardware is out of spec
ERROR = "error"  # could not tell: unreachable, timed out, unparseable, missing evidence
SKIPPED = "skipped"

VERDICT_STATUSES = (PASS, WARN, FAIL, ERROR, SKIPPED)
# The overall verdict of several findings is the worst one. A proven fault outranks "could not
# tell": a GPU shown faulty needs its hardware action whatever else went unmeasured, and the
# missing evidence stays named in the reason (Verdict.from_findings). `error` is the verdict
# only where nothing is proven out of spec; it still outranks warn and pass.
_SEVERITY = {FAIL: 4, ERROR: 3, WARN: 2, PASS: 1, SKIPPED: 0}
# How many reasons of one kind a verdict's reason quotes before "and N more".
_SHOWN = 5
# Prefix of the missing evidence that a `fail` verdict also names.
ALSO_UNTOLD = "and could not tell: "


@dataclass
class Finding:
    status: str
    reason: str


@dataclass
class Verdict:
    """The outcome of a check on one node: a status and human reasons."""

    status: str
    reason: str
    findings: list[Finding] = field(default_factory=list)

    @classmethod
    def from_findings(cls, findings: list[Finding], *, pass_reason: str = "all within spec") -> Verdict:
        problems = [f for f in findings if f.status != PASS]
        if not problems:
            return cls(status=PASS, reason=pass_reason, findings=findings)
        worst = max(_SEVERITY[f.status] for f in problems)
        top = [f for f in problems if _SEVERITY[f.status] == worst]
        status = top[0].status
        reason = _joined([f.reason for f in top])
        untold = [f.reason for f in problems if f.status == ERROR]
        if status == FAIL and untold:
            reason += f"; {ALSO_UNTOLD}{_joined(untold)}"
        return cls(status=status, reason=reason, findings=findings)


def _joined(reasons: list[str]) -> str:
    shown = "; ".join(reasons[:_SHOWN])
    return shown + (f"; and {len(reasons) - _SHOWN} more" if len(reasons) > _SHOWN else "")


def worst_status(statuses: list[str]) -> str:
    """The status of several verdicts: `fail` (a proven fault) over `error` over warn, pass and
    skipped; `error` when there are none (nothing judged is never a pass)."""
    if not statuses:
        return ERROR
    return max(statuses, key=lambda s: _SEVERITY.get(s, 0))


@dataclass
class GroupVerdict(Verdict):
    """A group check's verdict, with per-node attribution where the output allows it:
    hostname -> Verdict for the nodes it can name (a slow pair's common node, a slow writer)."""

    node_verdicts: dict[str, Verdict] = field(default_factory=dict)
