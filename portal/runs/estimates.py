"""How long a plan takes on a cluster, for the plan pickers ("Acceptance" once came first with no
duration, and on the demo it was a 12-hour burn-in).

Two sources. Before the plan has run on the cluster: its checks with their params resolved for the
cluster, each check's declared duration (a burn-in's, a soak's: checks/core/base.py `Check.declared_s`)
plus its overhead (the cluster's declared figure, else the check's own for real hardware), the node
checks one after another on each node and the nodes in parallel, then each multi-node check once.
Once it has run there: the median duration of its last finished runs, and the last one is shown.

The plans are listed with the cluster's acceptance plan first (marked, and preselected unless it
takes longer than an hour), then shortest first."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from checks.core.base import REGISTRY, ParamsError
from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster
from portal.runs.models import Run, Scope, Status
from portal.runs.snapshot import RunStartError, plan_snapshot_build

# The median of the last 5 finished runs: recent enough to follow a changed plan or cluster, and
# one slow run (a node that timed out) does not move it.
PAST_RUNS = 5
# Runs that went to the end: a cancelled run's duration says nothing about the plan's.
_FINISHED = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)
QUICK_PLAN = "quick"
# Past an hour a plan is not one to start to try things out (or by accident): its label says so,
# and it is never preselected, even as the cluster's acceptance plan.
LONG_S = 3600.0


@dataclass(frozen=True)
class PlanEstimate:
    plan: TestPlan
    from_params_s: float | None  # None: the plan does not resolve for this cluster (a bad param)
    past_median_s: float | None = None
    past_runs: int = 0
    last_run_s: float | None = None  # the newest finished run's duration
    recommended: bool = False  # the cluster's acceptance plan

    @property
    def expected_s(self) -> float | None:
        """What the plan takes here: measured once it has run here, else from its params."""
        return self.past_median_s if self.past_median_s is not None else self.from_params_s

    @property
    def long(self) -> bool:
        return self.expected_s is not None and self.expected_s > LONG_S

    @property
    def label(self) -> str:
        """'Quick sweep — about 2 min (last run: 1 min 40 s)', 'Acceptance — about 12 h — longer
        than an hour', 'Acceptance (demo speed) — about 3 min (recommended)'."""
        parts = [self.plan.name]
        if self.expected_s is not None:
            parts.append(f" — about {duration_text(self.expected_s, rough=True)}")
        if self.long:
            parts.append(" — longer than an hour")
        if self.last_run_s is not None:
            parts.append(f" (last run: {duration_text(self.last_run_s)})")
        if self.recommended:
            parts.append(" (recommended)")
        return "".join(parts)


def duration_text(seconds: float, *, rough: bool = False) -> str:
    """90 -> '1 min 30 s'; 43260 -> '12 h 1 min'. `rough`: one unit ('2 min', '1.5 h', '12 h')."""
    total = max(0, round(seconds))
    if rough:
        if total < 60:
            return f"{total} s"
        if total < 3600:
            return f"{round(total / 60)} min"
        return f"{total / 3600:.1f} h".replace(".0 h", " h") if total < 36000 else f"{round(total / 3600)} h"
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    units = ((hours, "h"), (minutes, "min")) if hours else ((minutes, "min"), (secs, "s"))
    return " ".join(f"{n} {unit}" for n, unit in units if n) or "0 s"


def items_estimate_s(
    items: Iterable[dict[str, Any]], *, nodes: int = 1, overhead_s: float | None = None, concurrency: int | None = None
) -> float:
    """A plan snapshot's items on `nodes` nodes: a node runs its checks one after another, the nodes
    in parallel, `concurrency` at a time (a worker's task slots; default: the settings'); then each
    multi-node check runs once, one after another (portal/runs/finalize.py). Each check takes its
    declared duration plus `overhead_s` (None: the check's own overhead)."""
    per_node = group = 0.0
    for item in items:
        check_class = REGISTRY[item["kind"]]
        check = check_class()
        seconds = check.declared_s(check_class.make_params(item["params"]))
        seconds += check.OVERHEAD_S if overhead_s is None else overhead_s
        if item.get("scope", check_class.scope) == Scope.GROUP:
            group += seconds
        else:
            per_node += seconds
    slots = max(1, concurrency if concurrency is not None else settings.CELERY_WORKER_CONCURRENCY)
    return per_node * math.ceil(max(1, nodes) / slots) + group


