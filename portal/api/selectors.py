"""Reads of the API app."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from portal.api.models import ApiToken


def user_tokens(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[ApiToken]:
    """The user's tokens, newest first, revoked ones included (they say when)."""
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user_id=user.pk).order_by("-created_at", "-id")
