"""The triage view: which node, which GPU, which rule and what to do, one line per cause.

Read from failed and errored results (a run's, or a campaign's open cells). A result's out-of-spec
measurements (`ok` False) each get the remedy their kind declares (checks/core/presentation.py Remedy);
a failed result without one gets the kind's fallback, an `error` result ERROR_REMEDY.

One node's findings of the same status, cause and action merge into one member (a wrong driver fails
both the inventory and the software check: one line, both checks named). Members merge into one line
across nodes when they are the same fault: same status, checks, cause, action, rules (measurement
name and threshold) and normalised reason. The normalised reason replaces every number (counts, GPU
indices, versions, addresses) with "#" and the node's own name with "<node>": two nodes with
uncorrectable ECC errors on different GPUs, or unreachable at different addresses, are one line; each
node keeps its own GPU, values and results under the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.urls import reverse

from checks import presentation_of, presented
from checks.core.presentation import ERROR_REMEDY, UNJUDGED_REMEDY, Remedy
from portal import formatting
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Measurement, Run, Scope, Series, Status

TRIAGED = (Status.FAIL, Status.ERROR)
# Nodes, results, measurements and GPUs a line lists on a page: a fault on 500 nodes stays one short
# row (a screen of 20 names), and the CSV and the RMA text list every one.
LISTED = 20
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+(?:[.:]\d+)*")
# Identity results a GPU's serial and bus id are read from: these statuses measured the GPUs.
_MEASURED = (Status.PASS, Status.WARN, Status.FAIL)


def iso_utc(value: datetime | None) -> str:
    """ISO 8601 in UTC with its zone ("2026-12-03T15:45:57Z", portal/formatting.py); "" when unknown."""
    return formatting.iso_utc(value) if value is not None else ""


@dataclass(frozen=True)
class Gpu:
    index: int
    serial: str = ""
    bus_id: str = ""


@dataclass(frozen=True)
class Evidence:
    """One out-of-spec measurement: what was measured against which threshold, where and when."""

    check: str
    result_id: int
    rule: str
    measured: str
    threshold: str
    gpu: int | None
    recorded_at: datetime | None

    @property
    def result_path(self) -> str:
        return reverse("runs:result_detail", args=[self.result_id])


@dataclass(frozen=True)
class Cited:
    """A result a member cites (its check's name, links to the result and its run)."""

    item_key: str
    check: str
    result_id: int
    run_id: int
    finished_at: datetime | None

    @property
    def result_path(self) -> str:
        return reverse("runs:result_detail", args=[self.result_id])

    @property
    def run_path(self) -> str:
        return reverse("runs:run_detail", args=[self.run_id])


@dataclass
class Member:
    """One node's share of a line."""

    node: Node
    status: str
    remedy: Remedy
    action: str
    results: list[Cited] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)

    @property
    def hostname(self) -> str:
        return self.node.hostname

    @property
    def node_path(self) -> str:
        return reverse("history:node_detail", args=[self.node.cluster.name, self.node.hostname])

    @property
    def runs(self) -> list[tuple[int, str]]:
        """(run id, its path) of the results cited, each run once."""
        return list(dict.fromkeys((c.run_id, c.run_path) for c in self.results))

    @property
    def reason(self) -> str:
        # Checks that judge the same fact repeat each other's sentences (the inventory cites the
        # software check's peer comparison): each sentence once.
        return "; ".join(dict.fromkeys(part.strip() for r in self.reasons for part in r.split("; ") if part.strip()))

    def key(self) -> tuple[Any, ...]:
        rules = sorted({(e.rule, e.threshold) for e in self.evidence})
        checks = tuple(sorted({c.item_key for c in self.results}))
        return (
            self.status,
            self.remedy.cause,
            self.action,
            checks,
            tuple(rules),
            normalise(self.reason, self.hostname),
        )


