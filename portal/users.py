"""Writes and reads for user accounts: their roles (portal/roles.py), for approvers their side, and
for everyone a full name and an organisation (what a certificate names its signers and approvers by).

A role is a Django group (viewer, operator, approver). A side is the party of the handover an approver signs
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
from portal.models import CONTROL_CHARACTERS, FULL_NAME_MAX, ORGANISATION_MAX, Person
from portal.people import organisation_of
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
    full_name: str
    organisation: str


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
        full_name=user.get_full_name(),
        organisation=organisation_of(user),
    )


def users_list() -> list[UserSummary]:
    rows = User.objects.order_by("username").select_related("person").prefetch_related("groups")
    return [user_summary(user=u) for u in rows]


def _text_check(what: str, text: str, limit: int) -> str:
    if CONTROL_CHARACTERS.search(text):
        raise UserError(f"{what} {text!r}: no control characters (newlines, tabs, escapes)")
    text = " ".join(text.split())
    if len(text) > limit:
        raise UserError(f"{what} is {len(text)} characters long: at most {limit}")
    return text


def full_name_check(full_name: str) -> tuple[str, str]:
    """(first name, last name) for Django's two fields: the first word, and the rest. Whitespace
    runs fold to one space, so the full name shown is the one given."""
    text = _text_check("full name", full_name, FULL_NAME_MAX)
    first, _, last = text.partition(" ")
    limit = User._meta.get_field("first_name").max_length or 150
    if len(first) > limit or len(last) > limit:
        raise UserError(f"full name {text!r}: the first word and the rest may have at most {limit} characters each")
    return first, last


def organisation_check(organisation: str) -> str:
    return _text_check("organisation", organisation, ORGANISATION_MAX)


def _details_apply(user: User, full_name: tuple[str, str] | None, organisation: str | None) -> None:
    """Write what is given (None: leave as it is; '' clears it)."""
    if full_name is not None:
        user.first_name, user.last_name = full_name
        user.save(update_fields=["first_name", "last_name"])
    if organisation is not None:
        Person.objects.update_or_create(user=user, defaults={"organisation": organisation})


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
    full_name: str | None = None,
    organisation: str | None = None,
) -> tuple[User, bool]:
    """Create a user with these roles (and side, full name, organisation); (user, created). A user
    that exists already with the same roles, side, e-mail, name and organisation is left as it is;
    one that differs is refused (set-role changes roles, `set` the name and organisation). Without a
    password the account has an unusable one until someone sets it."""
    username = username_check(username)
    wanted = _roles_check(roles, side)
    name = full_name_check(full_name) if full_name is not None else None
    org = organisation_check(organisation) if organisation is not None else None
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise UserError(f"{email!r} is not an e-mail address") from None
    existing = User.objects.filter(username=username).first()
    if existing is not None:
        _same_or_refuse(existing, wanted, side, email, password)
        _same_details_or_refuse(existing, name, org)
        return existing, False
    user = User(username=username, email=email)
    if name is not None:
        user.first_name, user.last_name = name
    if password is not None:
        _password_check(password, user)
        user.set_password(password)
    else:
        user.set_unusable_password()
    with transaction.atomic():
        user.save()
        _groups_apply(user, wanted, side)
        _details_apply(user, None, org or None)
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


def _same_details_or_refuse(user: User, name: tuple[str, str] | None, organisation: str | None) -> None:
    have = user_summary(user=user)
    differs = (name is not None and " ".join(filter(None, name)) != have.full_name) or (
        organisation is not None and organisation != have.organisation
    )
    if differs:
        raise UserError(
            f"user {have.username!r} exists already ({have.full_name or 'no full name'}, "
            f"{have.organisation or 'no organisation'}): change them with `kiln user set {have.username} "
            "--full-name ... --organisation ...`"
        )


def user_details_set(*, username: str, full_name: str | None = None, organisation: str | None = None) -> User:
    """Change a user's full name and/or organisation (None leaves one as it is; '' clears it).
    Certificates issued before keep the names they were sealed with."""
    if full_name is None and organisation is None:
        raise UserError("nothing to change: give --full-name and/or --organisation")
    name = full_name_check(full_name) if full_name is not None else None
    org = organisation_check(organisation) if organisation is not None else None
    with transaction.atomic():
        user = _user_get(username)
        _details_apply(user, name, org)
    return user


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
