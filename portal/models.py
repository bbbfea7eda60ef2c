"""What the core app stores: a person's organisation beside Django's user (whose first and last name
make the full name)."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

FULL_NAME_MAX = 300  # Django's first_name and last_name hold 150 characters each
ORGANISATION_MAX = 200  # longer than any registered company name we know of; a display field


# A newline, tab or escape in a name would break the lines a certificate and `kiln user list` print.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def no_control_characters(value: str) -> None:
    if CONTROL_CHARACTERS.search(value):
        raise ValidationError("no control characters (newlines, tabs, escapes)")


class Person(models.Model):
    """The organisation a user belongs to (a company, a lab), named with their full name wherever
    they sign a certificate or approve a waiver. A user without one has no row."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="person")
    organisation = models.CharField(max_length=ORGANISATION_MAX, blank=True, validators=[no_control_characters])

    class Meta:
        verbose_name = "organisation"

    def __str__(self) -> str:
        return f"{self.user_id}: {self.organisation}"
