"""Acceptance campaigns, their sign-off, and the sealed certificates they end with."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.inventory.models import Cluster, Node
from portal.runs.models import CheckResult, Run


# The two sides of a handover. A signer's side is the Django group they belong to (exactly one).
class Side(models.TextChoices):
    VENDOR = "vendor", "Vendor"
    CUSTOMER = "customer", "Customer"


class CertificateVerdict(models.TextChoices):
    """What a certificate states (portal/certificates/payload.py): in spec, or in spec with waivers."""

    PASS = "PASS", "PASS"
    PASS_WITH_WAIVERS = "PASS WITH WAIVERS", "PASS WITH WAIVERS"


class Campaign(models.Model):
    """The acceptance of one cluster against one plan: the runs it collects decide its state (per
    node × check, the latest final result). `plan_snapshot` is the plan as it stood when the
    campaign opened; it names the checks every in-scope node must pass."""

    name = models.CharField(max_length=200)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="campaigns")
    plan = models.ForeignKey("catalog.TestPlan", on_delete=models.PROTECT, related_name="campaigns")
    plan_snapshot = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # Both sides have signed and the certificate task is rendering and sealing (None: nothing pending).
    issue_requested_at = models.DateTimeField(null=True, blank=True)
    issue_error = models.TextField(blank=True, help_text="Why the last issuing attempt failed.")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.cluster_id})"

    @property
    def item_keys(self) -> list[str]:
        return [item["key"] for item in self.plan_snapshot["items"]]


class CampaignRun(models.Model):
    """A run counted by a campaign. A run belongs to one campaign at most."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="campaign_runs")
    run = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="campaign_link")
    added_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    added_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "run_id"]

    def __str__(self) -> str:
        return f"run #{self.run_id} in campaign #{self.campaign_id}"


class ScopeExclusion(models.Model):
    """A node taken out of a campaign's scope (sent for RMA, say), with the reason recorded."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="exclusions")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()
    excluded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    excluded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "node__hostname"]
        constraints = [models.UniqueConstraint(fields=["campaign", "node"], name="exclusion_unique_node")]

    def __str__(self) -> str:
        return f"node #{self.node_id} out of scope: {self.reason[:40]}"


class Waiver(models.Model):
    """An accepted failure: one failing (or errored) result, with the approver's justification.

    It waives that result, not the cell: a newer result for the same node × check replaces it."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="waivers")
    result = models.ForeignKey(CheckResult, on_delete=models.PROTECT, related_name="+")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    item_key = models.CharField(max_length=64)
    justification = models.TextField()
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    granted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "node__hostname", "item_key"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "result", "node"], name="waiver_unique_result_node"),
        ]

    def __str__(self) -> str:
        return f"waiver of {self.item_key} on node #{self.node_id}"


class Certificate(models.Model):
    """A sealed certificate. `payload` holds the exact canonical JSON bytes (as text) that were
    hashed and signed; `seal` the signature record; `pdf` the document with its PDF signature.
    Issued once; the database refuses any UPDATE or DELETE of the row (see immutability.py).
    Revocation is a separate, append-only Revocation row."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="certificates")
    number = models.CharField(max_length=64, unique=True)
    issued_at = models.DateTimeField()
    verdict = models.CharField(max_length=40, choices=CertificateVerdict.choices)
    payload = models.TextField()
    sha256 = models.CharField(max_length=64)
    seal = models.JSONField()
    key_fingerprint = models.CharField(max_length=100)
    pdf = models.BinaryField()
    charts_note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-issued_at", "-id"]

    def __str__(self) -> str:
        return self.number

    @property
    def revoked(self) -> bool:
        """Select `revocation` with the certificate (select_related) where a list shows this."""
        try:
            return self.revocation is not None
        except Revocation.DoesNotExist:
            return False


class Revocation(models.Model):
    """A certificate withdrawn, with who and why. Append-only: one per certificate, never edited or
    deleted (database triggers), so a revocation cannot be undone by any path."""

    certificate = models.OneToOneField(Certificate, on_delete=models.PROTECT, related_name="revocation")
    revoked_at = models.DateTimeField()
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+")
    username = models.CharField(max_length=150)
    reason = models.TextField()

    class Meta:
        ordering = ["-revoked_at", "-id"]

    def __str__(self) -> str:
        return f"{self.certificate_id} revoked {self.revoked_at:%Y-%m-%d}"


class CertifiedResult(models.Model):
    """A result cited as evidence by a certificate: it, its measurements, series and raw output are
    frozen from then on (see signals.py)."""

    certificate = models.ForeignKey(Certificate, on_delete=models.PROTECT, related_name="covered")
    result = models.ForeignKey(CheckResult, on_delete=models.PROTECT, related_name="certified_by")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["certificate", "result"], name="certified_result_unique")]

    def __str__(self) -> str:
        return f"result #{self.result_id} in certificate #{self.certificate_id}"


class Signature(models.Model):
    """One approver's sign-off. Pending (no certificate) until the other side signs the same body;
    `body_sha256` is the digest of the certificate body the signer saw (all but number, dates of
    issue and signatures), so a change of evidence between the two signatures is caught."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="signatures")
    certificate = models.ForeignKey(
        Certificate, on_delete=models.PROTECT, null=True, blank=True, related_name="signatures"
    )
    side = models.CharField(max_length=10, choices=Side.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=300, help_text="The signer's name as shown on the certificate.")
    organisation = models.CharField(
        max_length=200, blank=True, help_text="The signer's organisation when they signed, as shown on the certificate."
    )
    body_sha256 = models.CharField(max_length=64)
    signed_at = models.DateTimeField(auto_now_add=True)
    withdrawn = models.BooleanField(default=False, help_text="Superseded: the evidence changed before issue.")

    class Meta:
        ordering = ["campaign", "signed_at", "id"]

    def __str__(self) -> str:
        return f"{self.side} signature by {self.name}"


class AuditEvent(models.Model):
    """Append-only log of every step of a campaign (never edited, never deleted)."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="audit")
    # Set before the insert, not by auto_now_add: the chain hash (auditchain.py) covers it.
    at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=40)
    detail = models.TextField(blank=True)
    # Tamper evidence: the SHA-256 of the previous event, and of this one's fields with it.
    prev_sha256 = models.CharField(max_length=64, blank=True, editable=False)
    sha256 = models.CharField(max_length=64, blank=True, editable=False)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.action}"


class PublicVerifyCount(models.Model):
    """Uploads to the public verify page per client address and hour (services/public.py): the rate
    limit that holds across web processes and hosts. `client` is a keyed hash of the address, so the
    table holds no visitor's address; rows of past hours are deleted as new ones come."""

    client = models.CharField(max_length=64)
    window = models.DateTimeField(db_index=True)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["client", "window"], name="public_verify_count_unique")]

    def __str__(self) -> str:
        return f"{self.count} public verifications from {self.client[:8]} in the hour from {self.window:%H:%M}"
