"""How the OpenAPI schema describes Kiln's token authentication (imported by portal/api/urls.py)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class TokenAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <secret>` or `Bearer <secret>`; create one on the API tokens page or with "
            "`kiln user token USERNAME`.",
        }
