"""Alerts on health transitions: who is told, the payload (plain JSON or Slack), one delivery
attempt with its backoff."""

from __future__ import annotations

import logging
from typing import Any

from django.urls import reverse
from django.utils import timezone

from portal.health import conf, notify
from portal.health.models import (
    AlertDelivery,
    Channel,
    ClusterHealthSettings,
    DeliveryStatus,
    HealthState,
    HealthTransition,
)
from portal.inventory.models import Cluster

logger = logging.getLogger(__name__)


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