@dataclass
class Line:
    """One cause on one or more nodes: the triage view's row. What it derives from its members is
    worked out once (cached_property), when read: after triage_lines has made the line whole."""

    status: str
    cause: str
    action: str
    members: list[Member]

    @property
    def count(self) -> int:
        return len(self.members)

    @cached_property
    def node_set(self) -> str:
        return str(NodeSet.fromlist([m.hostname for m in self.members]))

    @property
    def checks(self) -> list[str]:
        return list(dict.fromkeys(c.check for m in self.members for c in m.results))

    @property
    def rules(self) -> list[str]:
        """Each rule once: "driver_version == 550.54.15"; a line without a measured rule has none."""
        seen = dict.fromkeys(f"{e.rule} {e.threshold}".strip() for m in self.members for e in m.evidence)
        return list(seen)

    @cached_property
    def cited(self) -> list[tuple[Cited, str]]:
        """Each result once, with the node it is that node's own result for when the line spans several
        nodes ("" for a group result the nodes share, or a one-node line)."""
        counts: dict[int, int] = {}
        for m in self.members:
            for c in m.results:
                counts[c.result_id] = counts.get(c.result_id, 0) + 1
        out: dict[int, tuple[Cited, str]] = {}
        for m in self.members:
            for c in m.results:
                own = m.hostname if self.count > 1 and counts[c.result_id] == 1 else ""
                out.setdefault(c.result_id, (c, own))
        return list(out.values())

    @cached_property
    def gpus(self) -> list[tuple[str, Gpu]]:
        return [(m.hostname, g) for m in self.members for g in m.gpus]

    @property
    def reason(self) -> str:
        return self.members[0].reason

    # What a page lists of a line, LISTED of each at most (the exports list everything).
    @property
    def listed_members(self) -> list[Member]:
        return self.members[:LISTED]

    @property
    def more_members(self) -> int:
        return max(0, self.count - LISTED)

    @property
    def listed_cited(self) -> list[tuple[Cited, str]]:
        return self.cited[:LISTED]

    @property
    def more_cited(self) -> int:
        return max(0, len(self.cited) - LISTED)

    @cached_property
    def evidence(self) -> list[tuple[Member, Evidence]]:
        return [(m, e) for m in self.members for e in m.evidence]

    @property
    def listed_evidence(self) -> list[tuple[Member, Evidence]]:
        return self.evidence[:LISTED]

    @property
    def more_evidence(self) -> int:
        return max(0, len(self.evidence) - LISTED)

    @property
    def listed_gpus(self) -> list[tuple[str, Gpu]]:
        return self.gpus[:LISTED]

    @property
    def more_gpus(self) -> int:
        return max(0, len(self.gpus) - LISTED)


def normalise(reason: str, hostname: str) -> str:
    """The reason with the node's own name and every number replaced (module docstring)."""
    return _NUMBER.sub("#", reason.replace(hostname, "<node>")) if hostname else _NUMBER.sub("#", reason)


def _measured(row: dict[str, Any]) -> str:
    if row["value"] is None:
        return row["text"] or "—"
    value = f"{row['value']:g}"
    return f"{value} {row['unit']}".strip()


def _check_names(results: Iterable[CheckResult]) -> dict[tuple[int, str], str]:
    # Each run's snapshot read once (one query), not once per result.
    snapshots = Run.objects.filter(pk__in={r.run_id for r in results}).values_list("pk", "plan_snapshot")
    return {
        (run_id, item.get("key", "")): item.get("name") or item.get("key", "")
        for run_id, snapshot in snapshots
        for item in (snapshot or {}).get("items", [])
    }


def _group_hosts(result: CheckResult) -> list[str]:
    try:
        return list(NodeSet(result.node_set)) if result.node_set else []
    except Exception:  # a node set that does not parse names no node: the launcher speaks for it
        return []


def _targets(result: CheckResult, nodes_by_host: dict[str, Node]) -> list[tuple[Node, str, str]]:
    """(node, status, reason) a result speaks for: the node itself, or a group result's failing
    attributed nodes (else every node of the set it spanned: the verdict is the group's)."""
    if result.scope != Scope.GROUP:
        return [(result.node, result.status, result.reason)]
    named = [
        (nodes_by_host[host], str(verdict.get("status")), str(verdict.get("reason", "")))
        for host, verdict in sorted((result.attribution or {}).items())
        if isinstance(verdict, dict) and verdict.get("status") in TRIAGED and host in nodes_by_host
    ]
    spanned = [nodes_by_host[h] for h in _group_hosts(result) if h in nodes_by_host] or [result.node]
    return named or [(node, result.status, f"{result.node_set}: {result.reason}") for node in spanned]


