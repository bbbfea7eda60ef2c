"""Check definitions and test plans. Runs copy (snapshot) these at start; edits never reach past runs."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import models

from checks.core.base import REGISTRY, ParamsError


def kind_choices() -> list[tuple[str, str]]:
    return [(key, cls.name) for key, cls in sorted(REGISTRY.items())]


class CheckDefinition(models.Model):
    """A configured check: a kind from `checks/` plus params and thresholds validated by its schema."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=64, choices=kind_choices)
    description = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)
    thresholds = models.JSONField(default=dict, blank=True)
    builtin = models.BooleanField(default=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        validate_check_config(self.kind, self.params, self.thresholds)


def validate_check_config(kind: str, params: object, thresholds: object) -> None:
    check_class = REGISTRY.get(kind)
    if check_class is None:
        raise ValidationError({"kind": f"unknown check kind {kind!r}"})
    errors: dict[str, str] = {}
    for field, value, build in (
        ("params", params, check_class.make_params),
        ("thresholds", thresholds, check_class.make_thresholds),
    ):
        if not isinstance(value, dict):
            errors[field] = "must be a JSON object"
            continue
        try:
            build(value)
        except ParamsError as exc:
            errors[field] = str(exc)
    if errors:
        raise ValidationError(errors)


class TestPlan(models.Model):
    """An ordered list of checks. Built-in plans have stable slugs: `quick` and `acceptance`."""

    __test__ = False  # not a pytest class, whatever its name

    slug = models.SlugField(max_length=64, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    builtin = models.BooleanField(default=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class TestPlanItem(models.Model):
    """One check in a plan, with per-plan param and threshold overrides."""

    __test__ = False

    plan = models.ForeignKey(TestPlan, on_delete=models.CASCADE, related_name="items")
    check_definition = models.ForeignKey(CheckDefinition, on_delete=models.PROTECT, related_name="plan_items")
    order = models.PositiveIntegerField(default=0)
    param_overrides = models.JSONField(default=dict, blank=True)
    threshold_overrides = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["plan", "order", "id"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "check_definition"], name="plan_item_unique_check"),
        ]

    def __str__(self) -> str:
        return f"{self.plan.slug}: {self.check_definition.slug}"

    def clean(self) -> None:
        if self.check_definition_id is None:
            return
        definition = self.check_definition
        validate_check_config(
            definition.kind,
            {**definition.params, **(self.param_overrides or {})},
            {**definition.thresholds, **(self.threshold_overrides or {})},
        )
