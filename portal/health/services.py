"""Writes of the health app: node health from finished runs, transitions, alert deliveries,
scheduler hooks, schedules (django-celery-beat), and the reaper. Keyword-only, typed."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal.health import conf, hooks
from portal.health.models import (
    ACTION_OPEN,
    DRAIN_STATES,
    ActionStatus,
    AlertDelivery,
    Channel,
    ClusterHealthSettings,
    DeliveryStatus,
    HealthState,
    HealthTransition,
    HookAction,
    HookMode,
    KilnDrain,
    NodeHealth,
    Schedule,
    ScheduledFire,
    SchedulerAction,
)
from portal.inventory.models import Cluster, Node, Scheduler
from portal.runs.dbretry import db_retry
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run, Scope, Status

logger = logging.getLogger(__name__)

# --- node health from results ------------------------------------------------------------------

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
    worst = max(judged, key=lambda r: _RANK[r.status])
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
    names = {item["key"]: item.get("name") or item["key"] for item in run.plan_snapshot.get("items", [])}
    per_node: dict[int, list[Judged]] = {}
    # A result that Kiln failed to judge or record (portal_fault: its database, a worker, a bug) says
    # nothing about the node: it never moves the node's health, nor fires an alert.
    for node_id, key, status, reason in (
        run.results.filter(scope=Scope.NODE, portal_fault=False)
        .order_by("position", "id")  # plan order per node: the first of equally bad results is the cause
        .values_list("node_id", "item_key", "status", "reason")
    ):
        per_node.setdefault(node_id, []).append(Judged(status, reason, names.get(key, key)))
    # Group results count for the nodes they name (attribution); an unattributed group failure
    # cannot be pinned on a node, so it does not change anyone's health.
    groups = list(run.results.filter(scope=Scope.GROUP, portal_fault=False).values_list("item_key", "attribution"))
    if groups:
        by_host = dict(run.cluster.nodes.values_list("hostname", "id"))
        for key, attribution in groups:
            for host, verdict in (attribution or {}).items():
                if host in by_host and isinstance(verdict, dict):
                    per_node.setdefault(by_host[host], []).append(
                        Judged(str(verdict.get("status", "")), str(verdict.get("reason", "")), names.get(key, key))
                    )
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
    transaction.on_commit(lambda: _enqueue(delivery_ids, action_ids))


def _enqueue(delivery_ids: list[int], action_ids: list[int]) -> None:
    from portal.health.tasks import alert_deliver, scheduler_action_run

    for pk in delivery_ids:
        alert_deliver.delay(pk)
    for pk in action_ids:
        scheduler_action_run.delay(pk)


# --- alerts ------------------------------------------------------------------------------------


def alert_wanted(transition: HealthTransition) -> bool:
    """Alerts fire on transitions only; a node's first verdict being `healthy` is no news."""
    return not (transition.from_state == HealthState.UNKNOWN and transition.to_state == HealthState.HEALTHY)


def alerts_create(*, cfg: ClusterHealthSettings, transitions: list[HealthTransition]) -> list[AlertDelivery]:
    rows = []
    for t in transitions:
        if not alert_wanted(t):
            continue
        if cfg.email_list:
            rows.append(
                AlertDelivery(
                    transition=t, cluster_id=cfg.cluster_id, channel=Channel.EMAIL, target=", ".join(cfg.email_list)
                )
            )
        if cfg.webhook_url:
            rows.append(
                AlertDelivery(transition=t, cluster_id=cfg.cluster_id, channel=Channel.WEBHOOK, target=cfg.webhook_url)
            )
    return AlertDelivery.objects.bulk_create(rows)