def _answered(results: list[CheckResult]) -> set[int]:
    """The errored results whose node returned something (an exit code, output, or samples): their
    error is in the answer, not in reaching the node."""
    errored = [r for r in results if r.status == Status.ERROR]
    if not errored:
        return set()
    sampled = set(Series.objects.filter(result__in=errored).values_list("result_id", flat=True))
    # has_output: annotated by triage_lines (the outputs themselves are not read).
    return {r.pk for r in errored if r.exit_code is not None or getattr(r, "has_output", False) or r.pk in sampled}


def _findings(result: CheckResult, bad: list[dict[str, Any]]) -> list[tuple[Remedy, str, list[dict[str, Any]]]]:
    """(remedy, action, the measurements it covers) for one failed result."""
    presentation = presentation_of(result.kind)
    if not bad:
        remedy = presentation.remedy_for(None)
        return [(remedy, remedy.action, [])]
    out: dict[tuple[str, str], tuple[Remedy, str, list[dict[str, Any]]]] = {}
    for row in bad:
        remedy = presentation.remedy_for(row["name"])
        action = remedy.action_for(row)
        out.setdefault((remedy.cause, action), (remedy, action, []))[2].append(row)
    return list(out.values())


def _members(results: list[CheckResult]) -> list[Member]:
    ids = [r.pk for r in results]
    bad: dict[int, list[dict[str, Any]]] = {}
    columns = ("result_id", "name", "value", "text", "unit", "gpu", "threshold", "recorded_at", "labels")
    for row in Measurement.objects.filter(result_id__in=ids, ok=False).order_by("id").values(*columns):
        bad.setdefault(row["result_id"], []).append(row)
    names = _check_names(results)
    answered = _answered(results)
    attributed = {h for r in results if r.scope == Scope.GROUP for h in [*(r.attribution or {}), *_group_hosts(r)]}
    cluster_ids = {r.node.cluster_id for r in results}
    nodes_by_host = {
        n.hostname: n
        for n in Node.objects.filter(cluster_id__in=cluster_ids, hostname__in=attributed).select_related("cluster")
    }
    members: dict[tuple[int, str, str, str], Member] = {}
    for result in results:
        check = names.get((result.run_id, result.item_key), result.item_key)
        cited = Cited(result.item_key, check, result.pk, result.run_id, result.finished_at)
        for node, status, reason in _targets(result, nodes_by_host):
            findings: list[tuple[Remedy, str, list[dict[str, Any]]]]
            if status == Status.ERROR:
                remedy = UNJUDGED_REMEDY if result.pk in answered else ERROR_REMEDY
                findings = [(remedy, remedy.action, [])]
            else:
                findings = _findings(result, bad.get(result.pk, []))
            for remedy, action, rows in findings:
                member = members.setdefault(
                    (node.pk, status, remedy.cause, action),
                    Member(node=node, status=status, remedy=remedy, action=action),
                )
                if cited not in member.results:
                    member.results.append(cited)
                member.reasons.append(reason)
                member.evidence += [
                    Evidence(check, result.pk, r["name"], _measured(r), r["threshold"], r["gpu"], r["recorded_at"])
                    for r in rows
                ]
    return list(members.values())


def _identity_kinds() -> tuple[list[str], str, str]:
    """The kinds that record GPU identities, and the measurement names of a serial and a bus id."""
    kinds, serial, bus = [], "", ""
    for kind, p in presented():
        fields = {f: name for name, f in p.gpu_identity}
        if "serial" in fields or p.gpu_bus_id:
            kinds.append(kind)
            serial = serial or fields.get("serial", "")
            bus = bus or p.gpu_bus_id
    return kinds, serial, bus


