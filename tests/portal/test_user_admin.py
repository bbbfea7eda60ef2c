"""The user admin edits a person's full name (Django's first and last name) and organisation."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from portal.people import Named, named

pytestmark = pytest.mark.django_db


def _form(user: User, organisation: str, *, existing: bool = False) -> dict[str, str]:
    return {
        "username": user.username,
        "first_name": "Vera",
        "last_name": "Vendor",
        "email": "",
        "is_active": "on",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "initial-date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "initial-date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "person-TOTAL_FORMS": "1",
        "person-INITIAL_FORMS": "1" if existing else "0",
        "person-MIN_NUM_FORMS": "0",
        "person-MAX_NUM_FORMS": "1",
        "person-0-organisation": organisation,
        "person-0-user": str(user.pk),
        **({"person-0-id": str(user.person.pk)} if existing else {}),
    }


def test_the_admin_sets_and_lists_a_users_full_name_and_organisation(client, make_user) -> None:
    root = make_user("root", superuser=True)
    root.is_staff = True
    root.save()
    vera = make_user("vera", "approver")
    client.force_login(root)
    url = reverse("admin:auth_user_change", args=[vera.pk])
    assert 'name="person-0-organisation"' in client.get(url).content.decode()

    response = client.post(url, _form(vera, "Example GPU Systems"))
    assert response.status_code == 302, response.content.decode()[:3000]
    vera.refresh_from_db()
    assert named(vera) == Named("vera", "Vera Vendor", "Example GPU Systems")
    listing = client.get(reverse("admin:auth_user_changelist")).content.decode()
    assert "Example GPU Systems" in listing and "Vendor" in listing

    # Too long: the form says so and nothing changes.
    response = client.post(url, _form(vera, "x" * 201, existing=True))
    assert response.status_code == 200 and "Ensure this value has at most 200 characters" in response.content.decode()
    vera = User.objects.get(pk=vera.pk)
    assert named(vera).organisation == "Example GPU Systems"
