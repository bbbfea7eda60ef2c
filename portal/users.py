"""Writes and reads for user accounts: their roles (portal/roles.py) and, for approvers, their side.

A role is a Django group (viewer, operator, approver). A side is the organisation an approver signs
for: the group `vendor` or `customer` (portal/certificates/selectors.py: signer_side wants exactly
one). `kiln user` (the kiln_user command) adapts these; keyword-only, typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from portal.certificates.models import Side
from portal.roles import APPROVER, ROLES, roles_ensure

SIDES: tuple[str, ...] = tuple(Side.values)


class UserError(Exception):
    """Bad input or a state that refuses the change; the message says which."""


@dataclass(frozen=True)
class UserSummary:
    """What `kiln user list` shows of one account."""

    username: str
    roles: tuple[str, ...]
    side: str | None
    active: bool
    superuser: bool
    email: str


def user_summary(*, user: User) -> UserSummary:
    names = set(user.groups.values_list("name", flat=True))
    sides = sorted(names & set(SIDES))
    return UserSummary(
        username=user.get_username(),
        roles=tuple(r for r in ROLES if r in names),
        side=sides[0] if len(sides) == 1 else None,
        active=user.is_active,
        superuser=user.is_superuser,
        email=user.email,
    )


def users_list() -> list[UserSummary]:
    return [user_summary(user=u) for u in User.objects.order_by("username").prefetch_related("groups")]


def username_check(username: str) -> str:
    """The name as Django's username field accepts it (letters, digits and @.+-_, at most 150)."""
    field = User._meta.get_field("username")
    try:
        return str(field.clean(username, None))
    except ValidationError as exc:
        raise UserError(f"user name {username!r}: {' '.join(exc.messages)}") from None


def _roles_check(roles: Sequence[str], side: str | None) -> tuple[str, ...]:
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise UserError(f"unknown role {', '.join(map(repr, unknown)) or '(none)'}; roles: {', '.join(ROLES)}")
    if side is not None and side not in SIDES:
        raise UserError(f"unknown side {side!r}; sides: {', '.join(SIDES)}")
    if side is not None and APPROVER not in roles:
        raise UserError(
            "--side only applies to approvers: the side is the organisation whose signature an approver gives"
        )
    return tuple(r for r in ROLES if r in roles)


def _user_get(username: str) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise UserError(f"no user named {username!r} (`kiln user list` shows them)")
    return user


def _groups_apply(user: User, roles: tuple[str, ...], side: str | None) -> None:
    """Replace the user's role groups (and their side when one is given, or drop it for a non-approver);
    other groups are left alone."""
    roles_ensure()
    keep = user.groups.exclude(name__in=[*ROLES, *SIDES])
    current = user_summary(user=user).side
    if APPROVER not in roles:
        side = None
    elif side is None:
        side = current
    wanted = [*roles, *([side] if side else [])]
    for name in wanted:
        Group.objects.get_or_create(name=name)
    user.groups.set([*keep, *Group.objects.filter(name__in=wanted)])


def _password_check(password: str, user: User) -> None:
    if not password:
        raise UserError("the password read from stdin is empty")
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise UserError("password refused: " + " ".join(exc.messages)) from None


def user_add(
    *,
    username: str,
    roles: Sequence[str],
    side: str | None = None,
    email: str = "",
    password: str | None = None,
) -> tuple[User, bool]:
    """Create a user with these roles (and side); (user, created). A user that exists already with
    the same roles, side and e-mail is left as it is; one that differs is refused (set-role changes
    roles). Without a password the account has an unusable one until someone sets it."""
    username = username_check(username)
    wanted = _roles_check(roles, side)
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise UserError(f"{email!r} is not an e-mail address") from None
    existing = User.objects.filter(username=username).first()
    if existing is not None:
        _same_or_refuse(existing, wanted, side, email, password)
        return existing, False
    user = User(username=username, email=email)
    if password is not None:
        _password_check(password, user)
        user.set_password(password)
    else:
        user.set_unusable_password()
    with transaction.atomic():
        user.save()
        _groups_apply(user, wanted, side)
    return user, True


def _same_or_refuse(user: User, roles: tuple[str, ...], side: str | None, email: str, password: str | None) -> None:
    have = user_summary(user=user)
    differs = have.roles != roles or (side is not None and have.side != side) or bool(email and have.email != email)
    if differs or password is not None:
        what = ", ".join(have.roles) or "no role"
        raise UserError(
            f"user {have.username!r} exists already ({what}"
            + (f", {have.side} side" if have.side else "")
            + "): change roles with `kiln user set-role`, the password with `kiln manage changepassword`"
        )


def user_roles_set(*, username: str, roles: Sequence[str], side: str | None = None) -> User:
    """Give the user exactly these roles. An approver keeps their side unless another is given; a
    user who is no longer an approver loses it."""
    wanted = _roles_check(roles, side)
    with transaction.atomic():
        user = _user_get(username)
        _groups_apply(user, wanted, side)
    return user


def user_active_set(*, username: str, active: bool) -> bool:
    """Enable or disable login; False when it already was so. The last active superuser is never
    disabled: nobody could then manage users in the admin."""
    with transaction.atomic():
        user = _user_get(username)
        if user.is_active == active:
            return False
        if not active and user.is_superuser:
            others = User.objects.select_for_update().filter(is_superuser=True, is_active=True).exclude(pk=user.pk)
            if not others.exists():
                raise UserError(f"{username} is the last active superuser; make another one first")
        user.is_active = active
        user.save(update_fields=["is_active"])
    return True
