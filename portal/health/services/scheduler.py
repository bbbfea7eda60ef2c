"""Scheduler hooks: drain/cordon nodes that went bad, resume/uncordon the ones Kiln drained that
recovered; one fixed scontrol/kubectl call per action on the controller (portal/health/hooks.py)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from checks.core.base import Command
from portal.health import conf, hooks
from portal.health.models import (
    ACTION_OPEN,
    DRAIN_STATES,
    ActionStatus,
    ClusterHealthSettings,
    HealthState,
    HealthTransition,
    HookAction,
    HookMode,
    KilnDrain,
    NodeHealth,
    SchedulerAction,
)
from portal.inventory.models import Cluster, Node, Scheduler
from worker.ssh import TransportError, open_transport

logger = logging.getLogger(__name__)


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
            NodeHealth.objects.filter(node_id=action.node_id).update(
                kiln_drain=KilnDrain.DRAINED
            )  # still ours to resume
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
