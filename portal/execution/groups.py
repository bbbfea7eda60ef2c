"""Running a run's multi-node checks: one check from its launcher over the run's reachable nodes,
localisation by halves when the group is not healthy (portal/runs/pairs.py), one result recorded
for the group with per-node attribution. Also a whole run in this process (kiln_run --inline).

Like the node execution (portal/execution/execution.py), database work is done in short phases and
the network is reached only through `worker.ssh`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings
from django.db import connection

from checks.core.base import (
    ERROR,
    PASS,
    CommandOutput,
    GroupCheck,
    GroupContext,
    Measurement,
    ParamsError,
    Series,
    Verdict,
    get_group_check,
    run_group_check,
    worst_status,
)
from checks.core.fanout import FanOutCheck
from portal.execution.execution import execute_node, node_context, node_target, series_of, snapshot_item
from portal.execution.fanout import run_fan_out
from portal.inventory.models import Node
from portal.runs import leases, services
from portal.runs.models import CheckResult, Run, Scope, Status
from portal.runs.pairs import localise, run_commands
from worker.db import db_phase
from worker.ssh import Transport, TransportError, open_transport


@dataclass
class _GroupRun:
    """What one group check's run produced, before it is recorded."""

    outputs: list[CommandOutput]
    measurements: list[Measurement]
    verdict: Verdict
    attribution: dict[str, Verdict]


def execute_group(*, run_id: int, result_id: int, claim: str, time_budget_s: float | None = None) -> bool:
    """Run one multi-node check from its launcher over the run's reachable nodes.

    Nodes whose per-node checks ended in `error` (unreachable, hung) are left out, so one dead
    node does not fail the collective for everyone; they are named in the reason. When the
    check supports it and the group is not healthy, halves of the group, then pairs, are run to
    localise the culprit, within `time_budget_s` from now (the task's soft limit less its slack; None: no limit).
    """
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    with db_phase("claim"):
        result = services.group_result_claim(result_id=result_id, claim=claim)
    if result is None:
        return False
    with leases.held(claim=claim, results=[result], label=f"result #{result_id}") as holding:
        try:
            return _execute_group_held(run_id=run_id, result=result, claim=claim, deadline=deadline, holding=holding)
        except leases.CheckStopped:
            return False  # cancelled (or reaped) while it ran: its process groups were stopped


def _record_error(result: CheckResult, claim: str, verdict: Verdict) -> bool:
    with db_phase("record"):
        return services.record_from_check(result=result, claim=claim, verdict=verdict, measurements=[], outputs=[])


def _execute_group_held(
    *, run_id: int, result: CheckResult, claim: str, deadline: float | None, holding: leases.Holding
) -> bool:
    with db_phase("claim"):
        run = Run.objects.select_related("cluster").get(pk=run_id)
        item = snapshot_item(run, result.item_key)
        check = get_group_check(item["kind"])
        params = check.make_params(item["params"])
        thresholds = check.make_thresholds(item["thresholds"])
        members, excluded = group_members(run)
        if len(members) < check.min_nodes:
            why = f"needs at least {check.min_nodes} reachable nodes, has {len(members)}"
            if excluded:
                why += f" ({NodeSet.fromlist(excluded)} left out after per-node errors)"
            verdict = Verdict(status=Status.ERROR if excluded else Status.SKIPPED, reason=why)
            return services.record_from_check(result=result, claim=claim, verdict=verdict, measurements=[], outputs=[])
    launcher = members[0]
    holding.label = f"launcher {launcher.hostname}"
    contexts = tuple(node_context(run, n) for n in members)
    group = GroupContext(nodes=contexts, launcher=contexts[0], tag=f"kiln-{run.pk}-{result.pk}")
    if isinstance(check, FanOutCheck):
        holding.label = f"{len(members)} nodes at once"
        holding.begin(result)
        try:
            fanned = run_fan_out(
                check=check,
                params=params,
                thresholds=thresholds,
                run=run,
                result=result,
                members=members,
                group=group,
                holding=holding,
            )
        except ParamsError as exc:  # e.g. more nodes than one soak can start
            return _record_error(result, claim, Verdict(status=ERROR, reason=str(exc)))
        done = _GroupRun(fanned.outputs, fanned.measurements, fanned.verdict, fanned.attribution)
        return _record(result, claim, done, members, excluded, series=fanned.series)
    try:
        transport = holding.track(open_transport(node_target(launcher)))
    except TransportError as exc:
        return _record_error(result, claim, _launcher_error(launcher, exc))
    try:
        leases.stop_taken_over(transport=transport.inner, results=[result], label=launcher.hostname)
        holding.begin(result)
        done = _run_group(check, params, thresholds, transport, group, deadline=deadline)
    except TransportError as exc:
        return _record_error(result, claim, _launcher_error(launcher, exc))
    finally:
        transport.close()
    return _record(result, claim, done, members, excluded, series=series_of(check, done.outputs, done.verdict))


