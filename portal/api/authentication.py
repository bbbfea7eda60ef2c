"""Token authentication for the REST API: `Authorization: Token <secret>` (DRF's style) or
`Authorization: Bearer <secret>`. Browsers use their session instead (DRF's SessionAuthentication,
with its CSRF check)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from portal.api import services
from portal.api.models import ApiToken

KEYWORDS = ("token", "bearer")
# A secret is "kiln_" + 8 hex + "_" + 43 URL-safe characters; anything much longer is not one.
MAX_SECRET = 200


class TokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower().decode("latin-1") not in KEYWORDS:
            return None  # no token: another authenticator (the session) may apply
        if len(parts) != 2:
            raise AuthenticationFailed("Invalid Authorization header: give `Token <secret>` with no spaces in it.")
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid token.") from None
        if len(secret) > MAX_SECRET:
            raise AuthenticationFailed("Invalid token.")
        token = services.token_authenticate(secret=secret)
        if token is None:
            raise AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Token realm="api"'  # 401, not 403, for a request without credentials


def token_of(request: Any) -> ApiToken | None:
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiToken) else None
