"""The pages' roles (portal/roles.py) for the API: viewers read, operators write inventory and runs,
approvers waive. Signing is not offered by the API at all (SPECTACULAR_SETTINGS's description)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from portal.roles import OPERATOR, VIEWER, has_role


class RolePermission(BasePermission):
    """Reads need the view's `read_role` (viewer), writes its `write_role` (operator); an action
    may name its own role in the view's `action_roles`."""

    message = "This needs a role you do not hold."

    def has_permission(self, request: Request, view: Any) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        role: str | None = getattr(view, "action_roles", {}).get(getattr(view, "action", None))
        if role is None:
            safe = request.method in SAFE_METHODS
            role = str(getattr(view, "read_role", VIEWER) if safe else getattr(view, "write_role", OPERATOR))
        self.message = f"This needs the {role} role."
        return has_role(request.user, role)
