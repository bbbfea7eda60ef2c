"""Node health from finished runs: each judged node's state, its transitions, and what they set
off (alerts and scheduler hooks, queued on commit)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from portal.health.models import (
    ActionStatus,
    ClusterHealthSettings,
    HealthState,
    HealthTransition,
    NodeHealth,
    ScheduledFire,
)
from portal.health.services.alerts import alerts_create
from portal.health.services.scheduler import hooks_plan
from portal.inventory.models import Cluster, Node
from portal.runs.dbretry import db_retry
from portal.runs.models import ACTIVE_STATUSES, Run, Status
from portal.runs.selectors import judgements
from worker.celery import app

logger = logging.getLogger(__name__)

# The tasks' names: a contract with messages in flight (portal/health/tasks.py).
ALERT_DELIVER = "kiln.alert_deliver"
SCHEDULER_ACTION = "kiln.scheduler_action"


# Result statuses that judge a node, worst first. skipped/cancelled say nothing about the hardware.
_RANK = {Status.FAIL: 3, Status.ERROR: 2, Status.WARN: 1, Status.PASS: 0}
# Error reasons that mean Kiln could not reach the node at all (worker/ssh.py TransportError kinds).
_UNREACHABLE_PREFIXES = ("unreachable", "authentication", "host key", "transport")


@dataclass(frozen=True)
class Judged:
    """One result as health sees it: status, reason and the check's display name."""

    status: str
    reason: str
    check: str


def state_from_results(results: list[Judged]) -> tuple[str, str] | None:
    """A node's health from its results in one run, and the cause (the worst result's reason).

    - any `fail` -> failed (it ran and the hardware is out of spec);
    - every result `error`, or an error that says the node could not be reached -> unreachable;
    - any other `error`, or any `warn` -> degraded;
    - all `pass` -> healthy.
    None when no result judged the node (all skipped or cancelled): its state is left alone.
    """
    judged = [r for r in results if r.status in _RANK]
    if not judged:
        return None
    worst = max(judged, key=lambda r: _RANK[Status(r.status)])
    cause = f"{worst.check}: {worst.reason}" if worst.reason else worst.check
    if worst.status == Status.FAIL:
        return HealthState.FAILED, cause
    errors = [r for r in judged if r.status == Status.ERROR]
    unreachable = [r for r in errors if r.reason.lower().startswith(_UNREACHABLE_PREFIXES)]
    if unreachable:
        r = unreachable[0]
        return HealthState.UNREACHABLE, f"{r.check}: {r.reason}"
    if errors and len(errors) == len(judged):
        return HealthState.UNREACHABLE, cause
    if worst.status in (Status.ERROR, Status.WARN):
        return HealthState.DEGRADED, cause
    return HealthState.HEALTHY, ""


def _judged_per_node(run: Run) -> dict[int, list[Judged]]:
    """The run's judgements per node (runs.selectors.judgements, which the cluster page's "Last
    status" reads too): a result Kiln failed to judge or record (portal_fault) never moves a node's
    health nor fires an alert, and a multi-node result counts for the nodes its output named."""
    names = {item["key"]: item.get("name") or item["key"] for item in run.plan_snapshot.get("items", [])}
    per_node: dict[int, list[Judged]] = {}
    for j in judgements(results=run.results.all(), cluster_id=run.cluster_id):
        per_node.setdefault(j.node_id, []).append(Judged(j.status, j.reason, names.get(j.item_key, j.item_key)))
    return per_node


def health_evaluate_run(*, run_id: int) -> list[HealthTransition]:
    """Update the health of every node a finished run judged; record transitions; queue their
    alerts and scheduler hooks (on commit). Idempotent: a second call finds no state change.
    A run older than the one a node's state already came from does not overwrite it. Retried
    across a lost database connection (portal/runs/dbretry.py), like the run's own closing."""
    return db_retry(lambda _: _health_evaluate_run(run_id=run_id), what=f"node health of run {run_id}")


