"""Nodes "at risk": a key measurement moving the wrong way across recent sweeps while the node
still passes.

The rule, per node, measurement and GPU (and phase, for temperatures), over the node's last
KILN_HEALTH_TREND_SWEEPS results (default 5, at least 3) of that check that passed or warned,
oldest first:
- at least 3 values;
- monotonic in the bad direction: no step goes the good way (flat steps are allowed);
- at least 2 steps actually move the bad way (one jump is an event, not a trend);
- the net change, first to last, is at least the rule's minimum (absolute, or relative for busbw).
Only nodes whose current state is healthy or degraded are listed (a failed node is already news).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checks import presented


@dataclass(frozen=True)
class Rule:
    kind: str
    name: str
    direction: int  # +1: rising is bad; -1: falling is bad
    min_change: float  # absolute, or a fraction of the first value when `relative`
    relative: bool
    label: str
    unit: str


# Each check kind declares its own (checks/core/presentation.py TrendRule).
RULES: tuple[Rule, ...] = tuple(
    Rule(kind, t.name, t.direction, t.min_change, t.relative, t.label, t.unit)
    for kind, shown in presented()
    for t in shown.trends
)
RULE_BY_KEY = {(r.kind, r.name): r for r in RULES}


@dataclass(frozen=True)
class Risk:
    hostname: str
    node_id: int
    rule: Rule
    gpu: int | None
    phase: str
    values: list[float]

    @property
    def what(self) -> str:
        where = f" on GPU {self.gpu}" if self.gpu is not None else ""
        phase = f" ({self.phase})" if self.phase else ""
        shown = " → ".join(f"{v:g}" for v in self.values)
        return f"{self.rule.label}{where}{phase}: {shown} {self.rule.unit}"


def worsening(values: list[float], rule: Rule) -> bool:
    """The documented rule above, for one series (oldest first)."""
    if len(values) < 3:
        return False
    steps = [(b - a) * rule.direction for a, b in zip(values, values[1:], strict=False)]
    if any(s < 0 for s in steps) or sum(1 for s in steps if s > 0) < 2:
        return False
    change = (values[-1] - values[0]) * rule.direction
    if rule.relative:
        return values[0] > 0 and change / abs(values[0]) >= rule.min_change
    return change >= rule.min_change


def at_risk(rows: list[dict[str, Any]], *, keep: int) -> list[Risk]:
    """rows: measurement dicts (node_id, hostname, kind, name, gpu, phase, value, result_id), any order."""
    series: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
    hosts: dict[int, str] = {}
    for row in rows:
        if row["value"] is None:
            continue
        key = (row["node_id"], row["kind"], row["name"], row["gpu"], row.get("phase") or "")
        series.setdefault(key, []).append((row["result_id"], float(row["value"])))
        hosts[row["node_id"]] = row["hostname"]
    risks = []
    for (node_id, kind, name, gpu, phase), points in series.items():
        values = [v for _, v in sorted(points)][-keep:]
        rule = RULE_BY_KEY[(kind, name)]
        if worsening(values, rule):
            risks.append(Risk(hosts[node_id], node_id, rule, gpu, phase, values))
    return sorted_risks(risks)


def sorted_risks(risks: list[Risk]) -> list[Risk]:
    return sorted(risks, key=lambda r: (r.hostname, r.rule.label, r.gpu if r.gpu is not None else -1, r.phase))
