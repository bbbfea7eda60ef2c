"""Freezing a plan for one cluster: the snapshot a run keeps of its checks (kinds, resolved params
and thresholds, time budgets) and of the queue its tasks go to, so later edits to the plan or the
cluster never change a run already made."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from checks.core.base import REGISTRY, ParamsError
from checks.core.profiles import get_profile
from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster


class RunStartError(ValueError):
    """The run cannot start as asked; the message says why, and nothing was created."""


def _merge(*layers: dict[str, Any] | None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer or {})
    return merged


def plan_snapshot_build(*, plan: TestPlan, cluster: Cluster) -> dict[str, Any]:
    """Freeze a plan for one cluster: kinds, fully-resolved params and thresholds, per item.

    Resolution order (later wins): check defaults < hardware profile < definition < plan item <
    cluster override. Every layer is validated by the check's own schema.
    """
    profile = get_profile(cluster.profile)
    items = []
    for position, item in enumerate(plan.items.select_related("check_definition").order_by("order", "id")):
        definition = item.check_definition
        check_class = REGISTRY.get(definition.kind)
        if check_class is None:
            raise RunStartError(f"plan item {definition.slug!r}: unknown check kind {definition.kind!r}")
        params = _merge(
            check_class.default_params(), profile.params_for(definition.kind), definition.params, item.param_overrides
        )
        thresholds = _merge(
            check_class.default_thresholds(),
            profile.thresholds_for(definition.kind),
            definition.thresholds,
            item.threshold_overrides,
            (cluster.threshold_overrides or {}).get(definition.kind, {}),
        )
        try:
            typed_params = check_class.make_params(params)
            check_class.make_thresholds(thresholds)
        except ParamsError as exc:
            raise RunStartError(f"plan item {definition.slug!r}: {exc}") from None
        check = check_class()
        items.append(
            {
                "key": definition.slug,
                "name": definition.name,
                "kind": definition.kind,
                "position": position,
                "params": params,
                "thresholds": thresholds,
                "timeout_s": check.timeout(typed_params),
                "scope": check_class.scope,
            }
        )
    if not items:
        raise RunStartError(f"plan {plan.slug!r} has no checks")
    return {
        "slug": plan.slug,
        "name": plan.name,
        "profile": profile.key,
        "items": items,
        # The Celery queue of the cluster's workers (portal/runs/queues.py): re-sends use this one.
        "queue": cluster.queue,
        "taken_at": timezone.now().isoformat(),
    }
