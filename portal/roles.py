"""Roles are Django groups. viewer reads; operator manages inventory and runs; approver signs off."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission

VIEWER = "viewer"
OPERATOR = "operator"
APPROVER = "approver"
ROLES = (VIEWER, OPERATOR, APPROVER)

_VIEW_MODELS = ["cluster", "node", "checkdefinition", "testplan", "testplanitem", "run", "checkresult", "measurement"]
_OPERATOR_MODELS = ["cluster", "node", "run", "checkresult"]


def has_role(user: AbstractBaseUser | AnonymousUser, role: str) -> bool:
    """Superusers hold every role; operators and approvers can also view."""
    if not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    names = set(user.groups.values_list("name", flat=True))
    if role == VIEWER:
        return bool(names & set(ROLES))
    return role in names


def roles_ensure() -> None:
    """Create the role groups with model permissions (for the admin). Idempotent."""
    view = Permission.objects.filter(codename__in=[f"view_{m}" for m in _VIEW_MODELS])
    manage = Permission.objects.filter(
        codename__in=[f"{action}_{m}" for m in _OPERATOR_MODELS for action in ("add", "change", "delete")]
    )
    viewer, _ = Group.objects.get_or_create(name=VIEWER)
    viewer.permissions.set(view)
    operator, _ = Group.objects.get_or_create(name=OPERATOR)
    operator.permissions.set(list(view) + list(manage))
    approver, _ = Group.objects.get_or_create(name=APPROVER)
    approver.permissions.set(view)
