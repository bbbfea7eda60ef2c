"""Per-user API tokens. Only a SHA-256 of each secret is stored (portal/api/services.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A secret that authenticates its user to the REST API (`Authorization: Token <secret>`).

    The secret is shown once, when created; the database keeps its SHA-256 (a fast hash is enough:
    the secret is 32 random bytes, not a password anyone could guess) and a short non-secret
    `prefix` to tell tokens apart in lists and to revoke one by name."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="Shown in lists; not secret.")
    secret_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    revoked_at = models.DateTimeField(null=True, blank=True)
    # SHA-256 of the one-time value of the tokens page's form that made it: a reload that sends the
    # same form again is refused instead of making a second token (portal/api/services.py).
    form_sha256 = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "form_sha256"], condition=~models.Q(form_sha256=""), name="api_token_one_per_form"
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())