def _identity_sources(wanted: list[Member], kinds: list[str]) -> dict[int, int]:
    """Member (by id()) -> the identity result its GPUs are read from: the node's result of the same
    run when there is one, else its latest before the failing result, else its latest."""
    candidates: dict[int, list[tuple[int, int]]] = {}
    for row in (
        CheckResult.objects.filter(node_id__in={m.node.pk for m in wanted}, kind__in=kinds, status__in=_MEASURED)
        .order_by("-id")
        .values("id", "node_id", "run_id")
    ):
        candidates.setdefault(row["node_id"], []).append((row["id"], row["run_id"]))
    chosen: dict[int, int] = {}
    for m in wanted:
        found = candidates.get(m.node.pk, [])
        first = m.results[0]
        same_run = [i for i, run in found if run == first.run_id]
        before = [i for i, _ in found if i < first.result_id]
        pick = (same_run or before or [i for i, _ in found])[:1]
        if pick:
            chosen[id(m)] = pick[0]
    return chosen


def _attach_gpus(members: list[Member]) -> None:
    """Each member's GPUs (those its evidence names) with their serial and PCI bus id."""
    wanted = [m for m in members if any(e.gpu is not None for e in m.evidence)]
    kinds, serial_name, bus_name = _identity_kinds()
    if not wanted or not kinds:
        return
    chosen = _identity_sources(wanted, kinds)
    ids: dict[tuple[int, int], dict[str, str]] = {}
    for ident in Measurement.objects.filter(
        result_id__in=set(chosen.values()), name__in=[serial_name, bus_name], gpu__isnull=False
    ).values("result_id", "name", "gpu", "text"):
        ids.setdefault((ident["result_id"], ident["gpu"] or 0), {})[ident["name"]] = ident["text"]
    for m in wanted:
        source = chosen.get(id(m))
        for index in sorted({e.gpu for e in m.evidence if e.gpu is not None}):
            known = ids.get((source, index), {}) if source is not None else {}
            m.gpus.append(Gpu(index, known.get(serial_name, ""), known.get(bus_name, "")))


# What the lines are made of: never the outputs (has_output says whether there were any).
_TRIAGE_FIELDS = (
    "run", "node__hostname", "node__serial", "node__cluster__name", "item_key", "kind", "scope", "node_set",
    "attribution", "position", "status", "reason", "exit_code", "finished_at",
)  # fmt: skip


def triage_lines(*, result_ids: Iterable[int] | None = None, run_id: int | None = None) -> list[Line]:
    """The triage lines of these results (those that failed or errored), or of a run's, failures
    first, then by how many nodes share the line and the first node's name."""
    found = CheckResult.objects.filter(status__in=TRIAGED)
    if run_id is not None:
        found = found.filter(run_id=run_id)  # its failed results only (the status index), not every id of the run
    if result_ids is not None:
        found = found.filter(pk__in=list(result_ids))
    results: list[CheckResult] = list(
        found.select_related("node", "node__cluster")
        .only(*_TRIAGE_FIELDS)
        .annotate(has_output=ExpressionWrapper(~Q(stdout="") | ~Q(stderr=""), output_field=BooleanField()))
        .order_by("node__hostname", "position", "id")
    )
    members = _members(results)
    _attach_gpus(members)
    lines: dict[tuple[Any, ...], Line] = {}
    for m in members:
        line = lines.setdefault(m.key(), Line(status=m.status, cause=m.remedy.cause, action=m.action, members=[]))
        line.members.append(m)
    order: dict[str, int] = {Status.FAIL: 0, Status.ERROR: 1}
    return sorted(lines.values(), key=lambda ln: (order.get(ln.status, 2), -ln.count, ln.members[0].hostname))


def run_triage(*, run_id: int) -> list[Line]:
    """A run's triage lines."""
    return triage_lines(run_id=run_id)


def failing_nodes(lines: list[Line]) -> tuple[str, int]:
    """The folded node set of the nodes the lines name (those with a failed or errored check), and
    how many they are."""
    hosts = {m.hostname for line in lines for m in line.members}
    return (str(NodeSet.fromlist(sorted(hosts))) if hosts else ""), len(hosts)


def campaign_triage(*, state: Any) -> list[Line]:
    """A campaign's triage lines: its open cells' latest results (portal/certificates/selectors.py)."""
    return triage_lines(result_ids=[c.result_id for c in state.open_cells if c.result_id is not None])
