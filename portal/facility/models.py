"""The facility model the power-and-cooling acceptance judges against: racks with
their power and cooling budgets, rack PDUs with their feeds, phases and breakers, which node draws
from which PDU phase, UPSes and the racks they carry, cooling loops (CDUs) and the racks they serve.

checks/soak/judge.py reads it through selectors.facility_snapshot(). Endpoint credentials are
kept only as a Fernet token (credentials.py), set through services, never through a model form.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from checks.soak.physics import MAX_PHASE_CURRENT_A
from portal.inventory.models import Cluster, Node

# A rack, PDU, UPS or loop name; also what Node.rack holds. No leading '=', '+', '-' or '@', so an
# exported CSV never opens as a formula in a spreadsheet.
facility_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9 ._:/#-]{0,63}$", "letters, digits, space, '.', '_', ':', '/', '#' and '-' only"
)
# A room or row label of the floor plan (may be empty).
place_validator = RegexValidator(
    r"^([A-Za-z0-9][A-Za-z0-9 ._/-]{0,63})?$", "letters, digits, space, '.', '_', '/' and '-' only"
)

# 2,000 kW per rack: 3x the densest rack announced (NVIDIA Kyber NVL576, ~600 kW); above it is a typo
# (W or MW for kW), not a rack.
MAX_RACK_KW = 2000.0
# 1,000,000 kW (1 GW): the judge's bound on any site-wide power (checks/soak/judge.py _MAX_SITE_W).
MAX_UPS_KW = 1_000_000.0
# Phase-to-neutral voltage: 100 V (Japan, the lowest public mains) to 277 V (North America's 480Y/277 V),
# with a margin each side (IEC 60038 lists 220-240 V elsewhere).
MIN_VOLTAGE_V, MAX_VOLTAGE_V = 90.0, 300.0
# IEC 60038's nominal 230 V phase-to-neutral (230/400 V systems): most of the world's supply.
DEFAULT_VOLTAGE_V = 230.0


def validate_finite(value: float) -> None:
    if not math.isfinite(value):
        raise ValidationError("must be a finite number")


def validate_positive(value: float) -> None:
    validate_finite(value)
    if value <= 0:
        raise ValidationError("must be more than 0")


def validate_share(value: float) -> None:
    validate_positive(value)
    if value > 1:
        raise ValidationError("a share is at most 1 (all of the node's power)")


def validate_endpoint_url(value: str) -> None:
    """An http(s) URL without a user or password in it: those go in the credential fields, sealed."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ValidationError("an http:// or https:// URL")
    if "@" in parts.netloc:
        raise ValidationError("no user name or password in the URL: use the credential fields (stored sealed)")


def breakers_parse(text: str, phases: int) -> list[float]:
    """'32' (every phase) or '32;32;16' (one per phase) -> a list of `phases` ratings in A."""
    parts = [p.strip() for p in str(text).replace(",", ";").split(";")]
    if not parts or any(not p for p in parts):
        raise ValidationError("a breaker rating in A, e.g. 32, or one per phase, e.g. 32;32;16")
    if len(parts) not in (1, phases):
        raise ValidationError(f"{len(parts)} ratings for {phases} phase(s): give one, or one per phase")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValidationError(f"{text!r} is not a number of amperes (e.g. 32 or 32;32;16)") from None
    return values * phases if len(values) == 1 else values


def number_text(value: float) -> str:
    """A float as text that reads back the same: 32.0 -> '32', 0.1 -> '0.1'."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def breakers_text(values: list[float]) -> str:
    """The inverse of breakers_parse: '32' when every phase has the same rating."""
    shown = [number_text(v) for v in values]
    return shown[0] if shown and len(set(shown)) == 1 else ";".join(shown)


def validate_breakers(value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("a list of breaker ratings in A, one per phase")
    for rating in value:
        if isinstance(rating, bool) or not isinstance(rating, (int, float)):
            raise ValidationError(f"{rating!r} is not a number of amperes")
        validate_positive(float(rating))
        if rating > MAX_PHASE_CURRENT_A:
            raise ValidationError(f"{rating:g} A: above {MAX_PHASE_CURRENT_A:g} A, not a rack PDU breaker")


class Feed(models.TextChoices):
    A = "A", "A"
    B = "B", "B"


class Phases(models.IntegerChoices):
    SINGLE = 1, "1 (single-phase)"
    THREE = 3, "3 (three-phase)"


class Fluid(models.TextChoices):
    """The keys of checks.soak.physics.FLUIDS (a test holds them equal)."""

    WATER = "water", "Water"
    PG25 = "pg25", "PG25 (25% propylene glycol)"


class Rack(models.Model):
    """A rack of a cluster: its power and cooling budgets, and its place on the floor plan. `name` is
    what the nodes' `rack` field holds (inventory.Node.rack)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="racks")
    name = models.CharField(max_length=64, validators=[facility_name_validator])
    power_budget_kw = models.FloatField(
        validators=[validate_positive, MaxValueValidator(MAX_RACK_KW)], help_text="Power the rack may draw, kW."
    )
    cooling_budget_kw = models.FloatField(
        validators=[validate_positive, MaxValueValidator(MAX_RACK_KW)], help_text="Heat the rack may shed, kW."
    )
    room = models.CharField(max_length=64, blank=True, validators=[place_validator])
    row = models.CharField(max_length=64, blank=True, validators=[place_validator])
    position = models.PositiveIntegerField(default=0, help_text="Place in its row, from 0 (the floor plan).")

    class Meta:
        ordering = ["cluster", "room", "row", "position", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="facility_rack_unique_name",
                violation_error_message="another rack of this cluster has this name",
            )
        ]

    def __str__(self) -> str:
        return self.name