def alert_payload(*, transition: HealthTransition, cluster: Cluster, hostname: str) -> dict[str, Any]:
    text = transition.describe(hostname)
    payload: dict[str, Any] = {
        "event": "kiln.node_health",
        "cluster": cluster.name,
        "node": hostname,
        "from": transition.from_state,
        "to": transition.to_state,
        "recovery": transition.is_recovery,
        "reason": transition.reason,
        "run_id": transition.run_id,
        "sweep": transition.sweep,
        "at": transition.created_at.isoformat(),
        "text": text,
    }
    if conf.portal_url():
        from django.urls import reverse

        payload["url"] = conf.portal_url() + reverse("health:cluster", args=[cluster.name])
    return payload


def slack_body(payload: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook body (also accepted by Mattermost and Rocket.Chat)."""
    icon = ":white_check_mark:" if payload["recovery"] else ":rotating_light:"
    text = f"{icon} Kiln [{payload['cluster']}] {payload['text']}"
    if payload.get("url"):
        text += f" <{payload['url']}|details>"
    return {"text": text}


def alert_attempt(*, delivery: AlertDelivery) -> str:
    """Send one delivery once. Returns "" on success, else the error. Records the attempt."""
    from portal.health import notify

    transition = HealthTransition.objects.select_related("node", "node__cluster").get(pk=delivery.transition_id)
    payload = alert_payload(transition=transition, cluster=transition.node.cluster, hostname=transition.node.hostname)
    try:
        if delivery.channel == "email":
            notify.send_email(to=[a.strip() for a in delivery.target.split(",") if a.strip()], payload=payload)
        else:
            cfg = ClusterHealthSettings.objects.filter(cluster_id=delivery.cluster_id).first()
            slack = cfg is not None and cfg.webhook_format == "slack"
            notify.post_json(url=delivery.target, body=slack_body(payload) if slack else payload)
        error = ""
    except notify.DeliveryError as exc:
        error = str(exc)
    except Exception as exc:  # an SMTP or encoding error must be recorded, not lost
        error = f"{type(exc).__name__}: {exc}"
    delivery.attempts += 1
    delivery.last_error = error[:2000]
    if not error:
        delivery.status, delivery.sent_at = DeliveryStatus.SENT, timezone.now()
    elif delivery.attempts >= conf.alert_max_attempts():
        delivery.status = DeliveryStatus.FAILED
    else:
        delivery.status = DeliveryStatus.RETRYING
    delivery.save(update_fields=["attempts", "last_error", "status", "sent_at"])
    return error


def alert_retry_delay_s(*, attempts: int) -> float:
    """Exponential backoff: base, 2*base, 4*base, ... capped at one hour."""
    return min(3600.0, conf.alert_retry_base_s() * 2 ** max(0, attempts - 1))


# --- scheduler hooks ---------------------------------------------------------------------------


def hooks_plan(
    *, cfg: ClusterHealthSettings, cluster: Cluster, transitions: list[HealthTransition], healths: dict[int, NodeHealth]
) -> list[SchedulerAction]:
    """Drain/cordon nodes that went failed or unreachable; resume/uncordon recovered nodes that
    Kiln itself drained (never one an admin drained). Dry run records the commands only. The
    commands are the fixed ones of portal/health/hooks.py; one that cannot be built (a hostname
    scontrol or kubectl would misread, a bad kubectl context) is recorded as `failed`, never run."""
    if cfg.hook_mode == HookMode.OFF or cluster.scheduler not in (Scheduler.SLURM, Scheduler.KUBERNETES):
        return []
    dry = cfg.hook_mode == HookMode.DRY_RUN
    take, give = (
        (HookAction.DRAIN, HookAction.RESUME)
        if cluster.scheduler == Scheduler.SLURM
        else (HookAction.CORDON, HookAction.UNCORDON)
    )
    hostnames = dict(Node.objects.filter(pk__in=[t.node_id for t in transitions]).values_list("id", "hostname"))
    actions: list[SchedulerAction] = []
    touched: list[NodeHealth] = []
    for t in transitions:
        health = healths[t.node_id]
        host = hostnames[t.node_id]
        if t.to_state in DRAIN_STATES and t.from_state not in DRAIN_STATES and not health.kiln_drain:
            action, reason = take, f"{t.to_state}: {t.reason}"
            health.kiln_drain = KilnDrain.DRY_RUN if dry else KilnDrain.DRAINED
        elif t.to_state == HealthState.HEALTHY and health.kiln_drain == (
            KilnDrain.DRY_RUN if dry else KilnDrain.DRAINED
        ):
            action, reason = give, ""
            health.kiln_drain = ""
        else:
            continue
        touched.append(health)
        reason = reason[:250]
        try:
            argv = hooks.hook_argv(action=action, hostname=host, reason=reason, kubectl_context=cfg.kubectl_context)
            status, output = (ActionStatus.DRY_RUN if dry else ActionStatus.PENDING), ""
        except (hooks.HookRefused, conf.HookConfigError) as exc:
            argv, status, output = [], ActionStatus.FAILED, f"refused: {exc}"
            if action in TAKE_ACTIONS:
                health.kiln_drain = ""  # nothing was drained, so nothing is Kiln's to resume
        actions.append(
            SchedulerAction(
                node_id=t.node_id,
                transition=t,
                action=action,
                reason=reason,
                argv=argv,
                dry_run=dry,
                status=status,
                output=output,
                finished_at=timezone.now() if dry or status == ActionStatus.FAILED else None,
            )
        )
    NodeHealth.objects.bulk_update(touched, ["kiln_drain"])
    return SchedulerAction.objects.bulk_create(actions)


TAKE_ACTIONS = (HookAction.DRAIN, HookAction.CORDON)
GIVE_ACTIONS = (HookAction.RESUME, HookAction.UNCORDON)


def _hook_lease() -> timedelta:
    """How long a claimed (`running`) action may go unfinished before another delivery takes it
    over: its command's budget, the connect and auth timeouts, and slack."""
    return timedelta(seconds=conf.hook_timeout_s() + 4 * settings.KILN_SSH_CONNECT_TIMEOUT + 60)


def scheduler_action_execute(*, action_id: int) -> SchedulerAction:
    """Run a pending (or retrying) scheduler action on the controller, once.

    A failure is retried (status `retrying`, the task backs off) until KILN_SCHEDULER_HOOK_MAX_ATTEMPTS;
    then it is `failed`. A failed drain clears `kiln_drain` (Kiln did not drain it, so must not resume
    it later); a failed resume keeps it (still Kiln's to resume). An action that a newer one for the
    same node has overtaken is `superseded` and never runs late: a drain retried after the node
    recovered would take a healthy node out. A resume whose drain never took effect is `skipped`;
    one whose drain is still being attempted waits for it (`retrying`).

    The decision is taken under a short lock on the node's health row and the action is claimed
    (`running`); the scontrol/kubectl call itself runs outside any transaction.
    """
    action, verdict = _scheduler_action_claim(action_id)
    if verdict is not None:
        return action
    cfg = ClusterHealthSettings.objects.get(cluster_id=action.node.cluster_id)
    ok, text, retry = _scheduler_command_run(cfg, action)
    with transaction.atomic():
        list(NodeHealth.objects.select_for_update().filter(node_id=action.node_id))
        action.attempts += 1
        if ok:
            return _scheduler_action_close(action, ActionStatus.DONE, text)
        if retry and action.attempts < conf.hook_max_attempts():
            action.status = ActionStatus.RETRYING
            action.output = f"attempt {action.attempts} of {conf.hook_max_attempts()} failed: {text}"[:4000]
            action.save(update_fields=["status", "attempts", "output"])
            return action
        action = _scheduler_action_close(
            action, ActionStatus.FAILED, f"failed after {action.attempts} attempt(s): {text}"
        )
        if action.action in TAKE_ACTIONS:
            NodeHealth.objects.filter(node_id=action.node_id, kiln_drain=KilnDrain.DRAINED).update(kiln_drain="")
        else:
            # Still ours to resume.
            NodeHealth.objects.filter(node_id=action.node_id).update(kiln_drain=KilnDrain.DRAINED)
        return action


def _scheduler_action_claim(action_id: int) -> tuple[SchedulerAction, str | None]:
    """(the action, None) when this delivery should run it (now `running`); else (the action, why
    not): finished already, claimed by a live attempt, superseded, skipped, or waiting for its drain."""
    with transaction.atomic():
        node_id = SchedulerAction.objects.filter(pk=action_id).values_list("node_id", flat=True).get()
        # One decision per node at a time: a resume deciding "nothing to undo" must see a drain
        # attempt that is in flight (`running`), not miss it.
        list(NodeHealth.objects.select_for_update().filter(node_id=node_id))
        action = SchedulerAction.objects.select_related("node", "node__cluster").get(pk=action_id)
        now = timezone.now()
        if action.status == ActionStatus.RUNNING and action.started_at and now - action.started_at < _hook_lease():
            return action, "claimed by a live attempt"
        if action.status not in ACTION_OPEN:
            return action, "finished"
        newer = (
            SchedulerAction.objects.filter(node_id=node_id, dry_run=False, pk__gt=action.pk)
            .exclude(status=ActionStatus.DRY_RUN)
            .order_by("pk")
            .first()
        )
        if newer is not None:
            why = f"not run: superseded by {newer.action} #{newer.pk} for this node"
            return _scheduler_action_close(action, ActionStatus.SUPERSEDED, why), ActionStatus.SUPERSEDED
        if action.action in GIVE_ACTIONS:
            taken = (
                SchedulerAction.objects.filter(
                    node_id=node_id, dry_run=False, pk__lt=action.pk, action__in=TAKE_ACTIONS
                )
                .order_by("-pk")
                .first()
            )
            if taken is not None and taken.status in ACTION_OPEN:
                # The drain is still being attempted: decide after it (each wait counts as an attempt).
                action.attempts += 1
                waiting = f"{taken.action} #{taken.pk} is still {taken.status}"
                if action.attempts >= conf.hook_max_attempts():
                    return _scheduler_action_close(
                        action, ActionStatus.FAILED, f"not run: {waiting}"
                    ), ActionStatus.FAILED
                action.status, action.output = ActionStatus.RETRYING, f"waiting: {waiting}"
                action.save(update_fields=["status", "attempts", "output"])
                return action, "waiting"
            if taken is None or taken.status != ActionStatus.DONE:
                why = "no earlier drain" if taken is None else f"{taken.action} #{taken.pk} {taken.status}, not done"
                return _scheduler_action_close(
                    action, ActionStatus.SKIPPED, f"not run: nothing to undo ({why})"
                ), ActionStatus.SKIPPED
        action.status, action.started_at = ActionStatus.RUNNING, now
        action.save(update_fields=["status", "started_at"])
        return action, None


def _scheduler_command_run(cfg: ClusterHealthSettings, action: SchedulerAction) -> tuple[bool, str, bool]:
    """(ok, what it printed or why it failed, whether a retry may help): one scontrol/kubectl call
    on the controller. The argv and the target are rebuilt from server configuration and the
    node's hostname (hooks.py), never taken from the stored row; one that cannot be built is
    refused, and not retried."""
    from checks.base import Command
    from worker.ssh import TransportError, open_transport

    try:
        argv = hooks.action_argv(action=action, cfg=cfg)
        target = hooks.controller_target(cfg)
    except (hooks.HookRefused, conf.HookConfigError) as exc:
        return False, f"refused: {exc}", False
    if argv != action.argv:
        action.argv = argv
        SchedulerAction.objects.filter(pk=action.pk).update(argv=argv)
    try:
        # Local only when the server's KILN_CONTROLLER_TRANSPORT says so (controller_target).
        transport = open_transport(target, allow_local=target.transport == "local")
        try:
            out = transport.run(Command(argv=tuple(argv), timeout=conf.hook_timeout_s(), label=action.action))
        finally:
            transport.close()
    except TransportError as exc:
        return False, f"{exc.kind}: {hooks.hook_output(exc.message)}", True
    text = hooks.hook_output(out.stdout + out.stderr) or f"exit {out.exit_code}"
    if out.timed_out:
        return False, f"timed out after {conf.hook_timeout_s():g}s. {text}", True
    return out.exit_code == 0, text, True


def _scheduler_action_close(action: SchedulerAction, status: str, output: str) -> SchedulerAction:
    action.status = status
    action.output = output[:4000]
    action.finished_at = timezone.now()
    action.save(update_fields=["status", "attempts", "output", "finished_at"])
    return action


def scheduler_action_retry_delay_s(*, attempts: int) -> float:
    """Exponential backoff: base, 2*base, 4*base, ... capped at one hour."""
    return min(3600.0, conf.hook_retry_base_s() * 2 ** max(0, attempts - 1))


# --- schedules ---------------------------------------------------------------------------------


class ScheduleError(ValueError):
    """The schedule cannot be saved as asked; the message says why."""


def crontab_parse(expression: str) -> dict[str, str]:
    """'m h dom mon dow' -> CrontabSchedule fields, validated by celery's own crontab parser."""
    from celery.schedules import crontab

    parts = expression.split()
    if len(parts) != 5:
        raise ScheduleError(f"crontab {expression!r}: expected 5 fields (minute hour day-of-month month day-of-week)")
    fields = dict(zip(["minute", "hour", "day_of_month", "month_of_year", "day_of_week"], parts, strict=True))
    try:
        crontab(**fields)
    except (ValueError, TypeError) as exc:
        raise ScheduleError(f"crontab {expression!r}: {exc}") from None
    return fields


def _periodic_task_sync(schedule: Schedule) -> None:
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    fields = crontab_parse(schedule.crontab)
    cron, _ = CrontabSchedule.objects.get_or_create(**fields, timezone="UTC")
    defaults = {
        "task": "kiln.scheduled_run",
        "crontab": cron,
        "interval": None,
        "kwargs": json.dumps({"schedule_id": schedule.pk}),
        "enabled": schedule.enabled,
        "description": f"Kiln schedule #{schedule.pk}: {schedule.plan.slug} on {schedule.cluster.name}",
    }
    task, _ = PeriodicTask.objects.update_or_create(name=f"kiln-schedule-{schedule.pk}", defaults=defaults)
    if schedule.periodic_task_id != task.pk:
        schedule.periodic_task = task
        schedule.save(update_fields=["periodic_task"])


def _schedule_validate(*, cluster: Cluster, crontab: str, node_set: str) -> str:
    """The normalised crontab; ScheduleError when the crontab or the node set is wrong."""
    from portal.runs.services import RunStartError, nodes_select

    crontab = " ".join(crontab.split())
    crontab_parse(crontab)
    try:
        nodes_select(cluster=cluster, node_set=node_set)
    except RunStartError as exc:
        raise ScheduleError(str(exc)) from None
    return crontab


@transaction.atomic
def schedule_create(
    *, name: str, cluster: Cluster, plan: Any, crontab: str, node_set: str = "", created_by: Any = None
) -> Schedule:
    crontab = _schedule_validate(cluster=cluster, crontab=crontab, node_set=node_set)
    schedule = Schedule.objects.create(
        name=name,
        cluster=cluster,
        plan=plan,
        crontab=crontab,
        node_set=node_set.strip(),
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    _periodic_task_sync(schedule)
    return schedule


@transaction.atomic
def schedule_update(
    *, schedule: Schedule, name: str, cluster: Cluster, plan: Any, crontab: str, node_set: str = ""
) -> Schedule:
    """Change a schedule; beat's DatabaseScheduler sees the new crontab without a restart. Runs it
    already started keep the plan they snapshot."""
    crontab = _schedule_validate(cluster=cluster, crontab=crontab, node_set=node_set)
    schedule.name, schedule.cluster, schedule.plan = name, cluster, plan
    schedule.crontab, schedule.node_set = crontab, node_set.strip()
    schedule.save(update_fields=["name", "cluster", "plan", "crontab", "node_set"])
    _periodic_task_sync(schedule)
    return schedule


@transaction.atomic
def schedule_set_enabled(*, schedule: Schedule, enabled: bool) -> Schedule:
    schedule.enabled = enabled
    schedule.save(update_fields=["enabled"])
    _periodic_task_sync(schedule)
    return schedule


@transaction.atomic
def schedule_delete(*, schedule: Schedule) -> None:
    task = schedule.periodic_task
    schedule.delete()
    if task is not None:
        task.delete()  # PeriodicTask's own delete signal tells beat to reload


def scheduled_run_fire(*, schedule_id: int, task_id: str = "", now: datetime | None = None) -> Run | None:
    """Start the schedule's run for this firing, once. The firing is the beat tick's minute (crontab
    granularity); a redelivered message (same task id) or a second beat in the same minute finds
    the ScheduledFire row and starts nothing."""
    from portal.runs.services import RunStartError, nodes_select, run_start

    schedule = Schedule.objects.select_related("cluster", "plan", "created_by").filter(pk=schedule_id).first()
    if schedule is None or not schedule.enabled:
        return None
    fire_time = (now or timezone.now()).replace(second=0, microsecond=0)
    if task_id and ScheduledFire.objects.filter(schedule=schedule, task_id=task_id).exists():
        return None
    try:
        with transaction.atomic():
            fire = ScheduledFire.objects.create(schedule=schedule, fire_time=fire_time, task_id=task_id)
            nodes = nodes_select(cluster=schedule.cluster, node_set=schedule.node_set)
            run = run_start(cluster=schedule.cluster, plan=schedule.plan, nodes=nodes, requested_by=schedule.created_by)
            fire.run = run
            fire.save(update_fields=["run"])
    except IntegrityError:
        return None  # this minute's firing already happened
    except RunStartError as exc:
        ScheduledFire.objects.get_or_create(
            schedule=schedule, fire_time=fire_time, defaults={"task_id": task_id, "error": str(exc)[:2000]}
        )
        logger.warning("schedule %s: %s", schedule.pk, exc)
        return None
    logger.info("schedule %s started run %s", schedule.pk, run.pk)
    return run


# --- reaper ------------------------------------------------------------------------------------


def _limits(snapshot: dict[str, Any], node_count: int) -> tuple[float, float]:
    """(node task hard limit, all group tasks' hard limits summed), as the worker enqueues them."""
    from portal.runs.execution import group_item_limits
    from worker.timeouts import node_task_limits

    items = snapshot.get("items", [])
    connect = settings.KILN_SSH_CONNECT_TIMEOUT
    node_items = [i["timeout_s"] for i in items if i.get("scope", Scope.NODE) == Scope.NODE]
    _, node_hard = node_task_limits(command_budgets=node_items or [0], connect_timeout=connect)
    group_total = 0.0
    for item in items:
        if item.get("scope", Scope.NODE) == Scope.GROUP:
            group_total += group_item_limits(item=item, node_count=node_count)[1]
    return float(node_hard), group_total


def reap(*, now: datetime | None = None) -> list[int]:
    """First the liveness rules (portal/runs/reaper.py: lapsed leases, lost messages, orphaned
    node-side processes); then, as a backstop, mark results stuck past their deadline as `error`
    (with the reason), then finalize their runs. Also finalizes active runs that have no active
    result left (a worker died between recording and finalizing). Returns the ids of the runs it
    touched.

    Deadlines (the same nested limits the worker enqueues with, worker/timeouts.py):
    - running node result: started_at + the node task's hard limit + KILN_REAPER_GRACE_S;
    - running group result: started_at + that group task's hard limit + grace;
    - queued result: run.created_at + KILN_REAPER_QUEUE_ALLOWANCE_S + node hard limit + every
      group hard limit + grace (a queue may be long; a group waits for the node checks).
    """
    from ClusterShell.NodeSet import NodeSet

    from portal.runs.execution import group_item_limits
    from portal.runs.reaper import reap_liveness
    from portal.runs.services import run_finalize

    now = now or timezone.now()
    by_lease = reap_liveness(now=now)
    grace = conf.reaper_grace_s()
    queue_allowance = conf.reaper_queue_allowance_s()
    active_runs = list(
        Run.objects.filter(status__in=ACTIVE_STATUSES).only("id", "plan_snapshot", "node_set", "created_at")
    )
    touched: set[int] = set()
    for run in active_runs:
        node_count = len(NodeSet(run.node_set or ""))
        node_hard, group_total = _limits(run.plan_snapshot, node_count)
        items = {i["key"]: i for i in run.plan_snapshot.get("items", [])}
        reaped = 0
        stuck_running = CheckResult.objects.filter(
            run=run, status=Status.RUNNING, scope=Scope.NODE, started_at__lt=now - timedelta(seconds=node_hard + grace)
        )
        reaped += stuck_running.update(
            status=Status.ERROR,
            reason=(
                f"reaped: still running {int(node_hard + grace)}s after it started (node task hard limit "
                f"{int(node_hard)}s + {int(grace)}s grace); its worker probably died"
            ),
            finished_at=now,
        )
        for result in CheckResult.objects.filter(run=run, status=Status.RUNNING, scope=Scope.GROUP).only(
            "id", "item_key", "started_at"
        ):
            item = items.get(result.item_key)
            if item is None:
                continue
            _, hard = group_item_limits(item=item, node_count=node_count)
            if result.started_at and result.started_at < now - timedelta(seconds=hard + grace):
                reaped += CheckResult.objects.filter(pk=result.pk, status=Status.RUNNING).update(
                    status=Status.ERROR,
                    reason=(
                        f"reaped: still running {int(hard + grace)}s after it started (group task hard limit "
                        f"{int(hard)}s + {int(grace)}s grace); its worker probably died"
                    ),
                    finished_at=now,
                )
        queue_deadline = run.created_at + timedelta(seconds=queue_allowance + node_hard + group_total + grace)
        if queue_deadline < now:
            reaped += CheckResult.objects.filter(run=run, status=Status.QUEUED).update(
                status=Status.ERROR,
                reason=(
                    f"reaped: still queued {int((now - run.created_at).total_seconds())}s after the run was created "
                    f"(allowance {int(queue_allowance)}s + the run's limits); no worker took it"
                ),
                finished_at=now,
            )
        stalled = not run.results.filter(Q(status__in=ACTIVE_STATUSES)).exists()
        if reaped or stalled or run.pk in by_lease:
            if reaped:
                logger.warning("reaper: run %s: %d result(s) marked error", run.pk, reaped)
            run_finalize(run_id=run.pk)
            touched.add(run.pk)
    return sorted(touched)


def reaper_schedule_ensure() -> None:
    """The reaper's PeriodicTask (every KILN_REAPER_INTERVAL_S). Called at post_migrate."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every, _ = IntervalSchedule.objects.get_or_create(every=conf.reaper_interval_s(), period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name="kiln-reaper",
        defaults={
            "task": "kiln.reap",
            "interval": every,
            "crontab": None,
            "enabled": True,
            "description": (
                "Acts on lapsed leases (worker lost: re-enqueue or error), re-sends lost messages, stops "
                "orphaned node-side processes; marks results stuck past their deadline as error; finalizes runs."
            ),
        },
    )
