"""Roles are Django groups. viewer reads; operator manages inventory, the facility model and runs;
approver signs off.

What each role can cause to run, and where, is written down in docs/security.md. In the admin
(for a user a superuser has also made staff), an operator may add and change clusters and nodes,
but never a field that chooses what executes on a Kiln host or which of its files is used
(`SUPERUSER_FIELDS`); runs and results are read-only there, no delete either (they are evidence,
and a run's plan snapshot is what executes); check definitions and plans are a superuser's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase

VIEWER = "viewer"
OPERATOR = "operator"
APPROVER = "approver"
ROLES = (VIEWER, OPERATOR, APPROVER)

_VIEW_MODELS = [
    "cluster", "node", "checkdefinition", "testplan", "testplanitem", "run", "checkresult", "measurement",
    "rack", "pdu", "nodefeed", "ups", "coolingloop",
]  # fmt: skip
# The facility model (portal/facility): operators edit it on its page and in the admin. Explicit feeds
# are only set per node on the facility page, where a node's shares are checked together.
_FACILITY_MODELS = ("rack", "pdu", "ups", "coolingloop")
# Inventory: add, change (less SUPERUSER_FIELDS) and delete. Runs and results: none; they are
# started through the pages and `kiln_run`, never edited, and leave by retention (EvidenceAdmin).
_OPERATOR_PERMISSIONS = [
    *(f"{action}_{m}" for m in ("cluster", "node", *_FACILITY_MODELS) for action in ("add", "change", "delete")),
]

# Model fields that choose what runs on a Kiln host (the portal or a worker), or which of its files
# is read: editable by superusers only, whatever a group's model permissions say.
SUPERUSER_FIELDS: dict[str, tuple[str, ...]] = {
    "inventory.cluster": ("transport", "ssh_key_path"),
    "health.clusterhealthsettings": ("controller_key_path",),
}


def has_role(user: User | AnonymousUser, role: str) -> bool:
    """Superusers hold every role; operators and approvers can also view."""
    if not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    names = set(user.groups.values_list("name", flat=True))
    if role == VIEWER:
        return bool(names & set(ROLES))
    return role in names


View = Callable[..., HttpResponseBase]


def role_required(role: str) -> Callable[[View], View]:
    """Login is enforced by middleware everywhere; this adds the role check (403 otherwise)."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not has_role(request.user, role):
                raise PermissionDenied(f"this page needs the {role} role")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def roles_ensure() -> None:
    """Create the role groups with model permissions (for the admin). Idempotent."""
    view = Permission.objects.filter(codename__in=[f"view_{m}" for m in _VIEW_MODELS])
    manage = Permission.objects.filter(codename__in=_OPERATOR_PERMISSIONS)
    viewer, _ = Group.objects.get_or_create(name=VIEWER)
    viewer.permissions.set(view)
    operator, _ = Group.objects.get_or_create(name=OPERATOR)
    operator.permissions.set(list(view) + list(manage))
    approver, _ = Group.objects.get_or_create(name=APPROVER)
    approver.permissions.set(view)


class SuperuserFieldsAdmin:
    """ModelAdmin mixin: the model's SUPERUSER_FIELDS are read-only for everyone but superusers."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        if not request.user.is_superuser:
            label = self.model._meta.label_lower  # type: ignore[attr-defined]
            fields += [f for f in SUPERUSER_FIELDS.get(label, ()) if f not in fields]
        return fields


class SuperuserOnlyAdmin:
    """ModelAdmin mixin: only superusers add, change or delete; others with the view permission read."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


class ReadOnlyAdmin:
    """ModelAdmin mixin: records nobody adds or edits in the admin (deleting follows permissions)."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class EvidenceAdmin(ReadOnlyAdmin):
    """ModelAdmin mixin for runs and results: nobody adds or edits them, and only a superuser
    deletes (a delete in the admin leaves no Kiln audit event), whatever a group's permissions say.
    Without the delete permission the admin also drops its bulk "delete selected" action."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)
