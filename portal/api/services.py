"""Writes of the API app: creating, using and revoking API tokens. Keyword-only, typed."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal.api.models import ApiToken

SECRET_BYTES = 32  # 256 bits from secrets.token_urlsafe: not guessable, so one SHA-256 is enough
PREFIX_BYTES = 4  # 8 hex characters to tell a user's tokens apart; not secret
SECRET_LABEL = "kiln"
# last_used_at is written at most once a minute per token: one UPDATE per API call would double the
# writes of a polling script for a date nobody reads to the second.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenError(ValueError):
    """A token request that cannot be done; the message says why, and nothing was written."""


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


def token_create(
    *, user: User, name: str, expires_at: datetime | None = None, form_nonce: str = ""
) -> tuple[ApiToken, str]:
    """A new token for `user`. Returns it and its secret: the only time the secret exists in clear.
    `form_nonce`: the tokens page form's one-time value; the same form sent twice (a browser reload
    re-posts it) makes one token, and the second time says so."""
    name = name.strip()
    if not name or len(name) > 100:
        raise TokenError("give the token a name of 1 to 100 characters (what it is for)")
    if not user.is_active:
        raise TokenError(f"user {user.get_username()} is inactive")
    if expires_at is not None and expires_at <= timezone.now():
        raise TokenError("the expiry date is in the past")
    prefix = secrets.token_hex(PREFIX_BYTES)
    while ApiToken.objects.filter(prefix=prefix).exists():
        prefix = secrets.token_hex(PREFIX_BYTES)
    secret = f"{SECRET_LABEL}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    form = secret_hash(form_nonce) if form_nonce else ""
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                user=user, name=name, prefix=prefix, secret_sha256=secret_hash(secret), expires_at=expires_at,
                form_sha256=form,
            )  # fmt: skip
    except IntegrityError:
        first = ApiToken.objects.filter(user=user, form_sha256=form).first() if form else None
        if first is None:
            raise
        raise TokenError(
            f"this form was sent already (a reload?): it made token {first.prefix} ({first.name}), whose secret "
            "was shown once. Revoke it below if you did not copy it, and create a new one."
        ) from None
    return token, secret


def token_revoke(*, user: User, prefix: str) -> ApiToken:
    """Revoke one of `user`'s tokens by its prefix. Revoking twice is refused (it says so)."""
    token = ApiToken.objects.filter(user=user, prefix=prefix.strip()).first()
    if token is None:
        raise TokenError(f"{user.get_username()} has no token {prefix.strip()[:16]!r}")
    if token.revoked_at is not None:
        raise TokenError(f"token {token.prefix} was revoked already")
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    return token


def token_authenticate(*, secret: str) -> ApiToken | None:
    """The active token whose secret this is (with its user), or None. Records when it was used."""
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(secret_sha256=secret_hash(secret), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is None:
        return None
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