def _health_evaluate_run(*, run_id: int) -> list[HealthTransition]:
    run = Run.objects.select_related("cluster").filter(pk=run_id).first()
    if run is None or run.status in ACTIVE_STATUSES or run.status == Status.CANCELLED:
        return []
    per_node = _judged_per_node(run)
    sweep = ScheduledFire.objects.filter(run_id=run.pk).exists()
    now = timezone.now()
    transitions: list[HealthTransition] = []
    with transaction.atomic():
        healths = {h.node_id: h for h in NodeHealth.objects.select_for_update().filter(node_id__in=list(per_node))}
        missing = [NodeHealth(node_id=nid) for nid in per_node if nid not in healths]
        NodeHealth.objects.bulk_create(missing, ignore_conflicts=True)
        if missing:
            healths = {h.node_id: h for h in NodeHealth.objects.select_for_update().filter(node_id__in=list(per_node))}
        changed: list[NodeHealth] = []
        seen: list[int] = []  # judged again with the same state and cause: only last_run and checked_at move
        for node_id, results in per_node.items():
            health = healths[node_id]
            if health.last_run_id and health.last_run_id > run.pk:
                continue  # a newer run already judged this node
            verdict = state_from_results(results)
            if verdict is None:
                continue
            state, reason = verdict
            if (state, reason[:2000]) == (health.state, health.reason):
                seen.append(health.pk)
                continue
            if state != health.state:
                transitions.append(
                    HealthTransition(
                        node_id=node_id,
                        run=run,
                        from_state=health.state,
                        to_state=state,
                        reason=reason[:2000],
                        sweep=sweep,
                    )
                )
                health.since = now
            health.state, health.reason, health.last_run, health.checked_at = state, reason[:2000], run, now
            changed.append(health)
        # Two statements whatever the fleet's size: one UPDATE for the nodes that stay as they were
        # (the usual case of a sweep), and a CASE per field for those that changed.
        NodeHealth.objects.filter(pk__in=seen).update(last_run=run, checked_at=now)
        NodeHealth.objects.bulk_update(changed, ["state", "reason", "since", "last_run", "checked_at"])
        transitions = HealthTransition.objects.bulk_create(transitions)
        if transitions:
            _react(cluster=run.cluster, transitions=transitions, healths=healths)
    if transitions:  # one query for the names, however many nodes moved
        names = dict(Node.objects.filter(pk__in=[t.node_id for t in transitions]).values_list("pk", "hostname"))
        for t in transitions:
            logger.info("health: %s", t.describe(names.get(t.node_id, str(t.node_id))))
    return transitions


def _react(*, cluster: Cluster, transitions: list[HealthTransition], healths: dict[int, NodeHealth]) -> None:
    """Alerts and scheduler hooks for new transitions (inside the caller's transaction)."""
    cfg = ClusterHealthSettings.objects.filter(cluster=cluster).first()
    if cfg is None:
        return
    deliveries = alerts_create(cfg=cfg, transitions=transitions)
    actions = hooks_plan(cfg=cfg, cluster=cluster, transitions=transitions, healths=healths)
    delivery_ids = [d.pk for d in deliveries]
    action_ids = [a.pk for a in actions if a.status == ActionStatus.PENDING]
    transaction.on_commit(lambda: _enqueue(delivery_ids, action_ids, queue=cluster.queue))


def _enqueue(delivery_ids: list[int], action_ids: list[int], *, queue: str) -> None:
    """Alerts leave from the portal (default queue); a scheduler action SSHes to the cluster's
    controller, which only the workers of the cluster's queue reach (its retries stay there)."""
    # By name: the tasks call these services (app.signature finds the registered task, eager mode too).
    for pk in delivery_ids:
        app.signature(ALERT_DELIVER).delay(pk)
    for pk in action_ids:
        app.signature(SCHEDULER_ACTION).apply_async(args=(pk,), queue=queue)
