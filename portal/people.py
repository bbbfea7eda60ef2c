"""How the portal names a person: full name, organisation, side. Reads only (portal/users.py writes);
certificates and waivers name their signers and approvers through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from portal.models import Person


@dataclass(frozen=True)
class Named:
    """A user as a certificate names them. `full_name` is empty when none was set (the username then
    stands in where a name is shown); `organisation` likewise."""

    username: str
    full_name: str
    organisation: str

    @property
    def shown(self) -> str:
        return self.full_name or self.username


def organisation_of(user: Any) -> str:
    """The user's organisation, '' when none is set (no row, or a blank one)."""
    if user is None or getattr(user, "pk", None) is None:
        return ""
    try:
        return str(user.person.organisation)
    except Person.DoesNotExist:
        return ""


def named(user: User) -> Named:
    return Named(username=user.get_username(), full_name=user.get_full_name(), organisation=organisation_of(user))