def plan_estimates(*, cluster: Cluster, plans: Iterable[TestPlan] | None = None) -> list[PlanEstimate]:
    """Every plan (or `plans`) with its estimate on this cluster: the cluster's acceptance plan
    first, then the shortest first (a plan that does not resolve here last), then by name."""
    chosen = list(plans if plans is not None else TestPlan.objects.all())
    saved = cluster.pk is not None
    past = past_durations(cluster=cluster, plan_ids=[p.pk for p in chosen]) if saved else {}
    nodes = cluster.nodes.count() if saved else 1
    found = []
    for plan in chosen:
        durations = past.get(plan.pk, [])
        found.append(
            PlanEstimate(
                plan=plan,
                from_params_s=_from_params(plan, cluster, nodes=nodes),
                past_median_s=statistics.median(durations) if durations else None,
                past_runs=len(durations),
                last_run_s=durations[0] if durations else None,
                recommended=plan.pk == cluster.acceptance_plan_id,
            )
        )
    return sorted(found, key=_order)


def _order(estimate: PlanEstimate) -> tuple[bool, bool, float, str]:
    expected = estimate.expected_s
    return (not estimate.recommended, expected is None, expected or 0.0, estimate.plan.name.lower())


def default_plan(found: list[PlanEstimate]) -> TestPlan | None:
    """The plan a picker preselects: the cluster's acceptance plan, else the quick sweep, unless it
    takes longer than an hour; else the first one that does not."""
    for wanted in (lambda e: e.recommended, lambda e: e.plan.slug == QUICK_PLAN, lambda e: True):
        for estimate in found:
            if wanted(estimate) and not estimate.long:
                return estimate.plan
    return None


def choices(found: list[PlanEstimate]) -> list[tuple[str, str]]:
    """(slug, label) for a plan select."""
    return [(e.plan.slug, e.label) for e in found]


def plan_choices(*, cluster: Cluster | None = None) -> list[tuple[str, str]]:
    """(slug, label) for a plan select, in plan_estimates' order. Without a cluster (a form that
    picks the cluster too) the params are resolved for no hardware profile in particular, and no
    past runs are shown."""
    # An unsaved cluster: the generic profile, no overrides, one node and no runs of its own.
    return choices(plan_estimates(cluster=cluster if cluster is not None else Cluster(name="-")))


def _from_params(plan: TestPlan, cluster: Cluster, *, nodes: int) -> float | None:
    try:
        items = plan_snapshot_build(plan=plan, cluster=cluster)["items"]
        return items_estimate_s(items, nodes=nodes, overhead_s=cluster.check_overhead_s)
    except (RunStartError, ParamsError, KeyError):
        return None


def past_durations(*, cluster: Cluster, plan_ids: list[int], keep: int = PAST_RUNS) -> dict[int, list[float]]:
    """plan id -> the durations (s) of its last `keep` finished runs on the cluster, newest first."""
    rows = (
        Run.objects.filter(cluster=cluster, plan_id__in=plan_ids, status__in=_FINISHED)
        .exclude(started_at=None)
        .exclude(finished_at=None)
        .order_by("-finished_at", "-id")
        .values_list("plan_id", "started_at", "finished_at")
    )
    found: dict[int, list[float]] = {}
    for plan_id, started, finished in rows.iterator():
        if plan_id is None or started is None or finished is None:
            continue
        kept = found.setdefault(plan_id, [])
        if len(kept) < keep:
            kept.append((finished - started).total_seconds())
        if len(found) == len(plan_ids) and all(len(v) >= keep for v in found.values()):
            break  # a cluster's long history need not be read to its end
    return found
