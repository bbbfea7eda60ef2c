"""Writes for the check catalog: the built-in definitions and plans, with stable slugs."""

from __future__ import annotations

from django.db import transaction

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

# slug -> (kind, name, description). A new check adds its line here and to the plans below.
BUILTIN_CHECKS: dict[str, tuple[str, str, str]] = {
    "gpu-inventory": (
        "gpu_inventory",
        "GPU inventory",
        "GPU count, model and driver match the profile, and every node agrees with its peers.",
    ),
    "ecc-health": (
        "ecc_health",
        "ECC health",
        "No uncorrectable volatile ECC errors, no pending row remap or remap failure, ECC enabled.",
    ),
}

# Plan slug -> (name, description, [check slugs in order]). `quick` holds the fast checks;
# `acceptance` is the full plan and grows as checks are added.
BUILTIN_PLANS: dict[str, tuple[str, str, list[str]]] = {
    "quick": ("Quick sweep", "Fast health checks for nightly sweeps.", ["gpu-inventory", "ecc-health"]),
    "acceptance": ("Acceptance", "The full acceptance plan for handover.", ["gpu-inventory", "ecc-health"]),
}


@transaction.atomic
def builtin_catalog_ensure() -> None:
    """Create or refresh the built-in definitions and plans. Idempotent; user plans are untouched."""
    definitions: dict[str, CheckDefinition] = {}
    for slug, (kind, name, description) in BUILTIN_CHECKS.items():
        definition, _ = CheckDefinition.objects.get_or_create(
            slug=slug, defaults={"kind": kind, "name": name, "description": description, "builtin": True}
        )
        definitions[slug] = definition
    for slug, (name, description, check_slugs) in BUILTIN_PLANS.items():
        plan, created = TestPlan.objects.get_or_create(
            slug=slug, defaults={"name": name, "description": description, "builtin": True}
        )
        present = set(plan.items.values_list("check_definition__slug", flat=True))
        for order, check_slug in enumerate(check_slugs):
            if check_slug not in present:
                TestPlanItem.objects.create(plan=plan, check_definition=definitions[check_slug], order=order)
