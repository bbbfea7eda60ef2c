"""How long a plan takes on a cluster, for the plan pickers (issue 16: "Acceptance" came first with
no duration, and on the demo it was a 12-hour burn-in).

Two sources, shown side by side: the plan's checks with their params resolved for the cluster
(each check says how long it takes: checks/base.py `Check.expected_s`), and, once the plan has run
there, the median duration of its last finished runs."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from checks.base import REGISTRY, ParamsError
from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster
from portal.runs.models import Run, Status
from portal.runs.snapshot import RunStartError, plan_snapshot_build

# The median of the last 5 finished runs: recent enough to follow a changed plan or cluster, and
# one slow run (a node that timed out) does not move it.
PAST_RUNS = 5
# Runs that went to the end: a cancelled run's duration says nothing about the plan's.
_FINISHED = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)
QUICK_PLAN = "quick"


@dataclass(frozen=True)
class PlanEstimate:
    plan: TestPlan
    from_params_s: float | None  # None: the plan does not resolve for this cluster (a bad param)
    past_median_s: float | None = None
    past_runs: int = 0

    @property
    def label(self) -> str:
        """'Quick sweep — about 2 min (last 3 runs: 1 min 40 s)'."""
        parts = [self.plan.name]
        if self.from_params_s is not None:
            parts.append(f" — about {duration_text(self.from_params_s, rough=True)}")
        if self.past_median_s is not None:
            runs = "last run" if self.past_runs == 1 else f"last {self.past_runs} runs"
            parts.append(f" ({runs}: {duration_text(self.past_median_s)})")
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


def items_estimate_s(items: Iterable[dict[str, Any]]) -> float:
    """The sum of a plan snapshot's items' expected durations: a node runs its checks one after
    another (nodes in parallel), and each multi-node check runs once, after them."""
    total = 0.0
    for item in items:
        check_class = REGISTRY[item["kind"]]
        total += check_class().expected_s(check_class.make_params(item["params"]))
    return total


def plan_estimates(*, cluster: Cluster, plans: Iterable[TestPlan] | None = None) -> list[PlanEstimate]:
    """Every plan (or `plans`) with its estimate on this cluster: the quick plan first, then by name."""
    chosen = sorted(
        plans if plans is not None else TestPlan.objects.all(), key=lambda p: (p.slug != QUICK_PLAN, p.name.lower())
    )
    past = past_durations(cluster=cluster, plan_ids=[p.pk for p in chosen]) if cluster.pk else {}
    estimates = []
    for plan in chosen:
        durations = past.get(plan.pk, [])
        estimates.append(
            PlanEstimate(
                plan=plan,
                from_params_s=_from_params(plan, cluster),
                past_median_s=statistics.median(durations) if durations else None,
                past_runs=len(durations),
            )
        )
    return estimates


def plan_choices(*, cluster: Cluster | None = None) -> list[tuple[str, str]]:
    """(slug, label) for a plan select: quick first, each with its estimate. Without a cluster (a
    form that picks the cluster too) the params are resolved for no hardware profile in particular,
    and no past runs are shown."""
    if cluster is None:
        # An unsaved cluster: the generic profile, no overrides, and no runs of its own.
        return [(e.plan.slug, e.label) for e in plan_estimates(cluster=Cluster(name="-"))]
    return [(e.plan.slug, e.label) for e in plan_estimates(cluster=cluster)]


def _from_params(plan: TestPlan, cluster: Cluster) -> float | None:
    try:
        return items_estimate_s(plan_snapshot_build(plan=plan, cluster=cluster)["items"])
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