def _record(
    result: CheckResult,
    claim: str,
    done: _GroupRun,
    members: list[Node],
    excluded: list[str],
    *,
    series: list[Series],
) -> bool:
    _attribute(done, members, excluded)
    with db_phase("record"):
        return services.record_from_check(
            result=result,
            claim=claim,
            verdict=done.verdict,
            measurements=done.measurements,
            outputs=done.outputs,
            series=series,
            attribution={h: {"status": v.status, "reason": v.reason} for h, v in done.attribution.items()},
            node_set=str(NodeSet.fromlist([n.hostname for n in members])),
        )


def _launcher_error(launcher: Node, exc: TransportError) -> Verdict:
    return Verdict(status=ERROR, reason=f"launcher {launcher.hostname}: {exc.kind}: {exc.message}")


def _run_group(
    check: GroupCheck,
    params: Any,
    thresholds: Any,
    transport: Transport,
    group: GroupContext,
    *,
    deadline: float | None,
) -> _GroupRun:
    """The group run, then the sub-runs (halves, then pairs) that localise a culprit when the check
    supports it and the group is not healthy."""
    outputs = run_commands(transport, check.group_commands(params, group))
    measurements, verdict = run_group_check(check, params, thresholds, outputs, group)
    done = _GroupRun(outputs, measurements, verdict, dict(getattr(verdict, "node_verdicts", {}) or {}))
    if not (check.pairwise and len(group.nodes) >= 3 and verdict.status != PASS):
        return done
    try:
        sub_outputs, sub_measurements, localised = localise(
            check,
            params,
            thresholds,
            transport,
            group,
            root=verdict,
            parallelism=settings.KILN_PAIR_PARALLELISM,
            deadline=deadline,
        )
    except TransportError as exc:
        # The group run stands; only the localisation could not be done.
        why = f"localisation not done: launcher {group.launcher.hostname}: {exc.kind}: {exc.message}"
        done.verdict = Verdict(status=verdict.status, reason=f"{verdict.reason}; {why}" if verdict.reason else why)
        return done
    done.outputs += sub_outputs
    done.measurements += sub_measurements
    done.attribution.update(localised.node_verdicts)
    merged = [verdict.status, localised.status] if sub_outputs else [verdict.status]
    done.verdict = Verdict(status=worst_status(merged), reason=_join(verdict, localised))
    return done


def _attribute(done: _GroupRun, members: list[Node], excluded: list[str]) -> None:
    if done.attribution:
        # The output named the nodes at fault; the other members were measured and are fine.
        named = ", ".join(sorted(h for h, v in done.attribution.items() if v.status != PASS)) or "no node"
        fine = Verdict(status=PASS, reason=f"within spec (attributed: {named})")
        for node in members:
            done.attribution.setdefault(node.hostname, fine)
    if excluded:
        done.verdict.reason += f" (left out after per-node errors: {NodeSet.fromlist(excluded)})"
        for hostname in excluded:
            done.attribution[hostname] = Verdict(status=Status.SKIPPED, reason="left out: per-node checks errored")


def group_members(run: Run) -> tuple[list[Node], list[str]]:
    """The run's nodes in hostname order, less those whose per-node checks errored."""
    nodes = {r.node_id: r.node for r in run.results.filter(scope=Scope.NODE).select_related("node__cluster")}
    if not nodes:  # a plan of group checks only: every node of the run
        names = list(NodeSet(run.node_set))
        members = list(Node.objects.filter(cluster=run.cluster, hostname__in=names).select_related("cluster"))
        return sorted(members, key=lambda n: n.hostname), []
    errored = set(run.results.filter(scope=Scope.NODE, status=Status.ERROR).values_list("node_id", flat=True))
    members = sorted((n for pk, n in nodes.items() if pk not in errored), key=lambda n: n.hostname)
    excluded = sorted(n.hostname for pk, n in nodes.items() if pk in errored)
    return members, excluded


def _join(group: Verdict, localised: Verdict) -> str:
    return f"{group.reason}; localisation: {localised.reason}" if group.reason else localised.reason


def execute_run_inline(*, run_id: int, node_ids: list[int], max_workers: int = 32) -> None:
    """Run a whole run in this process (kiln_run --inline): node checks in threads, then groups."""

    def one(node_id: int) -> None:
        try:
            execute_node(run_id=run_id, node_id=node_id, claim=f"inline-{run_id}-{node_id}")
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(node_ids)))) as pool:
        list(pool.map(one, node_ids))
    while True:
        services.run_finalize(run_id=run_id, dispatch=False)
        group = CheckResult.objects.filter(run_id=run_id, scope=Scope.GROUP, status=Status.QUEUED).order_by("position")
        result = group.first()
        if result is None:
            break
        CheckResult.objects.filter(pk=result.pk, claimed_by="").update(claimed_by="dispatched")
        execute_group(run_id=run_id, result_id=result.pk, claim=f"inline-group-{result.pk}")
    services.run_finalize(run_id=run_id, dispatch=False)