class EndpointFields(models.Model):
    """An optional Redfish endpoint and its credential (user name and password), sealed: only the
    Fernet token is stored, and no form edits it directly (services.credential_apply does)."""

    endpoint_url = models.CharField(
        max_length=500, blank=True, validators=[validate_endpoint_url], help_text="Redfish service URL (http/https)."
    )
    verify_tls = models.BooleanField(default=True, help_text="Check the endpoint's TLS certificate (https).")
    credential_sealed = models.TextField(blank=True, editable=False)

    class Meta:
        abstract = True

    @property
    def has_endpoint(self) -> bool:
        return bool(self.endpoint_url)

    @property
    def has_credential(self) -> bool:
        return bool(self.credential_sealed)


class Pdu(EndpointFields):
    """A rack PDU: the feed it is on (A/B), its phases, phase-to-neutral voltage and one breaker rating
    per phase (`breaker_a`, a list as long as `phases`). `cluster` is the rack's, kept here so that
    names are unique per cluster in the database itself."""

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="pdus")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pdus", editable=False)
    name = models.CharField(max_length=64, validators=[facility_name_validator])
    feed = models.CharField(max_length=1, choices=Feed.choices, default=Feed.A)
    # Three-phase: a GPU rack's 30-100+ kW is past what a single-phase branch carries.
    phases = models.PositiveSmallIntegerField(choices=Phases.choices, default=Phases.THREE)
    voltage_v = models.FloatField(
        default=DEFAULT_VOLTAGE_V,
        validators=[validate_finite, MinValueValidator(MIN_VOLTAGE_V), MaxValueValidator(MAX_VOLTAGE_V)],
        help_text="Phase-to-neutral voltage, V (230 on 230/400 V supplies).",
    )
    breaker_a = models.JSONField(validators=[validate_breakers], help_text="Breaker rating per phase, A.")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="facility_pdu_unique_name",
                violation_error_message="another PDU of this cluster has this name",
            )
        ]
        verbose_name = "PDU"

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.cluster_id = self.rack.cluster_id
        super().save(*args, **kwargs)

    @property
    def breakers_display(self) -> str:
        return " / ".join(number_text(a) for a in self.breaker_a)

    def clean(self) -> None:
        if self.rack_id is not None:
            self.cluster_id = self.rack.cluster_id
        if isinstance(self.breaker_a, list) and self.phases in (1, 3) and len(self.breaker_a) != self.phases:
            raise ValidationError({"breaker_a": f"{len(self.breaker_a)} ratings for {self.phases} phase(s)"})


class NodeFeed(models.Model):
    """A node draws `share` of its power from one phase (1-based) of one PDU. A node's shares add up
    to 1 (services.node_feeds_set checks them together). A node without any row is fed by default:
    evenly over its rack's feeds (selectors.default_feeds)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="feeds")
    # RESTRICT: deleting a PDU would leave its nodes' shares short of 1; deleting the whole cluster
    # (which also deletes the nodes, hence these rows) is allowed.
    pdu = models.ForeignKey(Pdu, on_delete=models.RESTRICT, related_name="feeds")
    phase = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(3)])
    share = models.FloatField(validators=[validate_share], help_text="Fraction of the node's power (0-1].")

    class Meta:
        ordering = ["node", "pdu", "phase"]
        constraints = [models.UniqueConstraint(fields=["node", "pdu", "phase"], name="facility_feed_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} on PDU {self.pdu_id} phase {self.phase}"

    def clean(self) -> None:
        if self.node_id is None or self.pdu_id is None:
            return
        if self.node.cluster_id != self.pdu.cluster_id:
            raise ValidationError({"pdu": f"PDU {self.pdu.name} is not in node {self.node.hostname}'s cluster"})
        if self.phase is not None and self.phase > self.pdu.phases:
            raise ValidationError({"phase": f"PDU {self.pdu.name} has {self.pdu.phases} phase(s), not {self.phase}"})


class Ups(models.Model):
    """A UPS: its capacity and the racks it carries."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="upses")
    name = models.CharField(max_length=64, validators=[facility_name_validator])
    capacity_kw = models.FloatField(validators=[validate_positive, MaxValueValidator(MAX_UPS_KW)])
    racks = models.ManyToManyField(Rack, blank=True, related_name="upses")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="facility_ups_unique_name",
                violation_error_message="another UPS of this cluster has this name",
            )
        ]
        verbose_name = "UPS"
        verbose_name_plural = "UPSes"

    def __str__(self) -> str:
        return self.name


class CoolingLoop(EndpointFields):
    """A liquid cooling loop (a CDU's secondary loop): its coolant, the racks it serves and optionally
    the Redfish CoolingUnit endpoint that reports its supply/return temperatures and flow."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="cooling_loops")
    name = models.CharField(max_length=64, validators=[facility_name_validator])
    fluid = models.CharField(max_length=16, choices=Fluid.choices, default=Fluid.WATER)
    racks = models.ManyToManyField(Rack, blank=True, related_name="cooling_loops")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="facility_loop_unique_name",
                violation_error_message="another cooling loop of this cluster has this name",
            )
        ]

    def __str__(self) -> str:
        return self.name
