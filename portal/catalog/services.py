"""Writes for the check catalog: the built-in definitions and plans, with stable slugs.

Each built-in definition is a registered check kind that declares itself `catalogued`: its slug,
name and description come from the check class (checks/core/base.py), and so do the params that run it
at simulator speed (`simulator_params`)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from checks.core.base import catalogued, simulator_params
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

# Plan slug -> (name, description, [(check slug, param overrides)]) in order. `quick` holds the
# fast checks; `acceptance` is the full plan. ECC/Xid runs after the load checks in acceptance, so
# errors and Xids raised under load are caught. Built-in plans are kept in sync on every migrate:
# copy one to customise it.
BUILTIN_PLANS: dict[str, tuple[str, str, list[tuple[str, dict[str, Any]]]]] = {
    "quick": (
        "Quick sweep",
        "Fast health checks for nightly sweeps (built in; copy it to customise).",
        [
            ("gpu-inventory", {}),
            ("sw-consistency", {}),
            ("ecc-health", {}),
            ("gpu-links", {}),
            ("ib-ports", {}),
            # Idle temperatures only: a sweep on a cluster in service starts no load.
            ("dlc-temperature", {"idle_s": 5, "load_s": 0}),
            # A short run: fewer iterations at every size; the sizes still reach the peak plateau.
            ("nccl-allreduce", {"iters": 5, "warmup_iters": 2}),
        ],
    ),
    "acceptance": (
        "Acceptance",
        "The full acceptance plan for handover (built in; copy it to customise).",
        [
            ("gpu-inventory", {}),
            ("sw-consistency", {}),
            # How the node is set up for GPU work (fabric, ACS, IOMMU, clocks) and wired
            # (each GPU's NIC on its own PCIe switch), before any load runs on it.
            ("gpu-config", {}),
            ("topology", {}),
            ("gpu-links", {}),
            ("host-bw", {}),
            ("ib-ports", {}),
            # Every rail's RDMA bandwidth and latency, each HCA to its peer on the next node.
            ("rdma-bw", {}),
            ("nccl-allreduce", {}),
            # 12 h at full tensor-core load: infant-mortality burn-in before handover.
            ("burn-in", {"duration_s": 43200, "use_tensor_cores": True}),
            ("dlc-temperature", {}),
            ("fs-throughput", {}),
            # Data loading is small files: metadata rates per node.
            ("fs-metadata", {}),
            ("ecc-health", {}),
            ("nccl-allreduce-multi", {}),
            # Expert-parallel traffic, the test of the fabric's bisection.
            ("nccl-alltoall-multi", {}),
            ("fs-aggregate", {}),
        ],
    ),
    # The integrated systems test of power and cooling, run once the facility model
    # (racks, PDUs, UPS, loops) is entered; separate from node acceptance because it needs every
    # node at once and the facility's own people on site.
    "power-cooling": (
        "Power and cooling",
        "Whole-cluster heat soak against the facility model (built in; copy it to customise).",
        [("power-soak", {})],
    ),
}


@transaction.atomic
def fast_plan_ensure(*, slug: str, name: str, source: str = "acceptance") -> TestPlan:
    """A copy of a built-in plan with each check's `simulator_params` applied (for simulated clusters)."""
    base = TestPlan.objects.get(slug=source)
    plan, _ = TestPlan.objects.update_or_create(
        slug=slug, defaults={"name": name, "description": f"{base.name} at simulator speed.", "builtin": False}
    )
    plan.items.all().delete()
    for item in base.items.select_related("check_definition").order_by("order"):
        TestPlanItem.objects.create(
            plan=plan,
            check_definition=item.check_definition,
            order=item.order,
            param_overrides={**item.param_overrides, **simulator_params(item.check_definition.slug)},
            threshold_overrides=item.threshold_overrides,
        )
    return plan


@transaction.atomic
def builtin_catalog_ensure() -> None:
    """Create or refresh the built-in definitions and plans. Idempotent; user plans are untouched."""
    definitions: dict[str, CheckDefinition] = {}
    for cls in catalogued():
        definition, _ = CheckDefinition.objects.update_or_create(
            slug=cls.slug,
            defaults={"kind": cls.key, "name": cls.name, "description": cls.description, "builtin": True},
        )
        definitions[cls.slug] = definition
    for slug, (name, description, items) in BUILTIN_PLANS.items():
        plan, _ = TestPlan.objects.update_or_create(
            slug=slug, defaults={"name": name, "description": description, "builtin": True}
        )
        wanted = {check_slug for check_slug, _ in items}
        plan.items.exclude(check_definition__slug__in=wanted).delete()
        for order, (check_slug, params) in enumerate(items):
            TestPlanItem.objects.update_or_create(
                plan=plan,
                check_definition=definitions[check_slug],
                defaults={"order": order, "param_overrides": params},
            )
